"""What the shared SQL (`store/sql/`) needs to know of a backend's SQL: its differences, as data.

Each backend makes one `Dialect` in its own `dialect.py`; the statements it runs are spelled from it, so the
text both backends share is written once and differs only where the databases do.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from grandbo.store.sql.alert_indexes import COLUMNS as ALERT_COLUMNS

KEPT_APART: dict[tuple[str, ...], str] = {path: column for column, path in ALERT_COLUMNS}
"""Values inside a document's `data` also kept in a column of their own, which the database derives from `data`
(migration 20, `store/sql/alert_indexes.py`) and indexes. A read compares the column: on Postgres an index on
`data #>> ...` is not sought under row-level security (jsonb's operators are not leakproof), one on a column is."""


T = TypeVar("T")
CHUNK = 500
"""Ids per `IN (?, ...)` (SQLite caps the parameters of a statement)."""


def chunks(ids: Sequence[T], size: int = CHUNK) -> Iterator[list[T]]:
    """The ids in lists short enough for one `IN (?, ...)`."""
    for start in range(0, len(ids), size):
        yield list(ids[start : start + size])


@dataclass(frozen=True)
class Dialect:
    param: str
    """One parameter's placeholder: `?` (sqlite3) or `%s` (psycopg)."""
    lock_row: str
    """Appended to a read that is followed by a write of the same row: `" FOR UPDATE"`, or `""` where the one
    writer already holds the whole database."""
    now: str
    """The write time in a statement: a placeholder when the store passes it, or the database's own `now()`."""
    arrays: bool
    """A list is one array parameter (`= ANY(%s)`), not one placeholder per value (`IN (?, ...)`)."""
    json_type: str
    """The function naming a JSON value's type (`json_type`, `jsonb_typeof`)."""
    json_object: str
    """The function building a JSON object of key-value pairs (`json_object`, `jsonb_build_object`)."""
    key_param: str
    """The placeholder of a JSON key given as a parameter (`?`, `%s::text`)."""
    key_path: str
    """How a key is addressed by `data -> ...`, a format of the key: a JSON path (`$."{}"`) or the key (`{}`)."""
    written: str
    """A document's write time as it sorts and compares as time (`julianday(updated_at)`, `updated_at`)."""
    instant: str
    """A time parameter as `written` compares with it (`julianday(?)`, `%s`)."""
    row_values: bool
    """The index is sought from a row value comparison `(a, b) > (x, y)`; otherwise it is spelled out."""
    text_times: bool
    """Times go as ISO 8601 text, not as datetimes the driver adapts."""
    text_at: str
    """A value inside `data` as text, a format of its path joined by `path_join` (`json_extract(data, '$.{}')`,
    `(data #>> '{{{}}}')`); the path is our own names, plain words, never a caller's."""
    path_join: str
    """What joins a path's keys in `text_at` (`.` or `,`)."""
    holds: str
    """That a JSON array column holds the text parameter, a format of the column (`EXISTS (SELECT 1 FROM
    json_each({}) WHERE value = ?)`, `{} ? %s`)."""
    mentions: str
    """That a JSON column's text holds the text parameter anywhere, a format of the column (`instr({}, ?) > 0`,
    `strpos({}::text, %s) > 0`)."""
    folded: str
    """That a JSON column's text, its ASCII letters lowered, may hold the text parameter (given lowered; ASCII): a
    filter an erasure's match confirms (`tiers.erasure._probe`), a format of the column (`instr(lower({0}), ?) > 0`,
    or a row escaping a character as `\\u....`, as older releases wrote some; `strpos(lower({0}::text), %s) > 0`)."""
    json_bytes: str
    """A JSON column's size in bytes, a format of the column (`length(CAST({} AS BLOB))`, `octet_length({}::text)`:
    jsonb's printed text, a little longer than the JSON the store wrote)."""
    code_points: str
    """Appended to a text column so that it compares and sorts by code point, as Python does (`""` where that is
    the database's only way, ` COLLATE "C"`)."""
    sort_apart: str
    """A column to order by that the planner must not read an index in the order of, a format of the column (`+{}`;
    `{}` where the planner weighs it): SQLite, ordering a collection's documents of some refs by doc_id, walked every
    document of the collection in its primary key's order rather than seek the refs in their index."""
    indexed_by: str = ""
    """What names the index a read of `documents` must seek, a format of its name (`INDEXED BY {}`: SQLite's read of
    the odd outcomes walked the primary key, computing the virtual `outcome_odd` of every outcome, 2-3x a first count;
    `""`: Postgres weighs a partial index itself)."""

    def marks(self, count: int) -> str:
        """`count` placeholders, comma-separated."""
        return ", ".join([self.param] * count)

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        """`column` is one of `values`: the condition and its parameters."""
        if self.arrays:
            return f"{column} = ANY({self.param})", (list(values),)
        return f"{column} IN ({self.marks(len(values))})", tuple(values)

    def text_of(self, path: Sequence[str]) -> str:
        """The value at `path` inside a document's `data`, as text (for an equality with a parameter): the column
        it is kept in apart (`KEPT_APART`), or the expression reading it from `data`."""
        return KEPT_APART.get(tuple(path)) or self.json_at(path)

    def json_at(self, path: Sequence[str]) -> str:
        """The expression reading the value at `path` from a document's `data`, as text."""
        if not all(part.isidentifier() for part in path):
            raise ValueError(f"a document path is plain words: {path!r}")
        return self.text_at.format(self.path_join.join(path))

    def time(self, at: datetime) -> Any:
        """A time as this backend passes it."""
        return at.isoformat() if self.text_times else at


def for_each_org(statement: str) -> str:
    """`statement` (its condition naming `org`) run for each organization in a transaction set to that org, as a
    Postgres migration must where row-level security holds the migrator too (migrations 21 and 25)."""
    return f"""DO $$
            DECLARE
                org text;
            BEGIN
                FOREACH org IN ARRAY coalesce((SELECT array_agg(org_id) FROM orgs), '{{}}') LOOP
                    PERFORM set_config('grandbo.org_id', org, true);
                    {statement};
                END LOOP;
                PERFORM set_config('grandbo.org_id', '', true);
            END $$"""
