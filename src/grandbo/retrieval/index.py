"""One organization's search index in memory: both arms over the same rows.

`retrieval.keeper` builds it from the store's change feed and keeps it fresh by the feed's watermarks
(the last event applied to the projection, the last vector write seen, the org's epoch). The database
stays the truth; this is a cache that can always be rebuilt from it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import structlog

from grandbo.model import EmbeddingSpace, Entry
from grandbo.ports import LEXICAL_TIE_DIGITS, VECTOR_TIE_DIGITS, IndexRow, LexicalHit, VectorHit
from grandbo.retrieval.lexical import LexicalIndex
from grandbo.retrieval.vector import VectorIndex

log = structlog.get_logger(__name__)

Hit = TypeVar("Hit", LexicalHit, VectorHit)


@dataclass(frozen=True, slots=True)
class Backlog:
    """The org's embed jobs as a store that searches vectors last counted them: `count`, when the org's entries
    stood at sequence `seq`, at `time.monotonic()` `at`."""

    count: int
    seq: int
    at: float


class OrgIndex:
    """Lexical and vector indexes of one org, rows shared, keyed by entry id."""

    ENTRY_CACHE = 20_000
    ENTRY_PREFILL = 10_000  # entries a refresh caches ahead of any read (the newest it applied)

    def __init__(self, space: EmbeddingSpace | None) -> None:
        self.space = space
        # Entries recently read or applied by a refresh (see prefill), dropped the moment a refresh shows
        # them changed.
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        # `lock` guards the index as a whole (refresh, lexical search, entry cache); the vector arm reads
        # under `vector_lock` alone, so that one recall's vector search does not wait for another's
        # lexical search. A refresh that touches vectors holds both, always `lock` first.
        self.lock = threading.RLock()
        self.vector_lock = threading.Lock()
        self.entry_seq = 0
        self.vector_seq = 0
        self.documents_seq = 0  # the org's documents version at the last check
        self.epoch: int | None = None  # the store's epoch of the org when this index was built
        self.language: str | None = None  # the org's declared language its terms are in (None: detected)
        self.backlog: Backlog | None = None  # the store's last count of the org's embed jobs (`OrgSearch.waiting`)
        self._lexical = LexicalIndex()
        self._vector = VectorIndex(space.dimension if space else 1)
        self._row_of: dict[str, int] = {}
        self._entry_of: list[str] = []
        self._hash_of: list[str] = []

    def prefill(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Cache the entries of projection rows that a refresh just applied, newest first, so that recall
        returns and re-ranks recent memories without reading them again. A row that does not make a
        valid Entry is left out (and read, and reported, when someone asks for it)."""
        fresh: dict[str, Entry] = {}
        for record in records:
            try:
                entry = Entry.model_validate(record)
            except ValueError as error:  # pydantic's ValidationError is a ValueError
                log.warning("index.entry_not_cached", entry_id=record.get("id"), error=str(error)[:200])
                continue
            fresh[entry.id] = entry
        self.cache_entries(dict(reversed(fresh.items())))  # oldest first: the newest are the last evicted

    def upsert_rows(self, rows: Iterable[IndexRow]) -> None:
        """Apply projection rows read in seq order."""
        for row in rows:
            self.upsert_entry(row.entry_id, row.active, row.terms.split(), row.content_hash)

    def upsert_entry(self, entry_id: str, active: bool, terms: Sequence[str], content_hash: str) -> None:
        """Bring one entry's row up to date with the projection."""
        self._entries.pop(entry_id, None)
        row = self._row_of.get(entry_id)
        if row is not None:
            if active and self._hash_of[row] == content_hash and self._lexical.is_active(row):
                return
            self._lexical.deactivate(row)
            self._vector.remove(row)
            if not active:
                return
        elif not active:
            return
        row = self._lexical.add(terms)
        self._row_of[entry_id] = row
        self._entry_of.append(entry_id)
        self._hash_of.append(content_hash)

    def set_vectors(self, records: Iterable[tuple[str, str, npt.NDArray[np.float32]]]) -> None:
        """Attach vectors, each (entry_id, content_hash, vector), to their entries' current rows; a vector
        computed from another text than the current one is left out. Applied in blocks of 8,192."""
        rows: list[int] = []
        vectors: list[npt.NDArray[np.float32]] = []
        for entry_id, content_hash, vector in records:
            row = self._row_of.get(entry_id)
            if row is not None and self._hash_of[row] == content_hash and self._lexical.is_active(row):
                rows.append(row)
                vectors.append(vector)
                if len(rows) == 8_192:
                    self._vector.set_many(rows, np.stack(vectors))
                    rows, vectors = [], []
        if rows:
            self._vector.set_many(rows, np.stack(vectors))

    # Both arms break ties by entry id, as the Postgres store's ORDER BY does, so that the two
    # backends rank identically even among equal scores. Scores are compared rounded (BM25 to 1e-9,
    # cosine to 1e-6): the two backends add the same numbers in different orders.

    def search_lexical(
        self,
        terms: Sequence[str],
        limit: int,
        min_coverage: float = 0.0,
        cap: float | None = None,
        floor_terms: int | None = None,
    ) -> list[LexicalHit]:
        entry_of = self._entry_of
        hits = [
            LexicalHit(entry_of[match.row], match.score, match.terms, match.coverage)
            for match in self._lexical.search(terms, limit, min_coverage, cap, floor_terms)
        ]
        return _by_score_then_id(hits, [hit.score for hit in hits], LEXICAL_TIE_DIGITS)[:limit]

    def search_vector(self, vector: npt.NDArray[np.float32], limit: int, min_similarity: float) -> list[VectorHit]:
        entry_of = self._entry_of
        rows, similarities = self._vector.top(vector, limit, min_similarity)
        hits = [VectorHit(entry_of[row], similarity) for row, similarity in zip(rows, similarities, strict=True)]
        return _by_score_then_id(hits, similarities, VECTOR_TIE_DIGITS)[:limit]

    @property
    def vector_count(self) -> int:
        """Rows that have a current vector: what the vector arm searches."""
        return self._vector.usable_count

    @property
    def active_count(self) -> int:
        """Active entries: what the lexical arm searches."""
        return self._lexical.active_count

    def cached_entries(self, entry_ids: Sequence[str]) -> dict[str, Entry]:
        found = {}
        for entry_id in entry_ids:
            entry = self._entries.get(entry_id)
            if entry is not None:
                self._entries.move_to_end(entry_id)
                found[entry_id] = entry
        return found

    def cache_entries(self, entries: dict[str, Entry]) -> None:
        self._entries.update(entries)
        while len(self._entries) > self.ENTRY_CACHE:
            self._entries.popitem(last=False)


def _by_score_then_id(hits: list[Hit], scores: list[float], digits: int) -> list[Hit]:
    """`hits`, which come best first, ordered by descending score rounded to `digits` and then entry id.

    Only hits whose rounded scores tie can move. Two scores more than one unit of the last kept digit
    apart cannot round to a tie, so the usual case costs one pass of subtractions, no rounding at all.
    """
    apart = 1.001 * 10.0**-digits
    if all(a - b > apart for a, b in pairwise(scores)):
        return hits
    keys = [round(score, digits) for score in scores]
    if all(a > b for a, b in pairwise(keys)):
        return hits
    order = sorted(range(len(hits)), key=lambda i: (-keys[i], hits[i].entry_id))
    return [hits[i] for i in order]
