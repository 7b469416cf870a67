"""The vector arm: exact cosine search over a contiguous float32 matrix.

Vectors are normalised on the way in, so cosine similarity is one matrix-vector product. Rows line up
with the lexical index's rows; a row without a vector (not embedded yet, or embedded by another
provider) or whose entry was retired is never returned. A similarity floor keeps the arm honest: an
unrelated entry is not "the nearest" just because nothing closer exists. From `PRUNE_FROM` rows an int8
copy of the matrix (`codes`) first rules out the rows that cannot rank, and only the rest are multiplied
in float32: the same answer for a quarter of the bytes read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from grandbo.retrieval.codes import Codes, Pass

Vector = npt.NDArray[np.float32]

# Rows from which an index keeps its int8 copy. Measured with `benchmarks/recall_latency.py`'s vectors on one core:
# at 4,096 rows the full product takes 0.21 ms and the int8 pass with its float32 rescoring about half that; at
# 2,000, 0.09 ms against 0.05, not worth a quarter more memory for each small org's index.
PRUNE_FROM = 4096
# A search whose int8 pass leaves more than this share of the rows multiplies them all instead (a query far from
# every row, or a floor under most of them): the gathered rows would cost more than the product they save.
PRUNE_SHARE = 0.25
# Rows within this of the last place come along with it. A float32 product can differ in its last bit with the
# block it is computed in (identical vectors scored apart; the full product against a gathered one), so the
# caller, which rounds similarities to VECTOR_TIE_DIGITS and breaks ties by entry id, sees every near-tie.
NEAR_TIE = 1e-6


@dataclass(slots=True)  # read-only; not frozen, whose __init__ costs 4x (hundreds per recall)
class VectorMatch:
    """One document the vector arm found: its row and cosine similarity to the query."""

    row: int
    similarity: float

    @property
    def distance(self) -> float:
        """Cosine distance, 1 - similarity."""
        return 1.0 - self.similarity


def normalize(vector: npt.ArrayLike) -> Vector:
    """A float32 unit vector (the zero vector stays zero)."""
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


class VectorIndex:
    """Exact cosine search over rows 0..n-1 of one embedding space.

    The vectors are the rows of a (capacity x dimension) matrix: a search multiplies it by the query (on these
    machines as fast as the column-per-vector layout), or gathers the rows its int8 copy let through, which
    this layout keeps contiguous (0.02 ms for 300 rows of 384 floats, against 0.5 ms for as many columns).
    """

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._matrix = np.zeros((0, dimension), dtype=np.float32)  # row j is row j's vector
        self._usable = np.zeros(0, dtype=bool)
        self._codes: Codes | None = None  # from PRUNE_FROM rows
        self._n_rows = 0
        self._n_usable = 0

    @classmethod
    def restore(
        cls,
        matrix: npt.NDArray[np.float32],
        usable: npt.NDArray[np.bool_],
        codes: dict[str, npt.NDArray[np.generic]] | None = None,
    ) -> VectorIndex:
        """An index of rows 0..n-1 from what `rows` gave (vectors normalised already: taken as they are, float32
        and bool, with the int8 copy's arrays where it gave them; made here otherwise, for an index that needs
        one)."""
        index = cls(matrix.shape[1])
        if not matrix.flags.aligned:  # numpy would multiply it in its own loop, not through BLAS (3x slower)
            matrix = matrix.copy()
        index._matrix, index._usable = matrix, usable  # maybe read-only: copied when first written to
        index._n_rows, index._n_usable = matrix.shape[0], int(np.count_nonzero(usable))
        if codes is not None:
            index._codes = Codes(**codes)  # type: ignore[arg-type]
        elif index._n_rows >= PRUNE_FROM:
            index._codes = Codes.of(matrix, index._n_rows)
        return index

    def rows(
        self, rows: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_], dict[str, npt.NDArray[np.generic]] | None]:
        """The vectors of `rows` (a len(rows) x dimension matrix, zero where a row has none), which rows have one,
        and their int8 copy if this index keeps one, for `restore`."""
        inside = rows[rows < self._n_rows]
        matrix = np.zeros((len(rows), self.dimension), dtype=np.float32)
        usable = np.zeros(len(rows), dtype=bool)
        matrix[: len(inside)] = self._matrix[inside]
        usable[: len(inside)] = self._usable[inside]
        if len(rows) < PRUNE_FROM:
            return matrix, usable, None
        codes = Codes.empty(len(rows), self.dimension)
        if self._codes is None:  # fewer vectors than PRUNE_FROM: the few there are coded here, not by each loader
            have = np.flatnonzero(usable)
            codes.write(have, matrix[have])
        else:
            for name, part in self._codes.arrays(inside).items():
                getattr(codes, name)[: len(inside)] = part
        return matrix, usable, codes.arrays()

    @property
    def nbytes(self) -> int:
        return int(self._matrix.nbytes + self._usable.nbytes + (self._codes.nbytes if self._codes else 0))

    @property
    def usable_count(self) -> int:
        return self._n_usable

    def set(self, row: int, vector: npt.ArrayLike) -> None:
        """Store (or replace) the vector of `row`."""
        array = np.asarray(vector, dtype=np.float32)
        if array.shape != (self.dimension,):
            raise ValueError(f"vector of shape {array.shape} in an index of dimension {self.dimension}")
        self.set_many([row], array[None, :])

    def set_many(self, rows: Sequence[int], vectors: npt.ArrayLike) -> None:
        """Store (or replace) the vectors of many rows (one per row of `vectors`; a repeated row keeps its
        last)."""
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape != (len(rows), self.dimension):
            raise ValueError(f"vectors of shape {matrix.shape} for {len(rows)} rows of dimension {self.dimension}")
        if not len(rows):
            return
        at = np.asarray(rows, dtype=np.int64)
        _, last = np.unique(at[::-1], return_index=True)  # each row's last occurrence, counted from the end
        if len(last) < len(at):
            keep = np.sort(len(at) - 1 - last)
            at, matrix = at[keep], matrix[keep]
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)  # zero stays zero
        self._grow(int(at.max()) + 1)
        self._writable()
        self._matrix[at] = matrix
        self._n_usable += int(np.count_nonzero(~self._usable[at]))
        self._usable[at] = True
        if self._codes is not None:
            self._codes.write(at, matrix)
        elif self._n_rows >= PRUNE_FROM:
            self._codes = Codes.of(self._matrix[: self._n_rows], len(self._matrix))

    def reserve(self, rows: int) -> None:
        """Room for `rows` rows at once (an index made from an org's rows, before their vectors): grown block by
        block, the matrix was copied at each growth and the new and old copies held together."""
        if rows > len(self._matrix):
            self._grow(rows)  # new arrays, written to (an image's, read in place, are copied once, not twice)

    def remove(self, row: int) -> None:
        """Stop returning `row` (retired, superseded, or its vector went stale)."""
        if row < self._n_rows and self._usable[row]:
            self._writable()
            self._usable[row] = False
            self._matrix[row] = 0.0
            if self._codes is not None:
                self._codes.clear(row)
            self._n_usable -= 1

    def search(self, query: npt.ArrayLike, limit: int, min_similarity: float) -> list[VectorMatch]:
        """The `limit` most similar usable rows with similarity >= `min_similarity`, best first (ties by
        row), plus any row tied with the last of them."""
        rows, similarities = self.top(query, limit, min_similarity)
        return [VectorMatch(row, similarity) for row, similarity in zip(rows, similarities, strict=True)]

    def begin(self, query: npt.ArrayLike) -> Pass | None:
        """`query`'s int8 pass made ready, for its one kernel call to run anywhere before `top` (given it) needs
        the products; None where a search makes no int8 pass."""
        if self._codes is None or self._n_rows < PRUNE_FROM or self._n_usable == 0:
            return None
        return self._codes.begin(normalize(query), self._n_rows)

    def top(
        self, query: npt.ArrayLike, limit: int, min_similarity: float, begun: Pass | None = None
    ) -> tuple[list[int], list[float]]:
        """What `search` finds, as its rows and their similarities (no object per match); `begun`: the same
        query's pass (`begin`)."""
        if self._n_usable == 0 or limit <= 0:
            return [], []
        q = begun.query if begun is not None else normalize(query)
        n = self._n_rows
        usable = self._usable[:n]
        if self._codes is not None and n >= PRUNE_FROM:
            rows = self._codes.candidates(q, usable, self._n_usable, limit, min_similarity, NEAR_TIE, begun)
            if len(rows) <= PRUNE_SHARE * n:
                return _best(rows, self._matrix[rows] @ q, limit, min_similarity)
        scores = self._matrix[:n] @ q
        if self._n_usable < n:
            # Unusable rows are zero vectors (similarity 0); a floor at or below 0 must still skip them.
            scores[~usable] = -np.inf
        return _best(np.arange(n), scores, limit, min_similarity)

    def _writable(self) -> None:
        if not (self._matrix.flags.writeable and self._usable.flags.writeable):  # restored from an image
            self._matrix, self._usable = self._matrix.copy(), self._usable.copy()
        if self._codes is not None:
            self._codes.writable()

    def _grow(self, size: int) -> None:
        # By an eighth (64 rows at least), not double: the matrix is most of an index's memory, and a
        # doubled one after an org's first write once loaded counted twice against the memory every kept
        # index shares (`IndexKeeper`), so that a few hundred orgs' writes let others go. Still a copy per
        # eighth added at most: amortized constant per vector.
        if size > len(self._matrix):
            held = len(self._matrix)
            capacity = max(size, held + max(held // 8, 64))
            grown = np.zeros((capacity, self.dimension), dtype=np.float32)
            grown[: self._n_rows] = self._matrix[: self._n_rows]
            self._matrix = grown
            usable = np.zeros(capacity, dtype=bool)
            usable[: self._n_rows] = self._usable[: self._n_rows]
            self._usable = usable
            if self._codes is not None:
                self._codes.grow(capacity, self._n_rows)
        self._n_rows = max(self._n_rows, size)


def _best(
    rows: npt.NDArray[np.int64], scores: npt.NDArray[np.float32], limit: int, floor: float
) -> tuple[list[int], list[float]]:
    """Of `rows` and their `scores` (-inf for a row that may not be returned), the `limit` best at or above
    `floor`, best first, ties by row, with any row within NEAR_TIE of the last of them. The limit-th best score (a
    partition, no sort) and the floor make one threshold; the rows at or above it are the answer, and only they
    are sorted."""
    threshold = floor
    if len(rows) > limit:
        threshold = max(threshold, float(np.partition(scores, len(rows) - limit)[len(rows) - limit]) - NEAR_TIE)
    kept = np.flatnonzero(scores >= threshold)
    order = kept[np.lexsort((rows[kept], -scores[kept]))]
    return rows[order].tolist(), scores[order].tolist()
