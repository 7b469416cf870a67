"""A lexical hit's matched terms and their shares of its BM25 score (`TermShares`), worked out only for the hits
whose explanation is read."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt


class TermShares(Mapping[str, float]):
    """A hit's matched terms and their shares of its BM25 score, worked out when first read from the
    document's own term counts. Recall shows the terms of the few hits that survive fusion; the other
    candidates never need them."""

    __slots__ = ("_counts", "_k1", "_norm", "_query", "_shares")

    def __init__(
        self,
        counts: Mapping[int, int] | Callable[[], Mapping[int, int]],
        query: Sequence[tuple[str, int, float]],
        norm: float,
        k1: float,
    ):
        # Term id -> term frequency in the document, or what reads them when first asked (a row restored from an
        # image keeps its counts in arrays that never change: no dict is made for a hit whose terms nobody reads).
        self._counts = counts
        self._query = query  # (term, term id, idf) of the query's known terms
        self._norm = norm  # k1 * (1 - b + b * |d| / avgdl)
        self._k1 = k1
        self._shares: dict[str, float] | None = None

    def resolve(self) -> dict[str, float]:
        """The shares as a plain dict."""
        if self._shares is None:
            counts = self._counts() if callable(self._counts) else self._counts
            scale, norm = self._k1 + 1.0, self._norm
            self._shares = {
                term: idf * counts[term_id] * scale / (counts[term_id] + norm)
                for term, term_id, idf in self._query
                if term_id in counts
            }
        return self._shares

    def __getitem__(self, term: str) -> float:
        return self.resolve()[term]

    def __iter__(self) -> Iterator[str]:
        return iter(self.resolve())

    def __len__(self) -> int:
        return len(self.resolve())


def frozen_counts(frozen: tuple[npt.NDArray[np.integer[Any]], ...], row: int) -> dict[int, int]:
    """A restored row's term counts by term id, from the image's doc-major arrays (indptr, term ids, counts)."""
    indptr, terms, counts = frozen
    start, end = indptr[row : row + 2].tolist()  # one slice made Python ints: two numpy scalars cost more than the dict
    return dict(zip(terms[start:end].tolist(), counts[start:end].tolist(), strict=True))
