"""The vector arm: exact cosine search over a contiguous float32 matrix.

Vectors are normalised on the way in, so cosine similarity is one matrix-vector product. Rows line up
with the lexical index's rows; a row without a vector (not embedded yet, or embedded by another
provider) or whose entry was retired is never returned. A similarity floor keeps the arm honest: an
unrelated entry is not "the nearest" just because nothing closer exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


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

    The vectors are stored as the columns of a (dimension x capacity) matrix, so that a search is the
    query times the matrix: BLAS then streams each dimension's contiguous run of values once, which
    on the machines measured here took 0.6-0.8 of the time of the row-per-vector product.
    """

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._matrix = np.zeros((dimension, 0), dtype=np.float32)  # column j is row j's vector
        self._usable = np.zeros(0, dtype=bool)
        self._n_rows = 0
        self._n_usable = 0

    @classmethod
    def restore(cls, matrix: npt.NDArray[np.float32], usable: npt.NDArray[np.bool_]) -> VectorIndex:
        """An index of rows 0..n-1 from what `columns` gave (vectors normalised already: taken as they are,
        float32 and bool)."""
        index = cls(matrix.shape[0])
        if not matrix.flags.aligned:  # numpy would multiply it in its own loop, not through BLAS (3x slower)
            matrix = matrix.copy()
        index._matrix, index._usable = matrix, usable  # maybe read-only: copied when first written to
        index._n_rows, index._n_usable = matrix.shape[1], int(np.count_nonzero(usable))
        return index

    def columns(self, rows: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """The vectors of `rows` (a dimension x len(rows) matrix, zero where a row has none) and which rows
        have one, for `restore`."""
        inside = rows[rows < self._n_rows]
        matrix = np.zeros((self.dimension, len(rows)), dtype=np.float32)
        usable = np.zeros(len(rows), dtype=bool)
        matrix[:, : len(inside)] = self._matrix[:, inside]
        usable[: len(inside)] = self._usable[inside]
        return matrix, usable

    @property
    def nbytes(self) -> int:
        return int(self._matrix.nbytes + self._usable.nbytes)

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
        last). Writing a block of columns at once is what keeps this layout cheap to fill."""
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
        self._matrix[:, at] = matrix.T
        self._n_usable += int(np.count_nonzero(~self._usable[at]))
        self._usable[at] = True

    def remove(self, row: int) -> None:
        """Stop returning `row` (retired, superseded, or its vector went stale)."""
        if row < self._n_rows and self._usable[row]:
            self._writable()
            self._usable[row] = False
            self._matrix[:, row] = 0.0
            self._n_usable -= 1

    def search(self, query: npt.ArrayLike, limit: int, min_similarity: float) -> list[VectorMatch]:
        """The `limit` most similar usable rows with similarity >= `min_similarity`, best first (ties by
        row), plus any row tied with the last of them."""
        rows, similarities = self.top(query, limit, min_similarity)
        return [VectorMatch(row, similarity) for row, similarity in zip(rows, similarities, strict=True)]

    def top(self, query: npt.ArrayLike, limit: int, min_similarity: float) -> tuple[list[int], list[float]]:
        """What `search` finds, as its rows and their similarities (no object per match)."""
        if self._n_usable == 0 or limit <= 0:
            return [], []
        q = normalize(query)
        n = self._n_rows
        scores = q @ self._matrix[:, :n]
        if self._n_usable < n:
            # Unusable rows are zero vectors (similarity 0); a floor at or below 0 must still skip them.
            scores[~self._usable[:n]] = -np.inf
        # The limit-th best score (a partition, no sort) and the floor make one threshold; the rows at
        # or above it are the answer, rows tied with the last place included, and only they are sorted.
        threshold = min_similarity
        if n > limit:
            threshold = max(threshold, float(np.partition(scores, n - limit)[n - limit]))
        rows = np.flatnonzero(scores >= threshold)
        top = rows[np.lexsort((rows, -scores[rows]))]
        return top.tolist(), scores[top].tolist()

    def _writable(self) -> None:
        if not (self._matrix.flags.writeable and self._usable.flags.writeable):  # restored from an image
            self._matrix, self._usable = self._matrix.copy(), self._usable.copy()

    def _grow(self, size: int) -> None:
        # By an eighth (64 columns at least), not double: the matrix is most of an index's memory, and a
        # doubled one after an org's first write once loaded counted twice against the memory every kept
        # index shares (`IndexKeeper`), so that a few hundred orgs' writes let others go. Still a copy per
        # eighth added at most: amortized constant per vector.
        if size > self._matrix.shape[1]:
            held = self._matrix.shape[1]
            capacity = max(size, held + max(held // 8, 64))
            grown = np.zeros((self.dimension, capacity), dtype=np.float32)
            grown[:, : self._n_rows] = self._matrix[:, : self._n_rows]
            self._matrix = grown
            usable = np.zeros(capacity, dtype=bool)
            usable[: self._n_rows] = self._usable[: self._n_rows]
            self._usable = usable
        self._n_rows = max(self._n_rows, size)
