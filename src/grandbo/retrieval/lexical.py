"""The lexical arm: Okapi BM25 over an in-memory inverted index.

Postings live in flat numpy arrays (term-sorted, compressed-row layout) plus a small buffer of
documents added since the last compaction, so a 10-30-term OR query costs one vectorised pass over
the postings of its terms. Statistics (document count, document frequency, mean length) cover active
documents only, so a retired entry stops influencing other entries' scores the moment it is retired.

The scoring formula is the one the Postgres backend reproduces in SQL:

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d, q) = sum over t in q of idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

K1 = 1.2
# Length normalisation: 0.5 rather than Lucene's 0.75, because memories vary from one-line facts
# to long post-mortems and a long post-mortem is usually long because it says more, not because it
# repeats itself (see docs/evaluation.md for the figures behind the choice).
B = 0.5

IntArray = npt.NDArray[np.int32]
FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class LexicalMatch:
    """One document the lexical arm found: its row, BM25 score and each matched term's share."""

    row: int
    score: float
    terms: dict[str, float]
    coverage: float = 1.0
    """Share of the query's total idf carried by the matched terms."""


@dataclass(frozen=True, slots=True)
class _Segment:
    """Postings of some rows in compressed-row layout over the first n_terms term ids."""

    indptr: npt.NDArray[np.int64]
    rows: IntArray
    tfs: FloatArray

    @property
    def n_terms(self) -> int:
        return len(self.indptr) - 1

    def slice(self, term_id: int) -> tuple[IntArray, FloatArray]:
        if term_id >= self.n_terms:
            return self.rows[:0], self.tfs[:0]
        start, end = self.indptr[term_id], self.indptr[term_id + 1]
        return self.rows[start:end], self.tfs[start:end]


_EMPTY = _Segment(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32))
_TAIL_DOCS = 5_000


def _segment(buffer: dict[int, tuple[list[int], list[int]]], n_terms: int) -> _Segment:
    counts = np.zeros(n_terms, dtype=np.int64)
    for term_id, (rows, _) in buffer.items():
        counts[term_id] = len(rows)
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    rows_out = np.empty(indptr[-1], dtype=np.int32)
    tfs_out = np.empty(indptr[-1], dtype=np.float32)
    for term_id, (rows, tfs) in buffer.items():
        start = indptr[term_id]
        rows_out[start : start + len(rows)] = rows
        tfs_out[start : start + len(tfs)] = tfs
    return _Segment(indptr, rows_out, tfs_out)


def _term_counts(segment: _Segment, n_terms: int) -> npt.NDArray[np.int64]:
    out = np.zeros(n_terms, dtype=np.int64)
    out[: segment.n_terms] = np.diff(segment.indptr)
    return out


def _merge(older: _Segment, newer: _Segment, n_terms: int) -> _Segment:
    """One segment holding both; every row of `newer` is above every row of `older`."""
    if len(older.rows) == 0 and newer.n_terms == n_terms:
        return newer
    old_counts, new_counts = _term_counts(older, n_terms), _term_counts(newer, n_terms)
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(old_counts + new_counts, out=indptr[1:])
    rows = np.empty(indptr[-1], dtype=np.int32)
    tfs = np.empty(indptr[-1], dtype=np.float32)
    for segment, offset in ((older, indptr[:-1]), (newer, indptr[:-1] + old_counts)):
        per_term = np.diff(segment.indptr)
        term_of = np.repeat(np.arange(segment.n_terms, dtype=np.int64), per_term)
        position = np.arange(len(segment.rows), dtype=np.int64) - np.repeat(segment.indptr[:-1], per_term)
        target = offset[term_of] + position
        rows[target] = segment.rows
        tfs[target] = segment.tfs
    return _Segment(indptr, rows, tfs)


def bm25_idf(n_docs: int, df: npt.NDArray[np.float64] | float) -> npt.NDArray[np.float64]:
    """Lucene's non-negative BM25 idf."""
    return np.log1p((n_docs - np.asarray(df, dtype=np.float64) + 0.5) / (np.asarray(df, dtype=np.float64) + 0.5))


