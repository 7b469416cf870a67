"""What this backend's SQL says differently from the embedded store's (SQLite), named once.

The placeholder and a list passed as one array; the upsert form; the row locks that let one org's writers
take turns while readers never wait (SQLite locks the whole file instead); the transaction-local settings
row-level security reads; pgvector's cosine operator and its index operator class; jsonb parameters.
The documents' statements are shared with SQLite (`store/sql/`), spelled from `DOCUMENTS`; the rest are
written out where they are used and take these pieces by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg.types.json import Jsonb
from pydantic_core import to_json

from grandbo.store.sql.dialect import Dialect

PARAM = "%s"  # psycopg's placeholder (SQLite: ?)

DOCUMENTS = Dialect(
    param=PARAM, lock_row=" FOR UPDATE", now="now()", arrays=True, json_type="jsonb_typeof",
    json_object="jsonb_build_object", key_param="%s::text", key_path="{}", written="updated_at", instant="%s",
    row_values=True, text_times=False, text_at="(data #>> '{{{}}}')", path_join=",", holds="{} ? %s",
    mentions="strpos({}::text, %s) > 0", code_points=' COLLATE "C"', json_bytes="octet_length({}::text)",
    folded="strpos(lower({0}::text), %s) > 0",
    sort_apart="{}",
)  # fmt: skip
"""The differences the shared SQL (`store/sql/`) spells: a list is one array parameter, the database's own
`now()`, jsonb, and row values that seek migration 10's index of write times."""


def params(count: int) -> str:
    """`count` placeholders, comma-separated: a VALUES list."""
    return ", ".join([PARAM] * count)


def upsert(key: str, columns: Iterable[str]) -> str:
    """An INSERT's clause that overwrites `columns` of the row already there under `key`."""
    return f"ON CONFLICT ({key}) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in columns)


# Row locks (SQLite has none: a write transaction holds the file).
FOR_UPDATE = "FOR UPDATE"  # the row is about to change or go: every other lock waits
FOR_NO_KEY_UPDATE = "FOR NO KEY UPDATE"  # an org's writer lock: other writers and a drop wait, `FOR KEY SHARE` not
FOR_SHARE = "FOR SHARE"  # read a row no one may change until this commits
FOR_KEY_SHARE = "FOR KEY SHARE"  # keep a row from being deleted (only a drop waits)
SKIP_LOCKED = "FOR UPDATE SKIP LOCKED"  # take the rows no one else holds, wait for none


def set_local(name: str) -> str:
    """The statement that sets a transaction-local setting to one parameter."""
    return f"SELECT set_config('{name}', {PARAM}, true)"


SET_ORG = set_local("grandbo.org_id")  # the org row-level security admits (switched org by org in one transaction)
ERASING = set_local("grandbo.erasing")  # the org whose logs this transaction may rewrite (migration 3)

# pgvector: cosine distance (1 - cosine similarity), and the HNSW index's operator class for it.
COSINE_DISTANCE = "<=>"
COSINE_OPS = "vector_cosine_ops"

# A new epoch for orgs: the sequence's next value taken once, then written (Citus refuses a volatile function
# in an UPDATE of a distributed table; each org's epoch still only grows).
NEW_EPOCH = "WITH next AS (SELECT nextval('grandbo_epoch') AS epoch) UPDATE orgs SET epoch = next.epoch FROM next"


def jsonb_of(encoded: bytes) -> Jsonb:
    """A jsonb parameter of JSON already serialized (by `jsonb`'s function), whose size the write counted."""
    return Jsonb(encoded, _as_is)


def _as_is(encoded: bytes) -> bytes:
    return encoded


def jsonb(value: Any) -> Jsonb:
    """A jsonb parameter serialized by pydantic-core (Rust): four times faster than json.dumps on an event
    payload, which a bulk import sends for every entry. Same JSON values (jsonb does not keep text)."""
    return Jsonb(value, to_json)
