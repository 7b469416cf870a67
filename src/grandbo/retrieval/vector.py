"""The vector arm: exact cosine search over a contiguous float32 matrix.

Vectors are normalised on the way in, so cosine similarity is one matrix-vector product. Rows line up
with the lexical index's rows; a row without a vector (not embedded yet, or embedded by another
provider) or whose entry was retired is never returned. A similarity floor keeps the arm honest: an
unrelated entry is not "the nearest" just because nothing closer exists.
"""

from __future__ import annotations

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
    """Exact cosine search over rows 0..n-1 of one embedding space."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._matrix = np.zeros((0, dimension), dtype=np.float32)
        self._usable = np.zeros(0, dtype=bool)
        self._n_rows = 0
        self._n_usable = 0

    @property
    def usable_count(self) -> int:
        return self._n_usable

    def set(self, row: int, vector: npt.ArrayLike) -> None:
        """Store (or replace) the vector of `row`."""
        array = normalize(vector)
        if array.shape != (self.dimension,):
            raise ValueError(f"vector of shape {array.shape} in an index of dimension {self.dimension}")
        self._grow(row + 1)
        self._matrix[row] = array
        if not self._usable[row]:
            self._usable[row] = True
            self._n_usable += 1

    def remove(self, row: int) -> None:
        """Stop returning `row` (retired, superseded, or its vector went stale)."""
        if row < self._n_rows and self._usable[row]:
            self._usable[row] = False
            self._matrix[row] = 0.0
            self._n_usable -= 1

    def search(self, query: npt.ArrayLike, limit: int, min_similarity: float) -> list[VectorMatch]:
        """The `limit` most similar usable rows with similarity >= `min_similarity`, best first (ties by
        row), plus any row tied with the last of them."""
        if self._n_usable == 0 or limit <= 0:
            return []
        q = normalize(query)
        n = self._n_rows
        scores = self._matrix[:n] @ q
        if self._n_usable < n:
            # Unusable rows are zero vectors (similarity 0); a floor at or below 0 must still skip them.
            scores[~self._usable[:n]] = -np.inf
        # The floor usually leaves few rows (unrelated text sits below it), so it goes first.
        rows = np.flatnonzero(scores >= min_similarity)
        if len(rows) > limit:
            kept = scores[rows]
            boundary = kept[np.argpartition(kept, len(rows) - limit)[len(rows) - limit]]
            rows = rows[kept >= boundary]  # ties with the last place come along
        top = rows[np.lexsort((rows, -scores[rows]))]
        if len(top) > limit:
            top = top[: limit + int(np.count_nonzero(scores[top[limit:]] == scores[top[limit - 1]]))]
        return [
            VectorMatch(row=row, similarity=similarity)
            for row, similarity in zip(top.tolist(), scores[top].tolist(), strict=True)
        ]

    def _grow(self, size: int) -> None:
        if size > len(self._matrix):
            capacity = max(size, 2 * len(self._matrix), 1024)
            grown = np.zeros((capacity, self.dimension), dtype=np.float32)
            grown[: self._n_rows] = self._matrix[: self._n_rows]
            self._matrix = grown
            usable = np.zeros(capacity, dtype=bool)
            usable[: self._n_rows] = self._usable[: self._n_rows]
            self._usable = usable
        self._n_rows = max(self._n_rows, size)