class LexicalIndex:
    """BM25 over documents numbered 0, 1, 2, ... in the order they were added."""

    def __init__(self, *, k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._vocab: dict[str, int] = {}
        self._df = np.zeros(0, dtype=np.int64)
        self._doc_len = np.zeros(0, dtype=np.float32)
        self._active = np.zeros(0, dtype=bool)
        self._doc_terms: list[dict[int, int] | None] = []
        self._n_docs = 0
        self._n_active = 0
        self._active_len = 0.0
        # Postings in two compressed segments, "main" and a younger "tail": term t's documents in a
        # segment are rows[indptr[t]:indptr[t + 1]], ascending, and every tail row is above every main
        # row. Documents added since the last search wait in a buffer; a search flushes the buffer
        # into the tail (cost: the tail's size) and a large tail merges into main (cost: the index).
        self._main = _EMPTY
        self._tail = _EMPTY
        self._tail_docs = 0
        self._buffer: dict[int, tuple[list[int], list[int]]] = {}
        self._buffered_docs = 0

    def __len__(self) -> int:
        return self._n_docs

    @property
    def active_count(self) -> int:
        return self._n_active

    def is_active(self, row: int) -> bool:
        return row < self._n_docs and bool(self._active[row])

    def add(self, doc_terms: Sequence[str]) -> int:
        """Index one document's terms (with repeats); return its row."""
        row = self._n_docs
        counts = Counter(doc_terms)
        ids: dict[int, int] = {}
        for term, tf in counts.items():
            term_id = self._vocab.get(term)
            if term_id is None:
                term_id = len(self._vocab)
                self._vocab[term] = term_id
            ids[term_id] = tf
            rows_tfs = self._buffer.get(term_id)
            if rows_tfs is None:
                self._buffer[term_id] = ([row], [tf])
            else:
                rows_tfs[0].append(row)
                rows_tfs[1].append(tf)
        self._grow(row + 1)
        if len(self._vocab) > len(self._df):
            self._df = np.concatenate(
                [self._df, np.zeros(max(len(self._vocab) - len(self._df), len(self._df)), dtype=np.int64)]
            )
        term_ids = np.fromiter(ids.keys(), dtype=np.int64, count=len(ids))
        self._df[term_ids] += 1
        length = float(len(doc_terms))
        self._doc_len[row] = length
        self._active[row] = True
        self._doc_terms.append(ids)
        self._n_docs += 1
        self._n_active += 1
        self._active_len += length
        self._buffered_docs += 1
        return row

    def deactivate(self, row: int) -> None:
        """Remove a document from results and from corpus statistics (retired or superseded)."""
        if not self._active[row]:
            return
        self._active[row] = False
        ids = self._doc_terms[row]
        if ids:
            self._df[np.fromiter(ids.keys(), dtype=np.int64, count=len(ids))] -= 1
        self._doc_terms[row] = None
        self._n_active -= 1
        self._active_len -= float(self._doc_len[row])

    def compact(self) -> None:
        """Flush the buffer into the tail; merge a large tail into main."""
        if self._buffer:
            self._tail = _merge(self._tail, _segment(self._buffer, len(self._vocab)), len(self._vocab))
            self._tail_docs += self._buffered_docs
            self._buffer, self._buffered_docs = {}, 0
        if self._tail_docs > max(_TAIL_DOCS, self._n_docs // 10):
            self._main = _merge(self._main, self._tail, len(self._vocab))
            self._tail, self._tail_docs = _EMPTY, 0

    def _postings(self, term_id: int) -> tuple[IntArray, FloatArray]:
        main, tail = self._main, self._tail
        rows, tfs = main.slice(term_id)
        if tail.n_terms > term_id:
            tail_rows, tail_tfs = tail.slice(term_id)
            if len(tail_rows):
                return np.concatenate([rows, tail_rows]), np.concatenate([tfs, tail_tfs])
        return rows, tfs

    def search(self, query_terms: Sequence[str], limit: int, min_coverage: float = 0.0) -> list[LexicalMatch]:
        """The `limit` best active documents for an OR of `query_terms`, best first (ties by row),
        plus any document tied with the last of them.

        `min_coverage` is the lexical arm's evidence floor: a document must contain query terms
        carrying at least that share of the query's total idf (terms the corpus has never seen count
        at full idf). A query described in other words than the memories matches only incidental
        words, and then the arm abstains instead of ranking noise.
        """
        if self._n_active == 0 or limit <= 0:
            return []
        self.compact()
        n_active = self._n_active
        avgdl = self._active_len / n_active
        unique = list(dict.fromkeys(query_terms))
        ids = [self._vocab.get(term) for term in unique]
        dfs = np.array([self._df[i] if i is not None else 0 for i in ids], dtype=np.float64)
        idfs = bm25_idf(n_active, dfs)
        total_idf = float(idfs.sum())
        per_term: list[tuple[str, IntArray, npt.NDArray[np.float64], float]] = []
        for term, term_id, df, idf in zip(unique, ids, dfs.tolist(), idfs.tolist(), strict=True):
            if term_id is None or df <= 0:
                continue
            rows, tfs = self._postings(term_id)
            keep = self._active[rows]
            rows, tf = rows[keep], tfs[keep].astype(np.float64)
            norm = self.k1 * (1.0 - self.b + self.b * self._doc_len[rows].astype(np.float64) / avgdl)
            per_term.append((term, rows, idf * tf * (self.k1 + 1.0) / (tf + norm), idf))
        if not per_term:
            return []
        all_rows = np.concatenate([rows for _, rows, _, _ in per_term])
        all_weights = np.concatenate([weight for _, _, weight, _ in per_term])
        # A dense accumulator over every row is one O(rows + postings) pass, cheaper than sorting.
        dense = np.bincount(all_rows, weights=all_weights, minlength=self._n_docs)
        if min_coverage > 0:
            covered = np.bincount(
                all_rows,
                weights=np.concatenate([np.full(len(rows), idf) for _, rows, _, idf in per_term]),
                minlength=self._n_docs,
            )
            dense[covered < min_coverage * total_idf - 1e-12] = 0.0
        candidates = np.flatnonzero(dense) if len(all_rows) <= limit * 4 else None
        if candidates is None:
            count = min(limit, len(dense))
            boundary = dense[np.argpartition(-dense, count - 1)[count - 1]]
            # Every document tied with the last place comes along, so that the caller can break
            # ties by a rule of its own and get the same answer as a database would.
            candidates = np.flatnonzero(dense >= max(boundary, np.finfo(np.float64).tiny))
        scores = dense[candidates]
        order = np.lexsort((candidates, -scores))
        if len(order) > limit:
            order = order[: limit + int(np.count_nonzero(scores[order[limit:]] == scores[order[limit - 1]]))]
        top_rows, top_scores = candidates[order], scores[order]
        shares: list[dict[str, float]] = [{} for _ in range(len(top_rows))]
        coverage = [0.0] * len(top_rows)
        for term, rows, weight, idf in per_term:
            at = np.minimum(np.searchsorted(rows, top_rows), len(rows) - 1)
            for i in np.flatnonzero(rows[at] == top_rows).tolist():
                shares[i][term] = float(weight[at[i]])
                coverage[i] += idf
        return [
            LexicalMatch(row=row, score=score, terms=share, coverage=covered / total_idf)
            for row, score, share, covered in zip(top_rows.tolist(), top_scores.tolist(), shares, coverage, strict=True)
        ]

    def _grow(self, size: int) -> None:
        if size <= len(self._doc_len):
            return
        capacity = max(size, 2 * len(self._doc_len), 1024)
        self._doc_len = np.concatenate([self._doc_len, np.zeros(capacity - len(self._doc_len), dtype=np.float32)])
        self._active = np.concatenate([self._active, np.zeros(capacity - len(self._active), dtype=bool)])
