"""The entry row as the Postgres store reads and writes it, shared by the concerns that touch `memory_entries`.

`projection.Row` is the backend-neutral row (ISO times, JSON lists); these turn a fetched record into one
and one into the parameters of an INSERT, and name the columns in their order.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from grandbo.model import Entry
from grandbo.store import projection
from grandbo.store.postgres.dialect import jsonb, upsert

ENTRY_COLUMNS, ENTRY_WIDTH = projection.ENTRY_COLUMNS, projection.ENTRY_WIDTH
# The columns an `Entry` is made of: without the index's terms (a recall's candidates read them for nothing).
ENTRY_FIELDS = ", ".join(column for column in ENTRY_COLUMNS.split(", ") if column != "terms")


def row_from_db(record: dict[str, Any]) -> projection.Row:
    row = dict(record)
    row["id"] = row.pop("entry_id")
    for key in ("occurred_at", "created_at", "updated_at"):
        row[key] = row[key].isoformat()
    return row


def entry_from_db(record: dict[str, Any]) -> Entry:
    return projection.to_entry(row_from_db(record))


def row_to_db(row: projection.Row) -> tuple[Any, ...]:
    return projection.row_values(row, jsonb, datetime.fromisoformat)


# The types of `ENTRY_COLUMNS` after org_id, in their order: the arrays rows are written as in one statement.
_TYPES = (
    "text", "text", "text", "text", "text", "jsonb", "jsonb", "text", "timestamptz", "text", "timestamptz",
    "timestamptz", "text", "text", "jsonb", "bigint", "text", "text", "text",
)  # fmt: skip
assert len(_TYPES) == ENTRY_WIDTH - 1
ENTRIES_INSERT = (
    f"INSERT INTO memory_entries ({ENTRY_COLUMNS}) SELECT %s, * FROM unnest("
    + ", ".join(f"%s::{kind}[]" for kind in _TYPES)
    + ")"
)
"""One org's rows inserted in one statement (parameters: `entries_inserted`): a row-by-row `executemany` runs
migration 34's statement-level triggers once a row."""


def entries_inserted(org_id: str, rows: Iterable[projection.Row]) -> tuple[Any, ...]:
    """The parameters of `ENTRIES_INSERT` for one org's `rows` (at least one): its id, then a list a column."""
    columns = zip(*(row_to_db(row)[1:] for row in rows), strict=True)
    return (org_id, *map(list, columns))


# An entry's vector replaced whole: provider, model, dimension and the text's hash are written with it, and the
# org's vector sequence number it was written at (`_take_vector_seqs`).
VECTOR_UPSERT = upsert(
    "org_id, entry_id", ("provider", "model", "dimension", "content_hash", "embedded_at", "embedding", "vseq")
)
