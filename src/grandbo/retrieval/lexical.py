"""The lexical arm: Okapi BM25 over an in-memory inverted index.

Postings live in flat numpy arrays (term-sorted, compressed-row layout) plus a small buffer of
documents added since the last compaction, so a 10-30-term OR query costs one vectorised pass over
the postings of its terms. Statistics (document count, document frequency, mean length) cover active
documents only, so a retired entry stops influencing other entries' scores the moment it is retired.

Both stores run this index (Postgres builds it from its own tables), so they score alike:

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d, q) = sum over t in q of idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from grandbo.retrieval import postings
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.retrieval.postings import EMPTY, CountArray, IntArray, LexicalImage, Segment, image_of, merge, segment
from grandbo.retrieval.shares import TermShares, frozen_counts

# BM25's constants are the ranking policy's (`retrieval/policy.py`). Length normalisation B is Lucene's 0.75.
# An earlier 0.5 was chosen on SciFact's test claims; on the dev splits (incidents, public incidents,
# SciFact's dev half) 0.75 is as good or better once long topics are held to a bounded floor
# (docs/evaluation.md).
K1, B = DEFAULT_POLICY.lexical.bm25_k1, DEFAULT_POLICY.lexical.bm25_b


@dataclass(slots=True)  # read-only; not frozen, whose __init__ costs 4x (hundreds per recall)
class LexicalMatch:
    """One document the lexical arm found: its row, BM25 score, matched terms and idf coverage."""

    row: int
    score: float
    terms: Mapping[str, float]
    coverage: float = 1.0
    """Share of the query's total idf carried by the matched terms."""


_TAIL_DOCS = 5_000
# Common query terms' weights kept as dense arrays over all rows (8 bytes per row each), within this
# budget per index: 64 terms at 100,000 rows, 6 at a million.
_DENSE_BYTES = 48 << 20


def bm25_idf(n_docs: int, df: npt.NDArray[np.float64] | float) -> npt.NDArray[np.float64]:
    """Lucene's non-negative BM25 idf."""
    return np.log1p((n_docs - np.asarray(df, dtype=np.float64) + 0.5) / (np.asarray(df, dtype=np.float64) + 0.5))


