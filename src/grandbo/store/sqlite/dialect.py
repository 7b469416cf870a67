"""The embedded store's SQL differences: placeholders, upserts, locking, JSON and vectors.

Statements SQLite and Postgres share are spelled from `DOCUMENTS` (`store/sql/`); the rest of this backend's SQL
uses the names here where the databases differ.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic_core import PydanticSerializationError, to_json

from grandbo.store.sql.dialect import CHUNK as CHUNK  # the shared SQL's; this backend's callers name them here
from grandbo.store.sql.dialect import Dialect
from grandbo.store.sql.dialect import chunks as chunks

DOCUMENTS = Dialect(
    param="?", lock_row="", now="?", arrays=False, json_type="json_type", json_object="json_object",
    key_param="?", key_path='$."{}"', written="julianday(updated_at)", instant="julianday(?)", row_values=False,
    text_times=True, text_at="(CASE WHEN json_valid(data) THEN json_extract(data, '$.{}') END)", path_join=".",
    holds="EXISTS (SELECT 1 FROM json_each({}) WHERE value = ?)", mentions="instr({}, ?) > 0", code_points="",
    json_bytes="length(CAST({} AS BLOB))", folded="(instr(lower({0}), ?) > 0 OR instr({0}, '\\u') > 0)",
    sort_apart="+{}", indexed_by="INDEXED BY {}",
)  # fmt: skip
"""A value inside `data` only where the row is JSON (a damaged row is no match, not an error for the whole read).
Times by the instant (julianday), not the text: a document loaded from an export keeps the UTC offset its
time was written with, and such text does not sort as time does. Migration 10 indexes that very expression."""

REPLACE = "INSERT OR REPLACE"
"""The upsert of a whole row by its primary key."""
BEGIN_WRITE = "BEGIN IMMEDIATE"
"""A write transaction: takes the file's one write lock first, so the next sequence numbers are this one's."""


def marks(count: int) -> str:
    """`count` placeholders, comma-separated."""
    return DOCUMENTS.marks(count)


def json_text(value: Any) -> str:
    """JSON text for a column, serialized by pydantic-core (Rust): four times faster than json.dumps on an
    event payload, which a bulk import writes for every entry. A value it cannot write (a lone surrogate in a row
    an older release kept, rewritten by an erasure) is written by the standard library, escaped."""
    try:
        return to_json(value).decode()
    except PydanticSerializationError:
        return json.dumps(value)


def vector_blob(vector: npt.NDArray[np.float32] | None) -> bytes:
    """A vector as it is stored: little-endian float32."""
    return np.asarray(vector, dtype="<f4").tobytes()


def vector_of(blob: bytes) -> npt.NDArray[np.float32]:
    """A stored vector, read in place (read-only: copy it to keep it)."""
    return np.frombuffer(blob, dtype="<f4")
