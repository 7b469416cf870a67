"""`OrgDocuments.tally`, the same on both backends but for the dialect's differences: the documents counted by the
values at some paths, the values of those that match, and the odd outcomes among them (`odd_outcomes`: flagged on
their write, or by migration 33), each read whole from their partial index and taken out of the counts and values,
for the ledger to read them with its model. The counts are those of every document less the odd ones' (found in
the same read): a count reads no flag of the others, which SQLite keeps virtual (a flag read of each would check
its shapes again)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from grandbo.ports import Document, Matching, Only, Tally
from grandbo.store.sql.dialect import chunks
from grandbo.store.sql.odd_outcomes import COLUMN, INDEX

if TYPE_CHECKING:
    from grandbo.store.sql.documents import DocumentSQL

Paths = Sequence[Sequence[str]]  # paths inside a document's data
Statement = tuple[str, tuple[Any, ...]]
WHOLE = "doc_id, ref, data, version, updated_at"  # an odd document's columns, then its `by` values
KEYS = len(WHOLE.split(", "))


def statements(sql: DocumentSQL, by: Paths, matching: str, values: Paths, among: str) -> tuple[str, str, str]:
    """The tally's three statements (parameters: org, collection, those of `among`, a condition on the columns; the
    second's then those of `matching`, the condition `DocumentSQL.matching` makes of a match): every document counted
    by its `by` values; the id and `values` of those that match; the odd ones whole, then their `by` values. Values
    as `json_at` reads them, not cast."""
    d = sql.dialect
    where = f"WHERE org_id = {d.param} AND collection = {d.param}{among and ' AND ' + among}"
    held = f"FROM documents {where}"
    keys = ", ".join(map(d.json_at, by))
    counted = f"SELECT {keys}, count(*) {held} GROUP BY {', '.join(str(n + 1) for n in range(len(by)))}"
    picked = f"SELECT doc_id, {', '.join(map(d.json_at, values))} {held}{matching}"
    odd = f"SELECT {WHOLE}, {keys} FROM documents {d.indexed_by.format(INDEX)} {where} AND {COLUMN}"  # their index
    return counted, picked, odd


class Tallying:
    """`OrgDocuments.tally` over the backend's one read of several statements (`SharedDocuments`)."""

    SQL: DocumentSQL
    _read_rows: Callable[[str, Sequence[Statement]], list[list[Any]]]  # the backend's: statements of the org run in
    # one read transaction, each one's rows

    @staticmethod
    def _document(collection: str, row: Sequence[Any]) -> Document:
        """A document of its columns as read (doc_id, ref, data, version, updated_at), decoded as the backend keeps
        them."""
        raise NotImplementedError

    def tally_documents(
        self, org_id: str, collection: str, by: Paths, match: Matching, values: Paths, refs: Only = None
    ) -> Tally:
        matching, params = self.SQL.matching(match)  # the same for every chunk
        counts, picks, odds = [], [], []  # each chunk of refs' statements (one: no refs), all in one read
        for chunk in [None] if refs is None else chunks(list(dict.fromkeys(refs))):
            among, held = self.SQL.dialect.any_of("ref", chunk) if chunk is not None else ("", ())
            counted, picked, odd = statements(self.SQL, by, matching, values, among)
            counts.append((counted, (org_id, collection, *held)))
            picks += [(picked, (org_id, collection, *held, *params))] if values else []
            odds.append((odd, (org_id, collection, *held)))
        read = self._read_rows(org_id, [*counts, *picks, *odds]) if counts else []
        found = sorted(chain(*read[len(counts) + len(picks) :]), key=itemgetter(0))  # by id
        apart = Counter(tuple(row[KEYS:]) for row in found)  # the odd ones' counts, by their `by` values
        summed: Counter[tuple[Any, ...]] = Counter()  # each key's count over every chunk of refs, the odd taken once
        for row in chain(*read[: len(counts)]):
            summed[tuple(row[:-1])] += row[-1]
        groups = [(*key, count - apart[key]) for key, count in summed.items() if count > apart[key]]
        ids = {row[0] for row in found}
        rows = [tuple(row) for row in chain(*read[len(counts) : len(counts) + len(picks)]) if row[0] not in ids]
        return Tally(groups, rows, [self._document(collection, row[:KEYS]) for row in found])
