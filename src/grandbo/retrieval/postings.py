"""The lexical index's postings: term-major compressed-row segments (term t's rows are
rows[indptr[t]:indptr[t + 1]], ascending), built from a buffer of new documents and merged."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

# Rows and term counts: int32 and float32 as built and merged; as narrow as an index image holds them once restored
# (uint16 rows and uint8 counts up to 65,535 documents: 3 of a posting's 8 bytes), until a merge widens them.
IntArray = npt.NDArray[np.integer[Any]]
CountArray = npt.NDArray[np.number[Any]]


@dataclass(frozen=True, slots=True)
class Segment:
    """Postings of some rows in compressed-row layout over the first n_terms term ids."""

    indptr: npt.NDArray[np.int64]
    rows: IntArray
    tfs: CountArray

    @property
    def n_terms(self) -> int:
        return len(self.indptr) - 1

    def slice(self, term_id: int) -> tuple[IntArray, CountArray]:
        if term_id >= self.n_terms:
            return self.rows[:0], self.tfs[:0]
        start, end = self.indptr[term_id], self.indptr[term_id + 1]
        return self.rows[start:end], self.tfs[start:end]


EMPTY = Segment(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32))


def segment(buffer: dict[int, tuple[list[int], list[int]]], n_terms: int) -> Segment:
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
    return Segment(indptr, rows_out, tfs_out)


def term_counts(segment: Segment, n_terms: int) -> npt.NDArray[np.int64]:
    out = np.zeros(n_terms, dtype=np.int64)
    out[: segment.n_terms] = np.diff(segment.indptr)
    return out


def merge(older: Segment, newer: Segment, n_terms: int) -> Segment:
    """One segment holding both; every row of `newer` is above every row of `older`."""
    if len(older.rows) == 0 and newer.n_terms == n_terms:
        return newer
    old_counts, new_counts = term_counts(older, n_terms), term_counts(newer, n_terms)
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
    return Segment(indptr, rows, tfs)


@dataclass(frozen=True, slots=True)
class LexicalImage:
    """A LexicalIndex's active documents as arrays (`LexicalIndex.export`, `restore`): the vocabulary by term
    id; the postings term-major (indptr over terms, rows, counts) and doc-major (indptr over rows, term ids,
    counts); each document's length in terms; whether the vocabulary is sorted by name (as `export` makes it)."""

    vocabulary: list[str]
    postings: tuple[npt.NDArray[np.integer[Any]], npt.NDArray[np.integer[Any]], npt.NDArray[np.integer[Any]]]
    documents: tuple[npt.NDArray[np.integer[Any]], npt.NDArray[np.integer[Any]], npt.NDArray[np.integer[Any]]]
    lengths: npt.NDArray[Any]
    sorted_terms: bool = False


def image_of(documents: Iterable[Sequence[str]]) -> LexicalImage:
    """`documents` (each one's terms, with repeats) as an image of an index of them, rows 0..n-1 in their order,
    read once into flat arrays of four bytes a posting (`LexicalIndex.built`)."""
    vocabulary: dict[str, int] = {}
    terms, counts, sizes, lengths = array("i"), array("i"), array("i"), array("i")  # 4 bytes a posting each
    for document in documents:
        held = Counter(document)
        for term, tf in held.items():
            term_id = vocabulary.get(term)
            if term_id is None:
                term_id = vocabulary[term] = len(vocabulary)
            terms.append(term_id)
            counts.append(tf)
        sizes.append(len(held))
        lengths.append(len(document))
    term_of, tf_of = np.frombuffer(terms, dtype=np.int32), np.frombuffer(counts, dtype=np.int32)
    per_document = np.frombuffer(sizes, dtype=np.int32)
    row_of = np.repeat(np.arange(len(sizes), dtype=np.int32), per_document)
    by_term = np.argsort(term_of, kind="stable")  # each term's rows ascending
    indptr = np.zeros(len(vocabulary) + 1, dtype=np.int64)
    np.cumsum(np.bincount(term_of, minlength=len(vocabulary)), out=indptr[1:])
    doc_indptr = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(per_document, out=doc_indptr[1:])
    postings = (indptr, row_of[by_term], tf_of[by_term])
    del row_of, by_term  # the peak: four bytes a posting for each array, eight for the sort's order
    # Doc-major as read: each document's terms in the order first met (an image's are by id; either serves).
    lengths_of = np.frombuffer(lengths, dtype=np.int32)
    return LexicalImage(list(vocabulary), postings, (doc_indptr, term_of, tf_of), lengths_of)


def by_name(
    names: Sequence[str | None], terms: IntArray, rows: IntArray, counts: IntArray
) -> tuple[list[str], tuple[npt.NDArray[np.int64], IntArray, IntArray, IntArray]]:
    """Term-major postings (each posting's term id, row and count, by term id and then row) of the terms named
    `names` (by id), renumbered in the order of the names of those they hold: those names, and the postings as
    indptr, term ids, rows and counts. Each posting moves to its term's new place, its rows still ascending (no sort
    of the postings)."""
    held = np.bincount(terms, minlength=len(names))
    used = np.flatnonzero(held)
    named = [cast(str, names[term]) for term in used.tolist()]  # a held term has a name
    order = np.array(sorted(range(len(used)), key=named.__getitem__), dtype=np.int64)
    renumbered = np.zeros(len(names), dtype=np.int64)
    renumbered[used[order]] = np.arange(len(used))
    indptr = np.zeros(len(used) + 1, dtype=np.int64)
    np.cumsum(held[used[order]], out=indptr[1:])
    within = np.arange(len(terms)) - (np.cumsum(held) - held)[terms]  # a posting's place among its term's
    place = indptr[:-1][renumbered[terms]] + within
    placed_terms, placed_rows, placed_counts = np.empty_like(terms), np.empty_like(rows), np.empty_like(counts)
    placed_terms[place], placed_rows[place], placed_counts[place] = renumbered[terms], rows, counts
    return [named[at] for at in order.tolist()], (indptr, placed_terms, placed_rows, placed_counts)


def doc_major(
    rows: IntArray, terms: IntArray, counts: IntArray, n_rows: int
) -> tuple[npt.NDArray[np.int64], IntArray, IntArray]:
    """Postings of rows 0..`n_rows`-1 (each one's row, term id and count, by term id) doc-major: indptr over the
    rows, term ids and counts, each row's by term id (a stable sort by row). A row may hold none (an empty text)."""
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    return indptr, terms[order], counts[order]
