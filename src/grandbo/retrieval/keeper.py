"""The in-process search indexes of every organization, kept fresh by the store's change feed: once, for
both backends.

The store hands rows up (`ports.IndexFeed`); it knows nothing of the index. Each read first asks the
store for the org's watermarks (one small query); when they differ from the index's, the index applies
what changed since, from one consistent snapshot. Another process's writes (the CLI, a worker) are so
picked up on the next read. A recall asks once (`OrgSearch.view`) and uses that view for both arms and
for its entries.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

import structlog

from grandbo.model import EmbeddingSpace
from grandbo.ports import FeedSnapshot, IndexFeed, Marks, StoredIndex
from grandbo.retrieval.index import IMAGE_FORMAT, Backlog, FormerImageError, OrgIndex, space_of, vectors_at
from grandbo.retrieval.org_locks import OrgLocks
from grandbo.retrieval.quiet import Quiet
from grandbo.retrieval.read_ahead import ReadAhead

log = structlog.get_logger(__name__)


class IndexKeeper(ReadAhead):
    """Every organization's OrgIndex over one store. An org's index holds the vectors its feed offers (the space
    in its marks) and computes the vector arm over them; where the feed offers none (a Postgres org large enough
    for its HNSW index: `PostgresStore.marks`), the index holds the lexical arm and the entry cache only, and the
    store searches the vectors (`OrgSearch`).

    With `lazy_vectors` (a store that can search an org's vectors itself, Postgres), an org's first read in the
    process does not wait for them: its index is made without them (the image's head only, `FeedSnapshot.stored`)
    and the store answers its vector arm, as for a large org; a later read of the org queues a fetch of them
    (`_fetch`, on a thread of its own, one org at a time), which makes the index again with them and puts it in
    place. The two answer alike (pgvector scans exactly while the org has no HNSW index; ties break by entry id).
    A process that reads an org once never fetches its vectors. An org with no usable image is built from its rows
    with its vectors at once (the rows are read whole either way), and its image saved for the other processes.

    The indexes kept take at most about `max_bytes` together (`bound.MemoryBound`: caches before whole indexes,
    and an index over its share of the bound before the others). An index not kept
    is loaded from its image in the store (`FeedSnapshot.stored`: one read, a few array copies) and brought up
    to date with the rows and vectors written since; it is built from the rows only when the store has no usable
    image. An index that has applied at least `save_min` rows and vectors (and a `SAVE_SHARE`-th of its size) since
    its image, or was built without one, saves a new image, on a thread of its own (`close` waits for each)."""

    SAVE_MIN = 256
    # Every process that loads the org cold applies the rows and vectors written since its image: about 0.08 ms a
    # row, where a save costs about 0.014 ms a row of the whole index (2,000 entries: 27 ms). A quarter let a
    # 2,000-entry org stay 285 rows behind: each process's first recall of it took 37 ms (46 at most), over the
    # 30 ms it is held to; a sixteenth keeps it within 127 (13 ms), and an org of 100,000 within about 3,100.
    SAVE_SHARE = 16
    # After a purge, an org's image is saved again once no purge came for this long: a purge deletes it under the
    # store's write lock (at 20,000 entries every org waited 120-230 ms), and a purge loop kept the save thread busy.
    PURGE_QUIET_SECONDS = 10.0

    def __init__(
        self, feed: IndexFeed, *, max_bytes: int = 1 << 30, seen: Callable[[str, int | None], None] | None = None,
        lazy_vectors: bool = False,
    ) -> None:  # fmt: skip
        self._feed = feed
        self.lazy_vectors = lazy_vectors
        self._seen = seen  # told each generation (epoch) of an org an index is started for
        self.max_bytes = max_bytes
        self.save_min = self.SAVE_MIN
        self._lock = threading.Lock()
        self._indexes: OrderedDict[str, OrgIndex] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._read_at: dict[str, float] = {}
        self._shed: set[str] = set()  # orgs whose caches were let go and that no read has used since
        self._total = 0
        self.counts = {"built": 0, "loaded": 0, "saved": 0, "evicted": 0, "shed": 0, "remade": 0, "fetched": 0}
        self._evicted_at: OrderedDict[str, float] = OrderedDict()  # org -> time.monotonic() it was let go
        self._warned_at: float | None = None
        # Called with the org while a new index is made, inside its store snapshot, and on the save thread
        # before an org's image is saved (tests hold them there).
        self.building: Callable[[str], None] = lambda _org: None
        self.saving: Callable[[str], None] = lambda _org: None
        self.fetching: Callable[[str], None] = lambda _org: None  # on the fetch thread, before an org's vectors
        self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grandbo-index-save")
        self._saving: set[str] = set()
        self._leaving: dict[str, OrgIndex] = {}  # let go with a save queued: held until it is saved (`_evict`)
        self._gone: weakref.WeakValueDictionary[str, OrgIndex] = weakref.WeakValueDictionary()  # read still (`_evict`)
        self._after_purge = Quiet(self.PURGE_QUIET_SECONDS, self._quiet_after_purge)
        self._fetcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grandbo-index-vectors")
        self._fetching: dict[str, Future[None]] = {}
        self._refresh_locks = OrgLocks()  # one thread at a time refreshes an org (`fresh`)
        # (org, epoch) whose image in the store a newer release saved, in a format this one cannot read: never replaced
        # by one of this format, which that release could not read (two releases on one store, in a rolling upgrade).
        self._newer_images: set[tuple[str, int | None]] = set()
        self._closed = self._fetches_closed = False

    def fresh(self, org_id: str, seen: Callable[[int | None], None] = lambda found: None) -> OrgIndex:
        """The org's index, brought up to date with the store (an index not kept: straight to the snapshot,
        which reads the watermarks itself).

        One thread at a time refreshes an org, and the others wait for it and look again: two refreshes at
        once would each load or build the same index, and the later of two snapshots could be applied first,
        so that the other found its watermarks behind the index's and took it for a store that went back (a
        reload from the image, measured under `grandbo bench tenants` on the org every client asked).

        `seen` is told the org's incarnation each read of its watermarks found, before anything of it is used
        (`Incarnation.seen`): a handle opened for a known incarnation is confirmed by the read a recall makes
        anyway, not by one of its own (review 22 M4)."""
        index = found = self._kept(org_id)
        if index is not None and not self._stale(index, marks := self._marks(org_id, seen)):
            index.documents_seq = marks.documents_seq
        else:
            with self._refresh_locks.holding(org_id):
                index = found = self._kept(org_id)  # what the refresh this thread waited for left
                if index is None or self._stale(index, marks := self._marks(org_id, seen)):
                    # No vector is read where a new index would wait for them (unless it has no image to start
                    # from: `_refresh` says so), or the store searches them.
                    vectors = not self.lazy_vectors or (index is not None and index.space is not None)
                    with self._feed.snapshot(org_id, vectors=vectors, image=index is None) as snapshot:
                        seen(snapshot.marks.incarnation)
                        made = self._refresh(org_id, index, snapshot, lazy=not vectors)
                    if made is None:  # no image to start from: its rows are read whole, so its vectors with them
                        with self._feed.snapshot(org_id) as snapshot:
                            seen(snapshot.marks.incarnation)
                            made = self._refresh(org_id, index, snapshot, lazy=False, say=False)
                    assert made is not None  # only a lazy refresh finds nothing to make an index from
                    index = made
                else:
                    index.documents_seq = marks.documents_seq
        if index is found:  # a later read than the one that made it: its vectors are fetched now, if it awaits them
            self._fetch_if_awaited(org_id, index)
        # Asked on every read, not only after a refresh: rows applied while the org's last save was in flight
        # (not queued twice) are saved by a later read, so that the next process loads them from the image.
        self._save_if_due(org_id, index)
        self._account(org_id, index)
        if index is found:  # queued once the bound has seen it: one it lets go is not cached ahead (`_precache`)
            self._precache_if_owed(org_id, index)
        return index

    def _marks(self, org_id: str, seen: Callable[[int | None], None]) -> Marks:
        marks = self._feed.marks(org_id)
        seen(marks.incarnation)
        return marks

    def keeps(self, org_id: str) -> bool:
        """Whether this process holds an index of the org (kept, or held still by a save or a read): where it does not,
        the org's next read makes one, without its vectors if `lazy_vectors` (the store then searches them)."""
        with self._lock:
            return org_id in self._indexes or org_id in self._leaving or org_id in self._gone

    def _kept(self, org_id: str) -> OrgIndex | None:
        with self._lock:
            index = self._indexes.get(org_id)
            if index is None:  # let go, and read again while its save or another read still held it: taken back
                index = self._leaving.get(org_id)
                index = self._gone.pop(org_id, None) if index is None else index
                if index is not None:
                    self._indexes[org_id] = index
            if index is not None:
                self._indexes.move_to_end(org_id)
            return index

    def forget(self, org_id: str) -> None:
        with self._lock:
            self._let_go(org_id)

    def close(self) -> None:
        """Wait for the fetches and saves queued (and those owed after a purge); fetch and save no more."""
        self._owed()
        with self._lock:
            self._fetches_closed = True
        self._fetcher.shutdown(wait=True)
        with self._lock:
            self._closed = True
        self._saver.shutdown(wait=True)

    def settle(self) -> None:
        """Wait for the saves owed after a purge, the vector fetches and read-aheads queued now and their saves (tests,
        benchmarks)."""
        self._owed()
        self._saver.submit(lambda: None).result()  # a save owed may queue a fetch
        with self._lock:
            queued = list(self._fetching.values())
            closed = self._fetches_closed
        wait(queued)
        if not closed:  # one thread in order: a read-ahead queued behind the fetches (`_precache_if_owed`) is done too
            self._fetcher.submit(lambda: None).result()
        self._saver.submit(lambda: None).result()

    def _owed(self) -> None:
        for org_id in self._after_purge.flush():  # the saves owed after a purge, now
            self._saver.submit(self._resave, org_id)

    def _stale(self, index: OrgIndex, marks: Marks) -> bool:
        return (
            index.epoch != marks.epoch
            or index.language != marks.language
            or space_of(index) != marks.space
            or index.entry_seq != marks.entry_seq
            or (index.space is not None and index.vector_seq != marks.vector_seq)
        )

    def _refresh(
        self, org_id: str, index: OrgIndex | None, snapshot: FeedSnapshot, *, lazy: bool, say: bool = True
    ) -> OrgIndex | None:
        """`index` brought up to the snapshot (made anew from the org's image, else its rows, when it must be).
        `lazy`: a new index is made without vectors, from the image's head, its vectors fetched on a later read;
        None when there is no usable image to make it from (none, a former format, damaged, other marks), and the
        caller makes it with its vectors (building from the rows lazily, then again with the vectors on a later
        read, built every org of a fresh seed twice); `say`: whether an unusable image is logged (not again by
        that second call)."""
        marks = snapshot.marks
        new = (
            index is None
            or index.epoch != marks.epoch
            or index.language != marks.language
            or space_of(index) != marks.space
            or marks.entry_seq < index.entry_seq
            # The vectors' mark goes back with rows written since in one case: a purge deleted the org's newest
            # vector (the embedded store's mark is the highest held), and the purged row, applied, drops it.
            or (marks.vector_seq < index.vector_seq and marks.entry_seq == index.entry_seq)
        )
        if new:
            # Dropped, rebuilt, re-embedded or its terms derived in another language (maybe by another
            # process), watermarks that went back, or not kept: its image, else start over.
            lazy = lazy and marks.space is not None  # its vectors fetched on a later read
            space = None if lazy else marks.space
            index = self._load(org_id, snapshot, space, say=say)
            if index is None and lazy:
                return None
            self.building(org_id)
            index = index or OrgIndex(space)
            index.epoch, index.language = marks.epoch, marks.language
            index.awaiting = marks.space if lazy else None
            index.precache_owed = marks.entry_seq > 0
            self.counts["built" if index.entry_seq == 0 else "loaded"] += 1
            self._remade(org_id)
            if self._seen is not None:
                self._seen(org_id, marks.epoch)
            with self._lock:
                self._indexes[org_id] = index
        assert index is not None
        try:
            index.apply(snapshot, new)
        except BaseException:
            if new:  # made in part (a read cut short): the next read makes it again
                self.forget(org_id)
            raise
        if new and (backlog := snapshot.backlog) is not None:
            # The org's embed jobs, counted with the marks by a store that searches its vectors (a first read's image):
            # its recall's verdict weighs them (`OrgSearch.waiting`) without counting them again.
            index.backlog = Backlog(backlog, marks.entry_seq, time.monotonic())
        return index

    def _load(
        self, org_id: str, snapshot: FeedSnapshot, space: EmbeddingSpace | None, *, say: bool = True
    ) -> OrgIndex | None:
        """The org's index with the vectors of `space` (None: without vectors, read from the image's head only),
        from its image in the store, when there is one at these marks (else None); an image it cannot use is
        logged when `say` (a fetch of vectors does not say again what the read before it said)."""
        marks, stored = snapshot.marks, snapshot.stored(vectors=space is not None)
        if stored is None:
            return None
        at = stored.marks
        if (
            (at.epoch, at.language) != (marks.epoch, marks.language)
            # An image with vectors serves an org whose vectors the store searches now: loaded without them.
            or (space is not None and at.space != space)
            or at.entry_seq > marks.entry_seq
            or at.vector_seq > marks.vector_seq
        ):
            return None
        try:
            index = OrgIndex.load(stored.data, space)
        except FormerImageError as error:  # an upgrade: each org's index built once and saved in this format
            if isinstance(error.found, int) and error.found > IMAGE_FORMAT:  # a newer release's: left for it to read
                self._newer_images.add((org_id, at.epoch))
                if say:
                    log.info("index.image_newer_format", org_id=org_id, format=error.found, now=IMAGE_FORMAT)
            elif say:
                log.info("index.image_former_format", org_id=org_id, format=error.found, now=IMAGE_FORMAT)
            return None
        except (ValueError, KeyError, TypeError, OSError, zipfile.BadZipFile) as error:  # damaged: build instead
            if say:
                log.warning("index.image_unreadable", org_id=org_id, error=str(error)[:200])
            return None
        index.entry_seq, index.vector_seq = at.entry_seq, at.vector_seq
        return index

    def purged(self, org_id: str) -> None:
        """An entry of the org was purged, and its image with it: once no purge came for `PURGE_QUIET_SECONDS` (or
        at `close`), the org's index kept here is brought up to date and its image saved again, on the save thread.
        An org this process does not keep is left to the next process to read it (not built here)."""
        with self._lock:
            if self._closed or org_id not in self._indexes:
                return
        self._after_purge.touch(org_id)

    def _quiet_after_purge(self, org_id: str) -> None:
        with contextlib.suppress(RuntimeError):  # the save thread was shut down meanwhile (`close`)
            self._saver.submit(self._resave, org_id)

    def _resave(self, org_id: str) -> None:
        try:
            index = self.fresh(org_id)
        except Exception as error:  # a cache: the next read makes the index, and its save follows
            log.warning("index.image_not_saved", org_id=org_id, error=str(error)[:200])
            return
        if index.awaiting is not None:  # made without its vectors: made with them (from the rows), then saved
            self._fetch_if_awaited(org_id, index)
            return
        with index.lock:
            index.unsaved = max(index.unsaved, 1)  # each of its rows saved before, but in the image that went
        self._save(org_id)

    def _save_if_due(self, org_id: str, index: OrgIndex) -> None:
        if index.unsaved < max(self.save_min, index.active_count // self.SAVE_SHARE):
            return
        if index.awaiting is not None:  # its image would lack them: the index made with them saves it
            self._fetch_if_awaited(org_id, index)
            return
        with self._lock:
            if self._closed or org_id in self._saving:
                return
            self._saving.add(org_id)
        # The queue holds the org's name, not its index: a process that loads many orgs cold queues a save of
        # each without keeping any index alive past the memory bound; each save takes the index kept then.
        self._saver.submit(self._save, org_id)

    def _save(self, org_id: str) -> None:
        try:
            self.saving(org_id)
            with self._lock:
                index = self._indexes.get(org_id)
                index = self._leaving.get(org_id) if index is None else index
            if index is None:  # let go meanwhile: its memory went with it
                return
            with index.lock, index.vector_lock:
                if index.unsaved == 0 or (org_id, index.epoch) in self._newer_images:
                    return
                marks = Marks(index.entry_seq, index.vector_seq, 0, index.epoch, index.space, index.language)
                dump, applied = index.dumping(), index.unsaved
            data = dump()
            del dump  # its arrays, as large as the image: not held through the save
            if not self._feed.save_index(org_id, StoredIndex(marks, data, vectors_at(data))):
                return  # refused (dropped, or purged since its marks): still unsaved, for a later read to save
            with index.lock:
                index.unsaved -= applied
            self.counts["saved"] += 1
        except Exception as error:  # a cache: a failed save only means the next process builds the index
            log.warning("index.image_not_saved", org_id=org_id, error=str(error)[:200])
        finally:
            with self._lock:
                self._saving.discard(org_id)
                self._leaving.pop(org_id, None)

    def _fetch_if_awaited(self, org_id: str, index: OrgIndex) -> None:
        if index.awaiting is None:
            return
        with self._lock:
            if not self._fetches_closed and org_id not in self._fetching:
                self._fetching[org_id] = self._fetcher.submit(self._fetch, org_id)

    def _fetch(self, org_id: str) -> None:
        """Make the org's index again with its vectors (its image whole, and the rows and vectors written since)
        and put it in place of the kept one that awaits them, its cached entries with it."""
        try:
            self.fetching(org_id)
            with self._lock:
                kept = self._indexes.get(org_id)
            if kept is None or kept.awaiting is None:  # let go or made again meanwhile
                return
            with self._feed.snapshot(org_id) as snapshot:
                marks = snapshot.marks
                if (marks.epoch, marks.language, marks.space) != (kept.epoch, kept.language, kept.awaiting):
                    return  # the next read makes the org's index again
                index = self._load(org_id, snapshot, marks.space, say=False) or OrgIndex(marks.space)
                index.epoch, index.language = marks.epoch, marks.language
                index.apply(snapshot, new=True)
            with self._refresh_locks.holding(org_id), kept.lock:
                if kept.entry_seq == index.entry_seq:  # the same rows: its cached entries hold for this one
                    index.adopt_entries(kept)
                with self._lock:
                    if self._indexes.get(org_id) is not kept:
                        return
                    self._indexes[org_id] = index
                    self.counts["fetched"] += 1
            self._account(org_id, index)
            self._save_if_due(org_id, index)  # made from an image without vectors, or none
        except Exception as error:  # the store searches its vectors meanwhile: the next read queues it again
            log.warning("index.vectors_not_fetched", org_id=org_id, error=str(error)[:200])
        finally:
            with self._lock:
                self._fetching.pop(org_id, None)
