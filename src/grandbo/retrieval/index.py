"""One organization's search index in memory: both arms over the same rows.

`retrieval.keeper` builds it from the store's change feed and keeps it fresh by the feed's watermarks
(the last event applied to the projection, the last vector write seen, the org's epoch). The database
stays the truth; this is a cache that can always be rebuilt from it.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import structlog

from grandbo.model import EmbeddingSpace, Entry
from grandbo.ports import LEXICAL_TIE_DIGITS, VECTOR_TIE_DIGITS, FeedSnapshot, IndexRow, LexicalHit, VectorHit
from grandbo.retrieval.codes import NAMES, SLACK, Pass, slack
from grandbo.retrieval.lexical import LexicalIndex
from grandbo.retrieval.policy import NO_FLOOR, Floor
from grandbo.retrieval.postings import LexicalImage
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
        # The space whose vectors this index, made without them, waits for (`IndexKeeper`): meanwhile the store
        # searches them. None once they are held (`space`), or where the index is not to hold any.
        self.awaiting: EmbeddingSpace | None = None
        self.precache_owed = False  # made anew with its entries left to the reads: cached ahead (`IndexKeeper`)
        self._lexical = LexicalIndex()
        self._vector = VectorIndex(space.dimension if space else 1)
        self._row_of: dict[str, int] = {}
        self._entry_of: list[str] = []
        self._hash_of: list[str] = []
        self._entry_bytes = 0  # about what the cached entries take
        self.unsaved = 0  # rows and vectors applied since the image in the store (`IndexKeeper.save_every`)

    # An image of the index, for the store (`dump`, `load`): the active rows only, their ids and hashes, the
    # vocabulary, the terms in doc-major layout and the vectors, as raw arrays behind a JSON header. Loading it
    # takes a few array copies; building the same index row by row takes a Python loop over every term of every
    # entry (about 30 times longer at 2,000 entries).

    def dump(self) -> bytes:
        """The index as bytes for `load` (the caller holds both locks)."""
        return self.dumping()()

    def dumping(self) -> Callable[[], bytes]:
        """The index's arrays for `load`, copied now (the caller holds both locks), and what writes them as bytes
        once the locks are let go (a third of a dump's time, that the org's recalls need not wait for)."""
        image, rows = self._lexical.export()
        kept = rows.tolist()
        arrays: dict[str, npt.NDArray[Any]] = {
            "ids": _text(json.dumps([self._entry_of[row] for row in kept])),
            "hashes": _text(json.dumps([self._hash_of[row] for row in kept])),
            "vocabulary": _text("\n".join(image.vocabulary)),  # terms hold no whitespace (they are split on it)
            "lengths": image.lengths,
        }
        for layout, parts in (("postings", image.postings), ("documents", image.documents)):
            for name, part in zip(("indptr", "ids", "counts"), parts, strict=True):
                arrays[f"{layout}.{name}"] = part.astype(np.min_scalar_type(int(part.max(initial=0))))
        described: dict[str, Any] = {"format": IMAGE_FORMAT}
        if self.space is not None:
            arrays["matrix"], arrays["usable"], codes = self._vector.rows(rows)
            if codes is not None:
                arrays.update({f"codes.{name}": part for name, part in codes.items()})
                described["slack"] = slack(self.space.dimension)  # the rounding slack each row's bound holds
        described["arrays"] = {name: [array.dtype.str, array.shape] for name, array in arrays.items()}
        return partial(_image_bytes, described, arrays)

    @classmethod
    def load(cls, data: bytes, space: EmbeddingSpace | None) -> OrgIndex:
        """The index `dump` wrote (ValueError if it is not one of this format and space, or damaged). Its
        arrays are read in place from `data` (read-only; the vectors are copied when first written to). An image
        with vectors loads without them when `space` is None (the store searches them now, or until they are
        fetched): `data` may then end where they start (`vectors_at`); where it holds them, its other arrays are
        copied, so that the image's vectors are not kept alive by them."""
        size = int.from_bytes(data[:4], "little")
        head = json.loads(data[4 : 4 + size])
        if head.get("format") not in READ_FORMATS:
            raise FormerImageError(head.get("format"))
        if space is not None and "matrix" not in head["arrays"]:
            raise ValueError("an index image of another space")
        dropped = () if space is not None else ("matrix", "usable", *(f"codes.{name}" for name in NAMES))
        arrays, offset, start = {}, 4 + size, None  # start: where the vectors start
        for name, (dtype, shape) in head["arrays"].items():
            count, offset = int(np.prod(shape)), _aligned(offset)
            start = offset if name == "matrix" else start
            if name not in dropped:
                arrays[name] = np.frombuffer(data, dtype=np.dtype(dtype), count=count, offset=offset).reshape(shape)
            offset += count * np.dtype(dtype).itemsize
        if space is None and start is not None and len(data) > start:
            arrays = {name: array.copy() for name, array in arrays.items()}
        index = cls(space)
        index._entry_of, index._hash_of = json.loads(arrays["ids"].tobytes()), json.loads(arrays["hashes"].tobytes())
        vocabulary = arrays["vocabulary"].tobytes().decode().split("\n") if len(arrays["vocabulary"]) else []
        index._row_of = dict(zip(index._entry_of, range(len(index._entry_of)), strict=True))
        if not len(index._hash_of) == len(index._entry_of) == len(arrays["lengths"]):
            raise ValueError("a damaged index image")
        index._lexical = LexicalIndex.restore(
            LexicalImage(
                vocabulary,
                (arrays["postings.indptr"], arrays["postings.ids"], arrays["postings.counts"]),
                (arrays["documents.indptr"], arrays["documents.ids"], arrays["documents.counts"]),
                arrays["lengths"],
                sorted_terms=head["format"] >= 4,
            )
        )
        if space is not None:
            count = len(index._entry_of)
            if arrays["matrix"].shape != (count, space.dimension):
                raise ValueError("an index image of another dimension")
            codes = {name.removeprefix("codes."): part for name, part in arrays.items() if name.startswith("codes.")}
            shapes = {"codes": ((count, space.dimension), np.int8)} | {
                name: ((count,), np.float32) for name in NAMES if name != "codes"
            }
            if codes and (
                set(codes) != set(NAMES)
                or any((part.shape, part.dtype) != shapes[name] for name, part in codes.items())
            ):
                raise ValueError("a damaged index image")
            # An image saved before the slack grew with the dimension holds SLACK in each row's bound.
            held, needed = float(head.get("slack", SLACK)), slack(space.dimension)
            if codes and held < needed:
                codes["bounds"] = codes["bounds"] + np.float32(needed - held)
            index._vector = VectorIndex.restore(arrays["matrix"], arrays["usable"], codes or None)
        return index

    def nbytes(self) -> int:
        """About what the index takes in memory (what `IndexKeeper` bounds)."""
        rows = len(self._entry_of) * 250  # an id, a hash, a dict slot
        return self._lexical.nbytes() + (self._vector.nbytes if self.space else 0) + rows + self._entry_bytes

    def drop_caches(self) -> None:
        """Let go of what reads cached (the entries, the lexical arm's term weights), keeping the index itself:
        what `IndexKeeper` sheds first when the kept indexes take too much (the caller holds `lock`)."""
        self._entries.clear()
        self._entry_bytes = 0
        self._lexical.drop_caches()

    def apply(self, snapshot: FeedSnapshot, new: bool) -> None:
        """Bring the index up to the snapshot's marks: the rows and vectors written since its own (`IndexKeeper`).
        `new`: an index just made, which leaves its entries to the reads (no row parsed that no recall returns)."""
        marks = snapshot.marks
        with self.lock, self.vector_lock:
            if marks.entry_seq > self.entry_seq:
                self.unsaved += self.upsert_rows(snapshot.rows(self.entry_seq, active_only=self.entry_seq == 0))
                if not new:
                    self.prefill(snapshot.recent(self.entry_seq, self.ENTRY_PREFILL))
                self.entry_seq = marks.entry_seq
            if self.space is not None:
                if marks.vector_seq > self.vector_seq:
                    self.unsaved += self.set_vectors(snapshot.vectors(self.vector_seq))
                self.vector_seq = marks.vector_seq  # lower after a purge of the newest vector (`IndexKeeper._refresh`)
            self.documents_seq = marks.documents_seq

    def prefill(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Cache the entries of projection rows that a refresh just applied, newest first, so that recall
        returns and re-ranks recent memories without reading them again. A row that does not make a
        valid Entry is left out (and read, and reported, when someone asks for it)."""
        self.cache_entries(dict(reversed(entries_of(records).items())))  # oldest first: the newest are the last evicted

    def cache_behind(self, entries: dict[str, Entry]) -> None:
        """Cache `entries` (newest first) behind those cached, as the first to go, where not cached already and
        while the cache has room: read ahead of any recall (`IndexKeeper._precache`), not by one."""
        for entry_id, entry in entries.items():
            if len(self._entries) >= self.ENTRY_CACHE:
                return
            if entry_id not in self._entries:
                self._entries[entry_id] = entry
                self._entries.move_to_end(entry_id, last=False)
                self._entry_bytes += _entry_size(entry)

    def upsert_rows(self, rows: Iterable[IndexRow]) -> int:
        """Apply projection rows read in seq order; return how many."""
        if not self._entry_of:  # an empty index: made at once from the rows (`LexicalIndex.built`)
            return self._built(rows)
        applied = 0
        for row in rows:
            self.upsert_entry(row.entry_id, row.active, row.terms.split(), row.content_hash)
            applied += 1
        return applied

    def _built(self, rows: Iterable[IndexRow]) -> int:
        """This empty index made from `rows` as they are read: each entry's first active row at once, any later row
        of the same entry applied after it, in turn. Nothing here changes unless every row was read."""
        entry_of: list[str] = []
        hash_of: list[str] = []
        row_of: dict[str, int] = {}
        again: list[IndexRow] = []
        read = 0

        def documents() -> Iterator[list[str]]:
            nonlocal read
            for row in rows:
                read += 1
                if row.entry_id in row_of:
                    again.append(row)
                elif row.active:
                    row_of[row.entry_id] = len(entry_of)
                    entry_of.append(row.entry_id)
                    hash_of.append(row.content_hash)
                    yield row.terms.split()

        self._lexical = LexicalIndex.built(documents())
        self._entry_of, self._hash_of, self._row_of = entry_of, hash_of, row_of
        for row in again:
            self.upsert_entry(row.entry_id, row.active, row.terms.split(), row.content_hash)
        return read

    def upsert_entry(self, entry_id: str, active: bool, terms: Sequence[str], content_hash: str) -> None:
        """Bring one entry's row up to date with the projection."""
        self._uncache(entry_id)
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

    def set_vectors(self, records: Iterable[tuple[str, str, npt.NDArray[np.float32]]]) -> int:
        """Attach vectors, each (entry_id, content_hash, vector), to their entries' current rows; a vector
        computed from another text than the current one is left out. Applied in blocks of 2,048 (each block's
        vectors are held twice, as read and stacked, and its normalised copy once more). Return how many records
        were read."""
        rows: list[int] = []
        vectors: list[npt.NDArray[np.float32]] = []
        read = 0
        self._vector.reserve(len(self._entry_of))
        for entry_id, content_hash, vector in records:
            read += 1
            row = self._row_of.get(entry_id)
            if row is not None and self._hash_of[row] == content_hash and self._lexical.is_active(row):
                rows.append(row)
                vectors.append(vector)
                if len(rows) == 2_048:
                    self._vector.set_many(rows, np.stack(vectors))
                    rows, vectors = [], []
        if rows:
            self._vector.set_many(rows, np.stack(vectors))
        return read

    # Both arms break ties by entry id, as the Postgres store's ORDER BY does, so that the two
    # backends rank identically even among equal scores. Scores are compared rounded (BM25 to 1e-9,
    # cosine to 1e-6): the two backends add the same numbers in different orders.

    def search_lexical(self, terms: Sequence[str], limit: int, floor: Floor = NO_FLOOR) -> list[LexicalHit]:
        entry_of = self._entry_of
        rows, scores, shares, coverages = self._lexical.top(terms, limit, floor.min_coverage, floor.cap, floor.terms)
        hits = [
            LexicalHit(entry_of[row], score, terms, coverage)
            for row, score, terms, coverage in zip(rows, scores, shares, coverages, strict=True)
        ]
        return _by_score_then_id(hits, scores, LEXICAL_TIE_DIGITS)[:limit]

    def begin_vector(self, vector: npt.NDArray[np.float32]) -> Pass | None:
        return self._vector.begin(vector)

    def search_vector(
        self, vector: npt.NDArray[np.float32], limit: int, min_similarity: float, begun: Pass | None = None
    ) -> list[VectorHit]:
        entry_of = self._entry_of
        rows, similarities = self._vector.top(vector, limit, min_similarity, begun)
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

    def adopt_entries(self, other: OrgIndex) -> None:
        """Cache the entries `other`, an index of the same rows, has cached (the caller holds its lock)."""
        self.cache_entries(dict(other._entries))

    def cached_entries(self, entry_ids: Sequence[str]) -> dict[str, Entry]:
        found = {}
        for entry_id in entry_ids:
            entry = self._entries.get(entry_id)
            if entry is not None:
                self._entries.move_to_end(entry_id)
                found[entry_id] = entry
        return found

    def cache_entries(self, entries: dict[str, Entry]) -> None:
        for entry_id, entry in entries.items():
            self._uncache(entry_id)
            self._entries[entry_id] = entry
            self._entry_bytes += _entry_size(entry)
        while len(self._entries) > self.ENTRY_CACHE:
            self._uncache(next(iter(self._entries)))

    def _uncache(self, entry_id: str) -> None:
        entry = self._entries.pop(entry_id, None)
        if entry is not None:
            self._entry_bytes -= _entry_size(entry)


class FormerImageError(ValueError):
    """An image another version of Grandbo saved, in format `found`: the index is built again once, not damaged."""

    def __init__(self, found: object) -> None:
        super().__init__(f"an index image of another format ({found}); this version reads format {IMAGE_FORMAT}")
        self.found = found


# 4: the vocabulary sorted by name, term ids in its order, so that a load makes no dict of it (3: in the order the
# terms were met, still read, its dict made at the load as before; 3 was the first with a vector per row of the
# matrix, and an int8 copy of large indexes; 2 had a vector per column; each array starts on a multiple of 64 bytes
# since 2, where 1 packed them and misaligned the matrix). An image of another format is refused, and the index built
# from the store again (one of a newer format is left in place for the release that wrote it: `IndexKeeper._load`).
IMAGE_FORMAT = 4
READ_FORMATS = (3, IMAGE_FORMAT)


def vectors_at(data: bytes) -> int | None:
    """Where the vectors of the image `data` start (`dump` writes them last): its first that many bytes are an
    image `load` reads without them. None for an image without vectors."""
    size = int.from_bytes(data[:4], "little")
    offset = 4 + size
    for name, (dtype, shape) in json.loads(data[4 : 4 + size])["arrays"].items():
        if name == "matrix":
            return _aligned(offset)
        offset = _aligned(offset) + int(np.prod(shape)) * np.dtype(dtype).itemsize
    return None


def _image_bytes(described: dict[str, Any], arrays: dict[str, npt.NDArray[Any]]) -> bytes:
    """An image's bytes: its JSON head, then each array on a 64-byte boundary (`_aligned`)."""
    head = json.dumps(described).encode()
    pieces, offset = [len(head).to_bytes(4, "little"), head], 4 + len(head)
    for array in arrays.values():
        pieces += [bytes(_aligned(offset) - offset), array.tobytes()]
        offset = _aligned(offset) + array.nbytes
    return b"".join(pieces)


def _aligned(offset: int) -> int:
    """`offset` rounded up to the next multiple of 64: where an image's next array starts. Read in place from
    the image, an array at an offset that is not a multiple of its item size is misaligned, and numpy computes
    a product over a misaligned matrix in its own loop rather than through BLAS (3 times slower measured)."""
    return -(-offset // 64) * 64


def entries_of(records: Iterable[Mapping[str, Any]]) -> dict[str, Entry]:
    """The entries of projection rows, in their order; a row that does not make a valid Entry is left out."""
    found: dict[str, Entry] = {}
    for record in records:
        try:
            entry = Entry.model_validate(record)
        except ValueError as error:  # pydantic's ValidationError is a ValueError
            log.warning("index.entry_not_cached", entry_id=record.get("id"), error=str(error)[:200])
            continue
        found[entry.id] = entry
    return found


def entries_size(entries: Iterable[Entry]) -> int:
    """About what `entries` take cached."""
    return sum(_entry_size(entry) for entry in entries)


def _entry_size(entry: Entry) -> int:
    return 800 + 2 * (len(entry.title) + len(entry.body)) + 60 * (len(entry.tags) + len(entry.services))


def _text(text: str) -> npt.NDArray[np.uint8]:
    return np.frombuffer(text.encode(), dtype=np.uint8)


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


def space_of(index: OrgIndex) -> EmbeddingSpace | None:
    """The space the index answers for: that of the vectors it holds, or awaits."""
    return index.space if index.space is not None else index.awaiting
