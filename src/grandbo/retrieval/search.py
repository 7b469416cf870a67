"""The search side of one organization (`OrgSearch`): its fresh index from the keeper, both arms (the vector arm
in process where the index holds the org's vectors, else the store's), and its entries through the index's cache."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from functools import partial

import numpy as np
import numpy.typing as npt

from grandbo.embeddings.base import Provider, embed_query, space_of
from grandbo.model import EmbeddingSpace, Entry
from grandbo.ports import LentSearch, LexicalHit, Matrix, VectorHit, VectorSearch
from grandbo.retrieval.arms import helpers
from grandbo.retrieval.codes import Pass
from grandbo.retrieval.index import Backlog, OrgIndex
from grandbo.retrieval.keeper import IndexKeeper
from grandbo.retrieval.policy import NO_FLOOR, Floor


class OrgSearch:
    """The search side of one organization: its fresh index, both arms, and entries through its cache."""

    RECOUNT_SECONDS = 5.0  # how long a store's count of a backlog that withholds the verdict stands
    KEPT_BACKLOG = 1_000  # jobs from which an empty recall's count of them stands as long (fewer: counted again)

    def __init__(
        self,
        keeper: IndexKeeper,
        org_id: str,
        read_entries: Callable[[Sequence[str]], dict[str, Entry]],
        native: VectorSearch | None,
        seen: Callable[[int | None], None] = lambda found: None,
        reading: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        self._keeper, self._org = keeper, org_id
        self._read_entries = read_entries
        self._native = native
        # Told the org's incarnation by the watermarks' read that brings the index up to date, before the index is
        # read: the handle's org is still the one it acts for (`Incarnation.seen`), and no read of its own is made.
        # The index is read without the store: a recall finding nothing would otherwise answer for a new org.
        self._seen = seen
        self.reading = reading  # the org's reads made together (`OrgDocuments.reading`)

    def _store_search(self, view: OrgIndex) -> VectorSearch | None:
        """The store's own vector search where the org's index holds no vectors (its feed offers none), else None:
        the index computes the vector arm."""
        return self._native if view.space is None else None

    def arms_in_parallel(self, view: OrgIndex) -> bool:
        """Both arms run at once only where the vector arm computes in process (one long call that lets go of
        the GIL). Where it waits on database round trips, the waiting thread would have to win the GIL back from
        the lexical arm after each one: slower than taking turns."""
        return self._store_search(view) is None

    def view(self) -> OrgIndex:
        return self._keeper.fresh(self._org, self._seen)

    def searches_ahead(self) -> bool:
        """Whether the next `view` is the org's first read in this process and may leave the vector arm to the store
        (the org's index made from its image without its vectors, `IndexKeeper.lazy_vectors`): a recall then begins
        the search ahead (`ahead`), before the view, to run while it reads the org's index image and facts."""
        return self._native is not None and self._keeper.lazy_vectors and not self._keeper.keeps(self._org)

    def ahead(self, provider: Provider, topic: str, limit: int, min_similarity: float) -> VectorAhead | None:
        """`topic` embedded by `provider` (on this thread), its vector searched by the store, begun on a helper thread
        before the org's first view is made (`searches_ahead`), for `vector` to answer with: pgvector's scan (~30 ms
        at 2,000 entries on a busy machine) runs while the caller reads the org's index image and facts. None where
        the store searches no vectors. In a transaction and on a pooled connection of its own, which set the org as
        every transaction does (row-level security); the hits are used only once the view confirmed the org's
        incarnation (`Incarnation`). That connection is taken here, by the caller (`VectorSearch.lend_search`), not by
        the helper: a recall waiting for its helper may hold a connection of the pool, and were every connection held
        so, helpers waiting for one would wait until the pool's timeout (30 s, then a 503)."""
        if self._native is None:
            return None
        native, org = self._native, self._org
        return VectorAhead(provider, topic, lambda: native.lend_search(org), limit, min_similarity)

    def purged(self) -> None:
        """An entry of the org was purged (`IndexKeeper.purged`)."""
        self._keeper.purged(self._org)

    def lexical(self, view: OrgIndex, terms: Sequence[str], limit: int, floor: Floor = NO_FLOOR) -> list[LexicalHit]:
        with view.lock:
            return view.search_lexical(terms, limit, floor)

    def begin_vector(self, view: OrgIndex, space: EmbeddingSpace, query: npt.NDArray[np.float32]) -> Pass | None:
        """The index's int8 pass of `query` made ready (`VectorIndex.begin`), for `vector` to finish; None where the
        vector arm makes none (the store's search, another space, a small index)."""
        if self._store_search(view) is not None or view.space != space:
            return None
        with view.vector_lock:
            return view.begin_vector(query)

    def vector(
        self, view: OrgIndex, space: EmbeddingSpace, query: npt.NDArray[np.float32], limit: int, min_similarity: float,
        ahead: VectorAhead | None = None, begun: Pass | None = None,
    ) -> list[VectorHit]:  # fmt: skip
        """The vector arm's hits: the store's where it searches the org's vectors (those of `ahead`, the same search
        begun before the view, if given), else the index's (`begun`: its int8 pass of `query`, from `begin_vector`;
        begun again if the codes changed since)."""
        if (native := self._store_search(view)) is not None:
            search = partial(native.vector_search, self._org, space, limit=limit, min_similarity=min_similarity)
            return ahead.hits(search) if ahead is not None else search(query)
        if view.space != space:
            return []
        with view.vector_lock:
            return view.search_vector(query, limit, min_similarity, begun)

    def any_vector(self, view: OrgIndex, space: EmbeddingSpace) -> bool:
        """Whether `vector` had any vector of `space` to search: the index's count, or the store's probe."""
        if (native := self._store_search(view)) is not None:
            return native.any_vector(self._org, space)
        if view.space != space:
            return False
        with view.lock:  # as `waiting` reads it
            return view.vector_count > 0

    def held(self, view: OrgIndex) -> tuple[int, int | None]:
        """(active entries, those with a current vector of the store's space) as the index counts them: the second
        is None where the store searches the vectors (the index holds none to count)."""
        with view.lock:  # as `waiting` reads them
            total, held = view.active_count, view.vector_count
        return total, None if self._store_search(view) is not None else held

    def waiting(self, view: OrgIndex, space: EmbeddingSpace, share: float) -> tuple[int, int] | None:
        """(entries waiting for a vector of `space`, active entries) when the first is at least `share` of the
        second, else None: asked on every re-ranked recall, so it never counts the corpus.

        In process both are the index's own counts. Where the store searches vectors, the waiting ones are its
        count of the org's embed jobs (`VectorSearch.embed_backlog`), kept on the view and read again only when
        the answer may have changed: only a write adds jobs (one per event at most, and every event moves the
        entry sequence), and the worker only takes them away. So a count under `share` stands while it plus the
        events since stays under; a count over it stands for `RECOUNT_SECONDS` while the worker drains (the
        verdict comes back at most that late)."""
        with view.lock:  # a refresh that moves vectors holds it too: no wait on another recall's vector search
            total, seq, last = view.active_count, view.entry_seq, view.backlog
            held = view.vector_count if view.space == space else 0
        if total == 0:
            return None
        native = self._store_search(view)
        if native is None:
            missing = total - held
            return (missing, total) if missing >= share * total else None
        now = time.monotonic()
        if last is not None and last.count + max(0, seq - last.seq) < share * total:
            return None
        if last is not None and last.count >= share * total and now - last.at < self.RECOUNT_SECONDS:
            return min(last.count, total), total
        count = self._recount(view, native, seq, now)
        return (min(count, total), total) if count >= share * total else None

    def backlog(self, view: OrgIndex) -> int:
        """The org's embed jobs where the store searches its vectors (`held` gave None; else 0), as an empty
        recall's note says them, which any read key can ask for again and again: a count of `KEPT_BACKLOG` jobs
        or more kept on the view stands for `RECOUNT_SECONDS` (the number is at most that old), a smaller one is
        counted again (as cheap as keeping it, and exact the moment a backfill ends). A count of 50,000 jobs took
        10-20 ms of the shared database on every empty answer."""
        if (native := self._store_search(view)) is None:
            return 0
        with view.lock:
            seq, last = view.entry_seq, view.backlog
        now = time.monotonic()
        if last is not None and last.count >= self.KEPT_BACKLOG and now - last.at < self.RECOUNT_SECONDS:
            return last.count
        return self._recount(view, native, seq, now)

    def _recount(self, view: OrgIndex, native: VectorSearch, seq: int, now: float) -> int:
        count = native.embed_backlog(self._org)
        with view.lock:
            view.backlog = Backlog(count, seq, now)
        return count

    def entries(self, view: OrgIndex, entry_ids: Sequence[str]) -> dict[str, Entry]:
        """Those entries (any status), from the index's cache where it has them, else from the store."""
        if not entry_ids:
            return {}
        with view.lock:
            found = view.cached_entries(entry_ids)
            seen_seq = view.entry_seq
        missing = [entry_id for entry_id in entry_ids if entry_id not in found]
        if missing:
            fresh = self._read_entries(missing)
            with view.lock:
                # Cache only what no refresh can have invalidated meanwhile (an entry newer than the index is
                # left to the next refresh).
                if view.entry_seq == seen_seq and all(entry.seq <= seen_seq for entry in fresh.values()):
                    view.cache_entries(fresh)
            found.update(fresh)
        return found


class VectorAhead:
    """One first recall's topic embedded on the caller's thread, then searched in the store on a helper thread
    (`OrgSearch.ahead`), on the connection lent for it once the vector is in: given back by the search, or by
    `close` (the recall did not use it, or failed). The embedding stays on the caller: a provider slow to answer holds
    neither one of the helpers every recall of the process shares nor a pooled connection (review 29). Asked for
    while still queued behind other recalls' helper tasks (a busy server), the search runs on the asking thread."""

    def __init__(
        self, provider: Provider, topic: str, lend: Callable[[], LentSearch], limit: int, min_similarity: float
    ) -> None:
        self.provider = provider
        self._bounds = space_of(provider), limit, min_similarity
        self._vector: Future[Matrix] = Future()
        self._found: Future[list[VectorHit] | None] = Future()  # None: search again (the connection was lost)
        self._lent: LentSearch | None = None
        self._job: Future[None] | None = None
        mark = time.perf_counter()
        try:
            self._vector.set_result(embed_query(provider, topic))
        except Exception as error:  # met where the recall asks for the vector (`query`), as its own call meets it
            self._vector.set_exception(error)
            self._found.set_result(None)
            return
        finally:  # the embedding's time, which the recall's total leaves out
            self.embed_ms = self.waited_ms = (time.perf_counter() - mark) * 1000
        self._lent = lend()
        self._job = helpers.submit(self._run)

    def _run(self) -> None:
        assert self._lent is not None  # lent before the task was submitted
        try:
            space, limit, min_similarity = self._bounds
            self._found.set_result(self._lent.search(space, self._vector.result(), limit, min_similarity))
        except BaseException as error:
            self._found.set_exception(error)

    def _here(self) -> None:
        """Search on this thread if still queued (once: a task begun or run is not cancelled again)."""
        if self._job is not None and not self._found.done() and self._job.cancel():
            self._run()

    def query(self) -> Matrix:
        """The topic's vector (the embedding's error, if it failed)."""
        mark = time.perf_counter()
        self._here()
        try:
            return self._vector.result()
        finally:
            self.waited_ms += (time.perf_counter() - mark) * 1000

    def hits(self, search: Callable[[Matrix], list[VectorHit]]) -> list[VectorHit]:
        """The search's hits (its error, if it failed), else `search`'s where the lent connection was lost."""
        self._here()
        vector, found = self._vector.result(), self._found.result()
        return search(vector) if found is None else found

    def close(self) -> None:
        """Its connection given back if the search has not taken it (which then answers None), the task let go if
        still queued; again: nothing."""
        if self._job is not None:
            self._job.cancel()
        if self._lent is not None:
            self._lent.close()
