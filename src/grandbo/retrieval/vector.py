"""The vector arm: exact cosine search over a contiguous float32 matrix.

Vectors are normalised on the way in, so cosine similarity is one matrix-vector product. Rows line up
with the lexical index's rows; a row without a vector (not embedded yet, or embedded by another
provider) or whose entry was retired is never returned. A similarity floor keeps the arm honest: an
unrelated entry is not "the nearest" just because nothing closer exists.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import structlog

log = structlog.get_logger(__name__)

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


class _BlasThreads:
    """Holds OpenBLAS to one thread while any caller is inside `one()`, and gives it back its count when the
    last one leaves. It goes through `openblas_set_num_threads_local` (OpenBLAS 0.3.27+, which numpy's
    wheels ship): the plain `openblas_set_num_threads`, called from a thread other than the main one, did
    not reach the products of that thread (measured here). In the pthreads build numpy ships, that setting
    is still the whole process's, hence the count of holders. Without OpenBLAS, nothing changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._setters: list[Callable[[int], int]] | None = None
        self._inside = 0
        self._saved: list[int] = []

    def setters(self) -> list[Callable[[int], int]]:
        """One setter per OpenBLAS library loaded (found once: numpy's is loaded with numpy); each sets the
        thread count and returns the one it replaces."""
        with self._lock:
            return self._found()

    def _found(self) -> list[Callable[[int], int]]:
        if self._setters is None:
            from threadpoolctl import ThreadpoolController  # scans the loaded libraries: once, on demand

            found: list[Callable[[int], int]] = []
            try:
                libraries = ThreadpoolController().select(internal_api="openblas").lib_controllers
            except Exception as error:  # a failed scan only costs the speed-up
                log.warning("vector.blas_scan_failed", error=f"{type(error).__name__}: {error}")
                libraries = []
            for library in libraries:
                try:
                    setter = ctypes.CDLL(library.filepath).openblas_set_num_threads_local
                except (OSError, AttributeError):  # an older OpenBLAS: leave it alone
                    continue
                setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
                found.append(setter)
            self._setters = found
        return self._setters

    @contextmanager
    def one(self) -> Iterator[None]:
        with self._lock:
            setters = self._found()
            if self._inside == 0:
                self._saved = [setter(1) for setter in setters]
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if self._inside == 0:
                    for setter, count in zip(setters, self._saved, strict=True):
                        setter(count)

    def after_fork(self) -> None:
        """In a forked child no thread of the parent is inside: a fresh lock, and the count given back."""
        self._lock = threading.Lock()
        if self._inside:
            for setter, count in zip(self._setters or [], self._saved, strict=False):
                setter(count)
        self._inside = 0


_BLAS = _BlasThreads()
os.register_at_fork(after_in_child=_BLAS.after_fork)


def one_blas_thread() -> contextlib.AbstractContextManager[None]:
    """Run this thread's matrix products inside on one BLAS thread: for a caller that keeps the other
    cores busy with work of its own (recall runs the lexical arm beside the vector arm)."""
    return _BLAS.one()


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
        self._matrix[:, at] = matrix.T
        self._n_usable += int(np.count_nonzero(~self._usable[at]))
        self._usable[at] = True

    def remove(self, row: int) -> None:
        """Stop returning `row` (retired, superseded, or its vector went stale)."""
        if row < self._n_rows and self._usable[row]:
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

    def _grow(self, size: int) -> None:
        if size > self._matrix.shape[1]:
            capacity = max(size, 2 * self._matrix.shape[1], 1024)
            grown = np.zeros((self.dimension, capacity), dtype=np.float32)
            grown[:, : self._n_rows] = self._matrix[:, : self._n_rows]
            self._matrix = grown
            usable = np.zeros(capacity, dtype=bool)
            usable[: self._n_rows] = self._usable[: self._n_rows]
            self._usable = usable
        self._n_rows = max(self._n_rows, size)
