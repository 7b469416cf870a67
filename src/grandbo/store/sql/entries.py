"""The SQL both backends share for an organization's entries, spelled from their `Dialect`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from typing import Any

from grandbo.model import Listing
from grandbo.store.sql.dialect import Dialect


def listed(d: Dialect, include_inactive: bool, listing: Listing | None) -> tuple[str, list[Any], str]:
    """The condition after an org's `org_id = ...`, its parameters and the order of its entries: every one by seq,
    or `listing`'s page in SQL (newest first by creation, then id by code point, as the API's list routes sort;
    with `after`, the oldest first from there; a page used to read and sort every entry of the org in the
    process). Entry times are kept in UTC (as text on SQLite, which sorts as the times do)."""
    where = "" if include_inactive else " AND status = 'active'"
    values: list[Any] = []
    if listing is None:
        return where, values, "seq"
    p, ids = d.param, f"entry_id{d.code_points}"
    if listing.kind is not None:
        where, values = f"{where} AND kind = {p}", [*values, listing.kind.value]
    if listing.kinds:
        where = f"{where} AND kind IN ({', '.join([p] * len(listing.kinds))})"
        values = [*values, *(kind.value for kind in listing.kinds)]
    if listing.status is not None:
        where, values = f"{where} AND status = {p}", [*values, listing.status.value]
    if listing.service is not None:
        where, values = f"{where} AND {d.holds.format('services')}", [*values, listing.service]
    for position, beyond in ((listing.before, "<"), (listing.after, ">")):
        if position is not None:
            at, entry_id = d.time(position[0].astimezone(UTC)), position[1]
            if d.row_values:
                where, values = f"{where} AND (created_at, {ids}) {beyond} ({p}, {p})", [*values, at, entry_id]
            else:
                where = f"{where} AND (created_at {beyond} {p} OR (created_at = {p} AND {ids} {beyond} {p}))"
                values = [*values, at, at, entry_id]
    way = "ASC" if listing.after is not None else "DESC"
    return where, values, f"created_at {way}, {ids} {way} LIMIT {int(listing.limit)}"


RUNBOOK_ID = "runbook_id"
"""The column migration 23 adds: the runbook an entry cites (its meta.runbook_id when that is a string, else NULL),
derived by the database, as `Store.runbooks` compares it (on Postgres an index on `meta ->> ...` is not sought
under row-level security: jsonb's operators are not leakproof)."""


def cited_runbooks(cited: str, stored: bool) -> tuple[int, str, list[str]]:
    """Migration 23 as each backend's list holds it; `cited`: the backend's expression of meta.runbook_id when it is
    a string, else NULL. A mistyped runbook's outcome was refused after a read of every entry of the org, whose
    runbook ids were then compared with it one by one (probe 17: 18 s of the shared process at 20,000 entries).
    Postgres keeps the column stored (it indexes no virtual column: `memory_entries` is rewritten once, under a lock
    every org's writes wait for), SQLite virtual."""
    return (
        23,
        "the runbook each entry cites in a column, and indexes of it and of runbook entries: an outcome's runbook "
        "sought, not scanned",
        [
            f"ALTER TABLE memory_entries ADD COLUMN {RUNBOOK_ID} text GENERATED ALWAYS AS ({cited}) "
            f"{'STORED' if stored else 'VIRTUAL'}",
            f"CREATE INDEX memory_entries_by_runbook_id ON memory_entries (org_id, {RUNBOOK_ID}) "
            f"WHERE {RUNBOOK_ID} IS NOT NULL",
            "CREATE INDEX memory_entries_runbooks ON memory_entries (org_id, entry_id) WHERE kind = 'runbook'",
        ],
    )


def runbooks_read(
    execute: Callable[..., Any], p: str, org_id: str, runbook_id: str, limit: int
) -> tuple[bool, list[str]]:
    """`Store.runbooks` over `execute` (a connection's, inside one read), `p` the backend's placeholder. The ids
    offered for a hint are, of runbook entries and of cited runbooks each, the neighbours of `runbook_id` in the
    index's order (a typo past its first characters sorts next to the id it misspells) and a sample of the rest
    (every id of an org of few): taken in the index's order alone, the first `limit` named a typo of a later id
    after three others (review)."""
    if execute(f"SELECT 1 FROM memory_entries WHERE org_id = {p} AND {RUNBOOK_ID} = {p} LIMIT 1",
               (org_id, runbook_id)).fetchone():  # fmt: skip
        return True, []
    found: list[Any] = []
    near = max(1, limit // 4)
    for column, where in (("entry_id", "kind = 'runbook'"), (RUNBOOK_ID, f"{RUNBOOK_ID} IS NOT NULL")):
        read = f"SELECT DISTINCT {column} FROM memory_entries WHERE org_id = {p} AND {where}"
        found += execute(f"{read} AND {column} >= {p} ORDER BY {column} LIMIT {p}", (org_id, runbook_id, near))
        found += execute(f"{read} AND {column} < {p} ORDER BY {column} DESC LIMIT {p}", (org_id, runbook_id, near))
        found += execute(f"{read} LIMIT {p}", (org_id, limit // 2))
    return False, list(dict.fromkeys(value for (value,) in found if value))
