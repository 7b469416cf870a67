"""What an organization has written to the disk every organization shares, counted, and bounded by a limit.

Each org's row in `orgs` keeps `stored_bytes`: the bytes of its memory log (`memory_events.payload`) and of its
documents' history (`document_events.data`), the JSON the rest of its rows are derived from or copy. A write adds
what it appends, counted as the JSON the store writes (`size`), in the write's own transaction and under the org's
writer lock (`charge`): the count is the same on both backends, whichever processes write, and a write that fails
takes its part back with it. An erasure (a purge, purge-text) takes off what it removed and is never refused.

With a limit (`GRANDBO_ORG_STORAGE_LIMIT_MB`), a write that would take the org past it is refused whole
(`StorageLimitError`, 507): nothing of it is written, and reads, erasures and the org's deletion go on. What the
logs' rows derive is not counted: each entry's row (its text again, with its terms), each document's current
version, vectors and index images. On disk the org takes 1.8-4 times its count (measured on SQLite, the most for
a few large entries): an operator sets the limit to a quarter to a half of what one org may take.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import PydanticSerializationError, to_json

from grandbo.errors import StorageLimitError
from grandbo.store.sql.dialect import Dialect, for_each_org

MIB = 1024 * 1024


def size(value: Any) -> int:
    """The bytes `value` takes in a log, as the store writes it (pydantic-core's JSON; see each backend's
    `json_text` / `jsonb`). A value pydantic-core cannot write (a lone surrogate in a row an older release kept,
    which the store reads all the same) is sized as the standard library writes it."""
    try:
        return len(to_json(value))
    except PydanticSerializationError:
        return len(json.dumps(value).encode())


def migration(dialect: Dialect, integer: str, *, org_by_org: bool) -> tuple[int, str, list[str]]:
    """Migration 21 as each backend's list holds it: the column, and each org's count from what its logs hold;
    `org_by_org` where row-level security holds the migrator too (Postgres: each org's rows are read in a
    transaction set to that org, as migration 15 does)."""
    counted = " + ".join(
        f"coalesce((SELECT sum({dialect.json_bytes.format(column)}) FROM {table} "
        f"WHERE {table}.org_id = orgs.org_id), 0)"
        for table, column in (("memory_events", "payload"), ("document_events", "data"))
    )
    count = f"UPDATE orgs SET stored_bytes = {counted}"
    if org_by_org:
        count = for_each_org(f"{count} WHERE org_id = org")
    what = "each organization's stored bytes (its memory log and document history), counted by every write"
    return 21, what, [f"ALTER TABLE orgs ADD COLUMN stored_bytes {integer} NOT NULL DEFAULT 0", count]


def charge(conn: Any, dialect: Dialect, org_id: str, added: int, limit_mb: int) -> int:
    """Add `added` bytes (less than none for an erasure) to the org's count on `conn`, inside the write that
    appended them and after it took the org's writer lock; its new count. A write that adds bytes and would take
    the org past `limit_mb` (0: no limit) raises `StorageLimitError`, so its transaction writes nothing."""
    p = dialect.param
    (total,) = conn.execute(
        f"UPDATE orgs SET stored_bytes = CASE WHEN stored_bytes + {p} > 0 THEN stored_bytes + {p} ELSE 0 END "
        f"WHERE org_id = {p} RETURNING stored_bytes",
        (added, added, org_id),
    ).fetchone()
    if added > 0 and limit_mb and total > limit_mb * MIB:
        held = total - added
        raise StorageLimitError(
            f"Organization {org_id!r} holds {held / MIB:.1f} MiB of its {limit_mb} MiB storage limit; this write of "
            f"{added / 1024:.1f} KiB would pass it, so nothing of it was written.",
            detail={"org_id": org_id, "stored_bytes": held, "write_bytes": added, "limit_bytes": limit_mb * MIB},
        )
    return int(total)