class LexicalIndex:
    """BM25 over documents numbered 0, 1, 2, ... in the order they were added."""

    def __init__(self, *, k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        # Term ids by term, and terms by id: a term no active document holds any more leaves both (`deactivate`),
        # so that a purged entry's words stay neither in this index nor in the image it saves.
        # None while the terms are an image's, sorted (`export`): found by bisection until a write makes the dict.
        self._vocab: dict[str, int] | None = {}
        self._terms: list[str | None] = []
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
        self._main = EMPTY
        self._tail = EMPTY
        self._tail_docs = 0
        self._buffer: dict[int, tuple[list[int], list[int]]] = {}
        self._buffered_docs = 0
        # Between writes the statistics do not move, so each term's BM25 weights over its active
        # postings are computed once and reused by every query until the next add or retirement.
        self._version = 0
        self._cache_version = -1
        self._cached: dict[int, tuple[IntArray, npt.NDArray[np.float64]]] = {}
        self._cached_postings = 0
        self._peaks: dict[int, float] = {}  # a cached term's largest weight
        self._dense: dict[int, npt.NDArray[np.float64]] = {}  # a cached common term's weights over all rows
        self._norm: npt.NDArray[np.float64] | None = None
        # Rows restored from a stored image (`restore`) keep their term counts in doc-major arrays (indptr,
        # term ids, counts) instead of a dict per row; a row's dict is made only when it is asked for.
        self._frozen: tuple[npt.NDArray[np.integer[Any]], ...] | None = None
        self._held_bytes: tuple[int, Segment, Segment, int] | None = None  # `nbytes`: (version, main, tail, bytes)

    @classmethod
    def restore(cls, image: LexicalImage) -> LexicalIndex:
        """An index of active documents 0..n-1 from what `export` gave: it scores every query exactly as the
        index exported did (the same statistics, postings and term ids), with no document added one by one and
        no sort (the image holds both layouts)."""
        index = cls()
        indptr, rows, counts = image.postings
        n_docs = len(image.lengths)
        index._terms = list(image.vocabulary)  # sorted by name (`export`): no dict until the first write makes it
        index._vocab = None if image.sorted_terms else {term: n for n, term in enumerate(image.vocabulary)}
        index._df = np.diff(indptr).astype(np.int64)
        # Rows and counts at the image's width (every use reads them as exactly the same numbers). Copies (small): a
        # view would keep the whole image, vectors included, in memory.
        index._main = Segment(indptr.astype(np.int64), rows.copy(), counts.copy())
        index._doc_len, index._active = image.lengths.astype(np.float32), np.ones(n_docs, dtype=bool)
        index._doc_terms, index._frozen = [None] * n_docs, tuple(part.copy() for part in image.documents)
        index._n_docs = index._n_active = n_docs
        index._active_len = float(image.lengths.astype(np.float64).sum())  # integers: exact, as the running sum
        return index

    @classmethod
    def built(cls, documents: Iterable[Sequence[str]]) -> LexicalIndex:
        """An index of `documents` (each one's terms, with repeats), rows 0..n-1 in their order: the index `add`
        would make of them one by one, scoring alike, made as `restore` makes one (`postings.image_of`). `add` keeps
        a dict of each row's term counts: an org's index built so took about three times the memory the keeper
        counted (20,000 entries: 170 MB of the process, 46 counted), a peak the memory bound did not see."""
        return cls.restore(image_of(documents))

    def export(self) -> tuple[LexicalImage, npt.NDArray[np.int64]]:
        """The active documents as an image for `restore` (renumbered 0..n-1 in row order), and the rows they
        were, ascending. Only the terms an active document holds are kept, renumbered by name: a term none holds
        scores nothing, and a term's id changes no score, so the image scores every query as this index does."""
        self.compact()
        n_terms = len(self._terms)
        merged = merge(self._main, self._tail, n_terms)  # each term's rows ascending
        term_of = np.repeat(np.arange(merged.n_terms, dtype=np.int32), np.diff(merged.indptr))
        active = self._active[: self._n_docs]
        position = np.cumsum(active) - 1  # a row's place among the active rows
        keep = active[merged.rows]
        # The held terms by name: a restored index looks a query's terms up by bisection, making no dict of them.
        vocabulary, (indptr, terms, rows, counts) = postings.by_name(
            self._terms, term_of[keep], position[merged.rows[keep]], merged.tfs[keep].astype(np.int32)
        )
        documents = postings.doc_major(rows, terms, counts, int(active.sum()))
        lengths = self._doc_len[: self._n_docs][active]
        image = LexicalImage(vocabulary, (indptr, rows, counts), documents, lengths, sorted_terms=True)
        return image, np.flatnonzero(active)

    def nbytes(self) -> int:
        """About what the index takes in memory: its arrays, and the dicts of its terms and rows' counts.

        Asked at every recall (`IndexKeeper._account`): the structure's part is summed again only once a write or
        a compaction changed it, the caches' part (which reads fill) is two products."""
        held = self._held_bytes
        if held is None or held[0] != self._version or held[1] is not self._main or held[2] is not self._tail:
            held = self._held_bytes = (self._version, self._main, self._tail, self._structure_bytes())
        return held[3] + self._cached_postings * 12 + len(self._dense) * self._n_docs * 8

    def _structure_bytes(self) -> int:
        arrays: list[npt.NDArray[Any]] = [self._df, self._doc_len, self._active, *(self._frozen or ())]
        arrays += [part for s in (self._main, self._tail) for part in (s.indptr, s.rows, s.tfs)]
        postings = len(self._main.rows) + len(self._tail.rows) - (len(self._frozen[1]) if self._frozen else 0)
        terms = 100 * len(self._vocab or ()) + 8 * len(self._terms)
        return int(sum(a.nbytes for a in arrays)) + terms + 70 * max(postings, 0)

    def _counts(self, row: int) -> dict[int, int] | None:
        """A document's term counts by term id (None once retired)."""
        ids = self._doc_terms[row]
        if ids is None and self._frozen is not None and row < len(self._frozen[0]) - 1 and self._active[row]:
            ids = frozen_counts(self._frozen, row)
        return ids

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
        vocabulary = self._vocabulary()
        for term, tf in counts.items():
            term_id = vocabulary.get(term)
            if term_id is None:
                term_id = len(self._terms)
                vocabulary[term] = term_id
                self._terms.append(term)
            ids[term_id] = tf
            rows_tfs = self._buffer.get(term_id)
            if rows_tfs is None:
                self._buffer[term_id] = ([row], [tf])
            else:
                rows_tfs[0].append(row)
                rows_tfs[1].append(tf)
        self._grow(row + 1)
        if len(self._terms) > len(self._df):
            self._df = np.concatenate(
                [self._df, np.zeros(max(len(self._terms) - len(self._df), len(self._df)), dtype=np.int64)]
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
        self._version += 1
        return row

    def deactivate(self, row: int) -> None:
        """Remove a document from results and from corpus statistics (retired, superseded or purged); a term only it
        held leaves the vocabulary."""
        if not self._active[row]:
            return
        ids = self._counts(row)
        self._active[row] = False
        if ids:
            vocabulary = self._vocabulary()
            term_ids = np.fromiter(ids.keys(), dtype=np.int64, count=len(ids))
            self._df[term_ids] -= 1
            for term_id in term_ids[self._df[term_ids] == 0].tolist():  # its postings left are of inactive rows
                del vocabulary[cast(str, self._terms[term_id])]
                self._terms[term_id] = None
        self._doc_terms[row] = None
        self._n_active -= 1
        self._active_len -= float(self._doc_len[row])
        self._version += 1

    def _vocabulary(self) -> dict[str, int]:
        """Term ids by term, made from the terms (a restored image's) the first time they are needed."""
        if self._vocab is None:
            self._vocab = {cast(str, term): term_id for term_id, term in enumerate(self._terms)}
        return self._vocab

    def _term_id(self, term: str) -> int | None:
        if self._vocab is not None:
            return self._vocab.get(term)
        at = bisect_left(terms := cast(list[str], self._terms), term)  # an image's: sorted, none retired (no write)
        return at if terms[at : at + 1] == [term] else None

    def compact(self) -> None:
        """Flush the buffer into the tail; merge a large tail into main."""
        if self._buffer:
            self._tail = merge(self._tail, segment(self._buffer, len(self._terms)), len(self._terms))
            self._tail_docs += self._buffered_docs
            self._buffer, self._buffered_docs = {}, 0
        if self._tail_docs > max(_TAIL_DOCS, self._n_docs // 10):
            self._main = merge(self._main, self._tail, len(self._terms))
            self._tail, self._tail_docs = EMPTY, 0

    def drop_caches(self) -> None:
        """Let go of the weights kept for queries (computed again when asked: the same numbers)."""
        self._cached, self._cached_postings, self._peaks, self._dense, self._norm = {}, 0, {}, {}, None

    def _term_weights(self, term_id: int, idf: float, avgdl: float) -> tuple[IntArray, npt.NDArray[np.float64]]:
        """A term's active postings and their BM25 weights under the current statistics."""
        if self._cache_version != self._version:
            self._cached, self._cached_postings, self._peaks, self._dense, self._norm = {}, 0, {}, {}, None
            self._cache_version = self._version
        cached = self._cached.get(term_id)
        if cached is not None:
            return cached
        if self._norm is None:
            lengths = self._doc_len[: self._n_docs].astype(np.float64)
            self._norm = self.k1 * (1.0 - self.b + self.b * lengths / avgdl)
        rows, tfs = self._postings(term_id)
        if self._n_active < self._n_docs:
            keep = self._active[rows]
            rows, tfs = rows[keep], tfs[keep]
        tf = tfs.astype(np.float64)
        weight = idf * tf * (self.k1 + 1.0) / (tf + self._norm[rows])
        if self._cached_postings + len(rows) <= max(len(self._main.rows), 100_000):
            self._cached[term_id] = (rows, weight)
            self._cached_postings += len(rows)
        return rows, weight

    def _peak(self, term_id: int, weight: npt.NDArray[np.float64]) -> float:
        """The largest of a term's weights (cached with the weights)."""
        peak = self._peaks.get(term_id)
        if peak is None:
            peak = float(weight.max()) if len(weight) else 0.0
            if term_id in self._cached:
                self._peaks[term_id] = peak
        return peak

    def _dense_weights(self, term_id: int, rows: IntArray, weight: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """A term's weights over every row (0 where absent), cached with its postings' weights."""
        found = self._dense.get(term_id)
        if found is None:
            found = np.zeros(self._n_docs)
            found[rows] = weight
            if term_id in self._cached and (len(self._dense) + 1) * self._n_docs * 8 <= _DENSE_BYTES:
                self._dense[term_id] = found
        return found

    def _postings(self, term_id: int) -> tuple[IntArray, CountArray]:
        main, tail = self._main, self._tail
        rows, tfs = main.slice(term_id)
        if tail.n_terms > term_id:
            tail_rows, tail_tfs = tail.slice(term_id)
            if len(tail_rows):
                return np.concatenate([rows, tail_rows]), np.concatenate([tfs, tail_tfs])
        return rows, tfs

    def search(
        self,
        query_terms: Sequence[str],
        limit: int,
        min_coverage: float = 0.0,
        cap: float | None = None,
        floor_terms: int | None = None,
    ) -> list[LexicalMatch]:
        """The `limit` best active documents for an OR of `query_terms`, best first (ties by row),
        plus any document tied with the last of them (`top` tells how the floor works)."""
        return [
            LexicalMatch(*match)
            for match in zip(*self.top(query_terms, limit, min_coverage, cap, floor_terms), strict=True)
        ]

    def top(
        self,
        query_terms: Sequence[str],
        limit: int,
        min_coverage: float = 0.0,
        cap: float | None = None,
        floor_terms: int | None = None,
    ) -> tuple[list[int], list[float], list[TermShares], list[float]]:
        """What `search` finds, as its rows, scores, matched terms and coverages (no object per match).

        `min_coverage` is the lexical arm's evidence floor: a document must contain query terms
        carrying at least that share of the query's total idf (terms the corpus has never seen count
        at full idf). A query described in other words than the memories matches only incidental
        words, and then the arm abstains instead of ranking noise. `cap` bounds what the floor asks
        for, in units of the idf of a term found in one document: on a long topic (a whole alert, a
        symptom paragraph) no single memory carries a fixed share of every word, and a floor that
        grows with the topic would prune the answer itself. `floor_terms` bounds it the same way in
        units of the topic's own terms: a topic of more distinct terms than that is asked for the
        floor's share of only that many of its (mean) terms.
        """
        if self._n_active == 0 or limit <= 0:
            return [], [], [], []
        self.compact()
        n_active = self._n_active
        avgdl = self._active_len / n_active
        unique = list(dict.fromkeys(query_terms))
        ids = [self._term_id(term) for term in unique]
        dfs = np.array([self._df[i] if i is not None else 0 for i in ids], dtype=np.float64)
        idfs = bm25_idf(n_active, dfs)
        total_idf = float(idfs.sum())
        known = sorted(
            (idf, term, term_id)
            for term, term_id, df, idf in zip(unique, ids, dfs.tolist(), idfs.tolist(), strict=True)
            if term_id is not None and df > 0
        )
        need = min_coverage * total_idf if min_coverage > 0 else 0.0
        if floor_terms is not None and len(unique) > floor_terms:
            need *= floor_terms / len(unique)
        if cap is not None and need > 0:
            need = min(need, cap * float(bm25_idf(n_active, 1.0)))
        need = need - 1e-12 if need > 0 else 0.0
        # Exact pruning by the evidence floor: the lowest-idf terms whose idf adds up to less than
        # the floor cannot qualify a document on their own. Documents are found through the other
        # ("kept") terms, and the pruned terms' weights are added for those documents only. On
        # near-stopwords (a term in every memory) this skips most of the postings a query touches.
        pruned_idf, cut = 0.0, 0
        while cut < len(known) and pruned_idf + known[cut][0] < need:
            pruned_idf += known[cut][0]
            cut += 1
        per_term = [(term, *self._term_weights(term_id, idf, avgdl), idf) for idf, term, term_id in known]
        kept, pruned = per_term[cut:], per_term[:cut]
        if not kept:
            return [], [], [], []
        kept_rows = np.concatenate([rows for _, rows, _, _ in kept])
        dense: npt.NDArray[np.float64] = np.bincount(
            kept_rows, weights=np.concatenate([w for _, _, w, _ in kept]), minlength=self._n_docs
        ).astype(np.float64, copy=False)
        kept_idf = np.repeat([idf for _, _, _, idf in kept], [len(rows) for _, rows, _, _ in kept])
        covered: npt.NDArray[np.float64] = np.bincount(kept_rows, weights=kept_idf, minlength=self._n_docs).astype(
            np.float64, copy=False
        )
        candidates = np.flatnonzero(covered >= need - pruned_idf) if need > 0 else np.flatnonzero(covered)
        if pruned and len(candidates):
            # Documents that qualify without the pruned terms set a bar: the limit-th best of their
            # scores. A pruned term adds at most its largest weight, so a document below the bar
            # even with all of them cannot rank; only the rest are scored exactly.
            sure = candidates[covered[candidates] >= need]
            bar = 0.0
            if len(sure) >= limit:
                bar = float(-np.partition(-dense[sure], limit - 1)[limit - 1])
            headroom = sum(
                self._peak(term_id, weight)
                for (*_, term_id), (_, _, weight, _) in zip(known[:cut], pruned, strict=True)
            )
            candidates = candidates[dense[candidates] + headroom >= bar - 1e-9]
            # Each pruned term's weights as a dense array over all rows: a gather per term instead of
            # a pass over its (long) postings or a binary search per candidate.
            scores, cover = dense[candidates], covered[candidates]
            for (*_, term_id), (_, rows, weight, idf) in zip(known[:cut], pruned, strict=True):
                row_weights = self._dense_weights(term_id, rows, weight)[candidates]
                scores = scores + row_weights
                cover = cover + (row_weights > 0) * idf
            keep = cover >= need
            candidates, scores, cover = candidates[keep], scores[keep], cover[keep]
        else:
            scores, cover = dense[candidates], covered[candidates]
        if len(candidates) > limit:
            # Every document tied with the last place comes along, so that the caller can break
            # ties by a rule of its own and get the same answer as a database would.
            boundary = scores[np.argpartition(-scores, limit - 1)[limit - 1]]
            keep = scores >= boundary
            candidates, scores, cover = candidates[keep], scores[keep], cover[keep]
        order = np.lexsort((candidates, -scores))
        query = [(term, term_id, idf) for idf, term, term_id in known]
        assert self._norm is not None  # set by _term_weights for this query
        ranked = candidates[order]
        found, counts_of, k1 = ranked.tolist(), self._counts_of, self.k1
        return (
            found,
            scores[order].tolist(),
            [
                TermShares(counts_of(row), query, norm, k1)
                for row, norm in zip(found, self._norm[ranked].tolist(), strict=True)
            ],
            [idf / total_idf for idf in cover[order].tolist()],
        )

    def _counts_of(self, row: int) -> Mapping[int, int] | Callable[[], Mapping[int, int]]:
        """An active row's term counts for `TermShares`: its dict, or (a row restored from an image) what makes one
        from the image's arrays when the hit's terms are read."""
        ids = self._doc_terms[row]
        if ids is not None:
            return ids
        return partial(frozen_counts, self._frozen, row) if self._frozen is not None else {}

    def _grow(self, size: int) -> None:
        if size <= len(self._doc_len):
            return
        capacity = max(size, 2 * len(self._doc_len), 1024)
        self._doc_len = np.concatenate([self._doc_len, np.zeros(capacity - len(self._doc_len), dtype=np.float32)])
        self._active = np.concatenate([self._active, np.zeros(capacity - len(self._active), dtype=bool)])
