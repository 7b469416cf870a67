"""The in-process search indexes of every organization, kept fresh by the store's change feed: once, for
both backends.

The store hands rows up (`ports.IndexFeed`); it knows nothing of the index. Each read first asks the
store for the org's watermarks (one small query); when they differ from the index's, the index applies
what changed since, from one consistent snapshot. Another process's writes (the CLI, a worker) are so
picked up on the next read. A recall asks once (`OrgSearch.view`) and uses that view for both arms and
for its entries.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from grandbo.model import EmbeddingSpace, Entry
from grandbo.ports import FeedSnapshot, IndexFeed, LexicalHit, Marks, VectorHit, VectorSearch
from grandbo.retrieval.index import Backlog, OrgIndex


class IndexKeeper:
    """Every organization's OrgIndex over one store. With `vectors`, the index also holds the vectors
    and computes the vector arm; without (a store that searches vectors itself) it holds the lexical
    arm and the entry cache only."""

    def __init__(
        self,
        feed: IndexFeed,
        *,
        vectors: bool,
        max_orgs: int = 64,
        seen: Callable[[str, int | None], None] | None = None,
    ) -> None:
        self._feed = feed
        self._seen = seen  # told each generation (epoch) of an org an index is started for
        self.vectors = vectors
        self.max_orgs = max_orgs
        self._lock = threading.Lock()
        self._indexes: OrderedDict[str, OrgIndex] = OrderedDict()

    def fresh(self, org_id: str) -> OrgIndex:
        """The org's index, brought up to date with the store."""
        marks = self._feed.marks(org_id)
        with self._lock:
            index = self._indexes.get(org_id)
            if index is not None:
                self._indexes.move_to_end(org_id)
        if index is not None and not self._stale(index, marks):
            index.documents_seq = marks.documents_seq
            return index
        with self._feed.snapshot(org_id) as snapshot:
            return self._refresh(org_id, index, snapshot)

    def forget(self, org_id: str) -> None:
        with self._lock:
            self._indexes.pop(org_id, None)

    def _space(self, marks: Marks) -> EmbeddingSpace | None:
        return marks.space if self.vectors else None

    def _stale(self, index: OrgIndex, marks: Marks) -> bool:
        return (
            index.epoch != marks.epoch
            or index.language != marks.language
            or index.space != self._space(marks)
            or index.entry_seq != marks.entry_seq
            or (self.vectors and marks.space is not None and index.vector_seq != marks.vector_seq)
        )

    def _refresh(self, org_id: str, index: OrgIndex | None, snapshot: FeedSnapshot) -> OrgIndex:
        marks = snapshot.marks
        if (
            index is None
            or index.epoch != marks.epoch
            or index.language != marks.language
            or index.space != self._space(marks)
            or marks.entry_seq < index.entry_seq
            or marks.vector_seq < index.vector_seq
        ):
            # Dropped, rebuilt, re-embedded or its terms derived in another language (maybe by another
            # process), or watermarks that went back: start over.
            index = OrgIndex(self._space(marks))
            index.epoch, index.language = marks.epoch, marks.language
            if self._seen is not None:
                self._seen(org_id, marks.epoch)
            with self._lock:
                self._indexes[org_id] = index
                while len(self._indexes) > self.max_orgs:
                    self._indexes.popitem(last=False)
        with index.lock, index.vector_lock:
            if marks.entry_seq > index.entry_seq:
                index.upsert_rows(snapshot.rows(index.entry_seq, active_only=index.entry_seq == 0))
                index.prefill(snapshot.recent(index.entry_seq, index.ENTRY_PREFILL))
                index.entry_seq = marks.entry_seq
            if index.space is not None and marks.vector_seq > index.vector_seq:
                index.set_vectors(snapshot.vectors(index.vector_seq))
                index.vector_seq = marks.vector_seq
            index.documents_seq = marks.documents_seq
        return index


class OrgSearch:
    """The search side of one organization: its fresh index, both arms, and entries through its cache."""

    RECOUNT_SECONDS = 5.0  # how long a store's count of a backlog that withholds the verdict stands

    def __init__(
        self,
        keeper: IndexKeeper,
        org_id: str,
        read_entries: Callable[[Sequence[str]], dict[str, Entry]],
        native: VectorSearch | None,
    ) -> None:
        self._keeper, self._org = keeper, org_id
        self._read_entries = read_entries
        self._native = None if keeper.vectors else native
        # Both arms run at once only where the vector arm computes in process (one long call that lets
        # go of the GIL). Where it waits on database round trips, the waiting thread would have to win
        # the GIL back from the lexical arm after each one: slower than taking turns.
        self.arms_in_parallel = keeper.vectors

    def view(self) -> OrgIndex:
        return self._keeper.fresh(self._org)

    def lexical(
        self,
        view: OrgIndex,
        terms: Sequence[str],
        limit: int,
        min_coverage: float,
        cap: float | None = None,
        floor_terms: int | None = None,
    ) -> list[LexicalHit]:
        with view.lock:
            return view.search_lexical(terms, limit, min_coverage, cap, floor_terms)

    def vector(
        self,
        view: OrgIndex,
        space: EmbeddingSpace,
        query: npt.NDArray[np.float32],
        limit: int,
        min_similarity: float,
    ) -> list[VectorHit]:
        if self._native is not None:
            return self._native.vector_search(self._org, space, query, limit, min_similarity)
        if view.space != space:
            return []
        with view.vector_lock:
            return view.search_vector(query, limit, min_similarity)

    def any_vector(self, view: OrgIndex, space: EmbeddingSpace) -> bool:
        """Whether `vector` had any vector of `space` to search: the index's count, or the store's probe."""
        if self._native is not None:
            return self._native.any_vector(self._org, space)
        if view.space != space:
            return False
        with view.vector_lock:
            return view.vector_count > 0

    def waiting(self, view: OrgIndex, space: EmbeddingSpace, share: float) -> tuple[int, int] | None:
        """(entries waiting for a vector of `space`, active entries) when the first is at least `share` of the
        second, else None: asked on every re-ranked recall, so it never counts the corpus.

        In process both are the index's own counts. Where the store searches vectors, the waiting ones are its
        count of the org's embed jobs (`VectorSearch.embed_backlog`), kept on the view and read again only when
        the answer may have changed: only a write adds jobs (one per event at most, and every event moves the
        entry sequence), and the worker only takes them away. So a count under `share` stands while it plus the
        events since stays under; a count over it stands for `RECOUNT_SECONDS` while the worker drains (the
        verdict comes back at most that late)."""
        with view.lock:
            total, seq, last = view.active_count, view.entry_seq, view.backlog
        if total == 0:
            return None
        if self._native is None:
            with view.vector_lock:
                missing = total - (view.vector_count if view.space == space else 0)
            return (missing, total) if missing >= share * total else None
        now = time.monotonic()
        if last is not None and last.count + max(0, seq - last.seq) < share * total:
            return None
        if last is not None and last.count >= share * total and now - last.at < self.RECOUNT_SECONDS:
            return min(last.count, total), total
        count = self._native.embed_backlog(self._org)
        with view.lock:
            view.backlog = Backlog(count, seq, now)
        return (min(count, total), total) if count >= share * total else None

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
