"""The entry row as the Postgres store reads and writes it, shared by the concerns that touch `memory_entries`.

`projection.Row` is the backend-neutral row (ISO times, JSON lists); these turn a fetched record into one
and one into the parameters of an INSERT, and name the columns in their order.
"""

from __future__ import annotations

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


# An entry's vector replaced whole: provider, model, dimension and the text's hash are written with it, and the
# org's vector sequence number it was written at (`_take_vector_seqs`).
VECTOR_UPSERT = upsert(
    "org_id, entry_id", ("provider", "model", "dimension", "content_hash", "embedded_at", "embedding", "vseq")
)
