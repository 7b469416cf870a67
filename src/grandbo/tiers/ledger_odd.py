"""The ledger counted by the store (`OrgDocuments.tally`) with its odd outcomes read by the model: the documents an
older release (or a hand-edited export) left in shapes `Outcome` may not read as stored (`store.sql.odd_outcomes`),
which the store counts apart and hands up whole. Each is read as a whole read of the ledger reads it
(`operations._outcome_reader`): one `Outcome` refuses is left out of every count, as there; one it reads (" Failed ",
a time with a space) is counted with its values as this release writes them, so the counts of the ledger's tally,
its records and recall agree with the ledger read whole (review 24b MEDIUM 4: 1/2 against 1/1)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import structlog

from grandbo.errors import UnreadableRecordError
from grandbo.ports import Document, Matching, Only, OrgDocuments
from grandbo.tiers.effectiveness import Outcome
from grandbo.tiers.records import read_record

log = structlog.get_logger(__name__)
Paths = Sequence[Sequence[str]]


def tallied(
    documents: OrgDocuments, collection: str, by: Paths, match: Matching, values: Paths, refs: Only = None
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """`OrgDocuments.tally`'s groups and rows, the odd outcomes' among them as `Outcome` reads them (a group of one
    each; a key may so come twice: add them)."""
    groups, rows, odd = documents.tally(collection, by, match, values, refs=refs)
    if not odd:
        return groups, rows
    counted: Counter[tuple[Any, ...]] = Counter()
    for doc_id, data in read(odd):
        counted[tuple(_at(data, path) for path in by)] += 1
        if all(_at(data, path) == value for path, value in match.items()):
            rows.append((doc_id, *(_at(data, path) for path in values)))
    return [*groups, *((*key, count) for key, count in counted.items())], rows


def read(docs: Iterable[Document]) -> list[tuple[str, dict[str, Any]]]:
    """Each document `Outcome` reads, by id, with its data as this release writes it (`Ledger.record`); the others
    left out, logged, as a whole read leaves them out."""
    found, unreadable = [], []
    for doc in docs:
        try:
            outcome = read_record(Outcome, doc, "outcome", given={"org_id": ""})
        except UnreadableRecordError:
            unreadable.append(doc.doc_id)
            continue
        found.append((doc.doc_id, outcome.model_dump(mode="json", exclude={"seq", "org_id"})))
    if unreadable:
        log.warning("records.unreadable", what="outcome", count=len(unreadable), ids=unreadable[:20])
    return found


def _at(data: Mapping[str, Any], path: Sequence[str]) -> Any:
    value: Any = data
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value
