"""The SQL both backends share for an organization's entries, spelled from their `Dialect`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, date
from typing import Any

from grandbo.figures import INCIDENT_KINDS, EntryFigures, incident_key
from grandbo.model import Listing
from grandbo.store.sql.dialect import Dialect


def listed(d: Dialect, include_inactive: bool, listing: Listing | None) -> tuple[str, list[Any], str]:
    """The condition after an org's `org_id = ...`, its parameters and the order of its entries: every one by seq,
    or `listing`'s page in SQL (newest first by creation, then id by code point, as the API's list routes sort;
    with `after`, the oldest first from there; with `after_seq`, by seq from there; a page used to read and sort
    every entry of the org in the process). Entry times are kept in UTC (as text on SQLite, which sorts as the
    times do)."""
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
    if listing.after_seq is not None:
        return f"{where} AND seq > {p}", [*values, listing.after_seq], f"seq LIMIT {int(listing.limit)}"
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
        found += execute(f"{read} ORDER BY {column} LIMIT {p}", (org_id, limit // 2))  # in its index (not by time)
    return False, list(dict.fromkeys(value for (value,) in found if value))


SOUGHT_KEY = 500  # the longest incident key its index holds, in characters (four bytes each at most)
INCIDENT_KEY = "incident_key"  # migration 24's column (`figures.incident_key`; NULL: a row an older release wrote)
FILL_INCIDENT_KEYS = "-- every entry's incident worked out and kept beside it (a step in Python, not SQL)"
"""The step of migration 24 each backend runs with `fill_incident_keys`."""
INCIDENT_KEYS = (
    24,
    "the incident each entry belongs to, kept beside it: the console's analytics count entries in SQL, not read them",
    [
        f"ALTER TABLE memory_entries ADD COLUMN {INCIDENT_KEY} text",
        FILL_INCIDENT_KEYS,
        # The entries of given incidents sought, not scanned; the days things happened counted from an index. A key
        # past SOUGHT_KEY characters (its meta.incident_id's text) is left out: Postgres refuses an index row past
        # 2,704 bytes, and so would refuse the entry's write.
        f"CREATE INDEX memory_entries_by_incident ON memory_entries (org_id, {INCIDENT_KEY}) "
        f"WHERE length({INCIDENT_KEY}) <= {SOUGHT_KEY}",
        "CREATE INDEX memory_entries_by_occurrence ON memory_entries (org_id, occurred_at)",
    ],
)
"""Migration 24 as each backend's list holds it (`figures`)."""
KEYS_BATCH = 2_000  # entries read at a time


def incident_keys_read(p: str) -> str:
    """A batch of one org's entries, each id, tags and meta, after an id (parameters: org, entry id)."""
    return (
        f"SELECT entry_id, tags, meta FROM memory_entries WHERE org_id = {p} AND entry_id > {p} "
        f"ORDER BY entry_id LIMIT {KEYS_BATCH}"
    )


def incident_keys_write(p: str) -> str:
    """One entry's incident written (parameters: the incident, org, entry id)."""
    return f"UPDATE memory_entries SET incident_key = {p} WHERE org_id = {p} AND entry_id = {p}"


def fill_incident_keys(
    read: Callable[[str], Sequence[tuple[str, Any, Any]]],
    write: Callable[[list[tuple[str, str]]], object],
    decode: Callable[[Any], Any],
) -> int:
    """One org's entries each given the incident it belongs to (`figures.incident_key`, as the projection works it
    out on every write); how many. `read(after)` gives the next batch of `incident_keys_read`, `decode` reads a
    stored JSON column, `write` takes (incident, entry id) pairs."""
    after, filled = "", 0
    while rows := read(after):
        write([(incident_key(entry_id, decode(tags), decode(meta)), entry_id) for entry_id, tags, meta in rows])
        filled += len(rows)
        after = rows[-1][0]
    return filled


def figures_read(
    execute: Callable[..., Any],
    p: str,
    org_id: str,
    since: int | None,
    spelled: tuple[str, str, str],
    ids: Callable[[], list[str]],
    convert: Callable[[list[str]], Any],
) -> EntryFigures | None:
    """`Store.entry_figures` over `execute` (a connection's, inside one read), `p` the backend's placeholder, in its
    spelling (`spelled`): a table of `e.services`' values (column `value`), the day of a time column `{}` as the
    backend's entry gives it, and the condition that `{}` is one of some ids (one parameter: the ids `ids()` makes,
    as `convert` passes them). None, at the cost of one index lookup, when no event shaped an entry after `since`.
    Else the org's rows are counted in the database (its indexes, and one scan for the services of its findings and
    post-mortems), and what comes back is a row per day and per service, and a pair per incident asked about that
    those entries tell too."""
    each_service, day, among = spelled
    (seq,) = execute(f"SELECT coalesce(max(seq), 0) FROM memory_entries WHERE org_id = {p}", (org_id,)).fetchone()
    if since is not None and seq == since:
        return None
    key = f"coalesce(e.{INCIDENT_KEY}, e.entry_id)"  # a row an older release wrote meanwhile: its own incident
    (entries,) = execute(f"SELECT count(*) FROM memory_entries WHERE org_id = {p}", (org_id,)).fetchone()
    by_day = []
    for column in ("created_at", "occurred_at"):
        counted = execute(f"SELECT {day.format(column)}, count(*) FROM memory_entries WHERE org_id = {p} GROUP BY 1",
                          (org_id,))  # fmt: skip
        by_day.append({_day(at): count for at, count in counted})
    told = (
        f"FROM memory_entries AS e, {each_service} WHERE e.org_id = {p} AND e.kind IN {INCIDENT_KINDS!r} "
        "AND e.status <> 'superseded'"
    )
    incidents = dict(execute(f"SELECT value, count(DISTINCT {key}) {told} GROUP BY value", (org_id,)))
    # Sought by the index of incidents (a row an older release wrote has none to seek: counted, not linked); ids
    # longer than it holds (none the incident tier makes), by a scan.
    asked = ids()
    short, long = [i for i in asked if len(i) <= SOUGHT_KEY], [i for i in asked if len(i) > SOUGHT_KEY]
    read = f"SELECT DISTINCT value, e.{INCIDENT_KEY} {told} AND {among.format('e.' + INCIDENT_KEY)}"
    linked = execute(f"{read} AND length(e.{INCIDENT_KEY}) <= {SOUGHT_KEY}", (org_id, convert(short))).fetchall()
    if long:
        linked += execute(read, (org_id, convert(long))).fetchall()
    return EntryFigures(entries, seq, by_day[0], by_day[1], incidents, [(service, of) for service, of in linked])


def _day(value: date | str) -> date:
    return value if isinstance(value, date) else date.fromisoformat(value)
