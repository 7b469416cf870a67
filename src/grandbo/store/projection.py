"""How an event changes the `memory_entries` projection: one pure function both backends share.

The live write path and `rebuild` apply events through `apply`, so a rebuilt projection equals the
live one by construction (and a test checks it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from grandbo.errors import EntryStateError
from grandbo.figures import incident_key
from grandbo.model import Entry, EventType, Status, entry_text
from grandbo.names import service_names
from grandbo.ports import NewEvent, RebuildResult
from grandbo.store.base import TermsOf

Row = dict[str, Any]

ENTRY_COLUMNS = (
    "org_id, entry_id, title, body, kind, source, tags, services, severity, occurred_at, status, "
    "created_at, updated_at, supersedes, superseded_by, meta, seq, terms, content_hash, incident_key"
)
"""The projection's columns (`memory_entries`), in the order `row_values` gives them."""
ENTRY_WIDTH = len(ENTRY_COLUMNS.split(","))


def row_values(row: Row, json: Callable[[Any], Any], time: Callable[[str], Any]) -> tuple[Any, ...]:
    """A row as the parameters of a write of `ENTRY_COLUMNS`: its lists and meta through `json`, its times (ISO
    text) through `time`, as the backend passes each."""
    return (
        row["org_id"],
        row["id"],
        row["title"],
        row["body"],
        row["kind"],
        row["source"],
        json(row["tags"]),
        json(row["services"]),
        row["severity"],
        time(row["occurred_at"]),
        row["status"],
        time(row["created_at"]),
        time(row["updated_at"]),
        row["supersedes"],
        row["superseded_by"],
        json(row["meta"]),
        row["seq"],
        row["terms"],
        row["content_hash"],
        row["incident_key"],
    )


def content_hash(title: str, body: str, tags: list[str], services: list[str]) -> str:
    """Hash of exactly the text that gets embedded; a vector is current when the hashes agree."""
    return hashlib.sha256(entry_text(title, body, tags, services).encode()).hexdigest()[:32]


def embed_text(row: Row) -> str:
    return entry_text(row["title"], row["body"], row["tags"], row["services"])


def apply(
    row: Row | None,
    org_id: str,
    entry_id: str,
    kind: EventType,
    payload: dict[str, Any],
    seq: int,
    at: datetime,
    terms_of: TermsOf,
    language: str | None,
) -> Row:
    """The entry row after one event (a new dict; `row` is not modified), with the incident it belongs to worked
    out again (`figures.incident_key`: its id, tags and meta, which a purge erases), for the store's counts (a row an
    older release wrote gets it at its next event). `terms_of` derives the terms the lexical arm indexes (a retrieval
    concern: the store is handed it by the service factory), in the org's declared `language` (None: the entry's
    own). Its times are written in UTC, whatever zone `at` came in: the embedded store pages entries by their time as
    text, which sorts as the times do only in one zone."""
    at = at.astimezone(UTC)
    if kind is EventType.REMEMBERED:
        if row is not None:
            raise EntryStateError(
                f"Entry {entry_id!r} already exists in org {org_id!r}; use `correct` to change it.",
                detail={"entry_id": entry_id, "org_id": org_id},
            )
        new: Row = {
            "org_id": org_id,
            "id": entry_id,
            "title": payload["title"],
            "body": payload.get("body", ""),
            "kind": payload["kind"],
            "source": payload["source"],
            "tags": list(payload.get("tags", [])),
            "services": service_names(payload.get("services", [])),  # as migration 30 keeps them
            "severity": payload.get("severity"),
            "occurred_at": payload["occurred_at"],
            "status": Status.ACTIVE.value,
            "created_at": (stamp := at.isoformat()),
            "updated_at": stamp,
            "supersedes": payload.get("supersedes"),
            "superseded_by": None,
            "meta": dict(payload.get("meta", {})),
            "seq": seq,
        }
        new["content_hash"] = content_hash(new["title"], new["body"], new["tags"], new["services"])
        new["terms"] = " ".join(terms_of(new["title"], new["body"], new["tags"], new["services"], language))
        return _keyed(new)
    if row is None:
        raise EntryStateError(
            f"No entry {entry_id!r} in org {org_id!r} to {_VERB.get(kind.value, kind.value)}.",
            detail={"entry_id": entry_id, "org_id": org_id},
        )
    if kind is EventType.PURGED:  # any status: the text goes, the entry leaves recall for good
        purged = dict(row, **redacted(row), updated_at=at.isoformat(), seq=seq)
        if purged["status"] == Status.ACTIVE.value:
            purged["status"] = Status.RETIRED.value
        purged["content_hash"] = content_hash(purged["title"], purged["body"], purged["tags"], purged["services"])
        purged["terms"] = " ".join(
            terms_of(purged["title"], purged["body"], purged["tags"], purged["services"], language)
        )
        return _keyed(purged)
    if row["status"] != Status.ACTIVE.value:
        raise EntryStateError(
            f"Entry {entry_id!r} is {row['status']}; only an active entry can be "
            f"{'corrected' if kind is EventType.CORRECTED else 'retired'}."
            + (
                f" {'Correct' if kind is EventType.CORRECTED else 'Retire'} its successor {row['superseded_by']!r} "
                "instead."
                if row.get("superseded_by")
                else ""
            ),
            detail={"entry_id": entry_id, "status": row["status"], "superseded_by": row.get("superseded_by")},
        )
    changed = dict(row, updated_at=at.isoformat(), seq=seq)
    if kind is EventType.CORRECTED:
        changed["status"] = Status.SUPERSEDED.value
        changed["superseded_by"] = payload["superseded_by"]
    elif kind is EventType.RETIRED:
        changed["status"] = Status.RETIRED.value
    return _keyed(changed)


def _keyed(row: Row) -> Row:
    row["incident_key"] = incident_key(row["id"], row["tags"], row["meta"])
    return row


PURGED_TITLE = "[purged]"

REDERIVE_READ = (
    "SELECT entry_id, title, body, tags, services, terms FROM memory_entries "
    "WHERE org_id = {p} AND entry_id > {p} ORDER BY entry_id LIMIT {p}"
)
"""A batch of an org's entries after an id, as `rederive` reads them (`{p}`: the backend's placeholder)."""


def rederive(
    batch: Callable[[str], Sequence[Sequence[Any]]],
    write: Callable[[dict[str, str]], None],
    terms_of: TermsOf,
    language: str | None,
    decode: Callable[[Any], list[str]],
) -> list[str]:
    """Derive the stored terms of one org's entries again (in `language`), batch by batch (`batch(after)`: the
    next rows of `REDERIVE_READ`), writing those that change (`write`); return the ids of the entries whose
    terms changed."""
    after = ""
    changed: list[str] = []
    while rows := batch(after):
        after = rows[-1][0]
        updates = rederived(rows, terms_of, language, decode)
        write(updates)
        changed += list(updates)
    return changed


def rederived(
    rows: Iterable[Sequence[Any]], terms_of: TermsOf, language: str | None, decode: Callable[[Any], list[str]]
) -> dict[str, str]:
    """Entry id -> its terms derived again in `language`, for the rows whose stored terms that changes. A row is
    (entry_id, title, body, tags, services, terms, ...); `decode` reads a stored tags or services column."""
    changed = {}
    for entry_id, title, body, tags, services, old, *_ in rows:
        new = " ".join(terms_of(title, body, decode(tags), decode(services), language))
        if new != old:
            changed[entry_id] = new
    return changed


def redacted(fields: dict[str, Any]) -> dict[str, Any]:
    """The text fields of an entry (or of a `remembered` event's payload) after a purge: title, body, tags and
    meta erased; kind, services, severity and times kept (they say what kind of thing was there, not what)."""
    return {"title": PURGED_TITLE, "body": "", "tags": [], "meta": {}}


def redacted_payload(kind: EventType, payload: dict[str, Any]) -> dict[str, Any] | None:
    """A logged event's payload with the purged entry's text erased, or None when it holds none of it."""
    if kind is not EventType.REMEMBERED:
        return None
    return {**payload, **redacted(payload)}


PURGED_READ = "SELECT 1 FROM memory_events WHERE org_id = {p} AND entry_id = {p} AND type = 'purged' LIMIT 1"
"""Whether an entry was purged already (`{p}`: the backend's placeholder): a purge again only erases the copies
of its text in documents written since (a triage in flight quoting it), and writes no event of the entry."""

NONE_PURGED_SINCE = "NOT EXISTS (SELECT 1 FROM memory_events WHERE org_id = {org} AND seq > {seq} AND type = 'purged')"
"""No entry of the org purged after a sequence number (`{org}`, `{seq}`: their placeholders): an index image saved at
those marks holds no purged entry's words. A purge deletes the org's image and keeps its epoch, so an index made
before it, in any process, could otherwise save its words again."""

REPLAY_READ = "SELECT seq, entry_id, type, payload, at FROM memory_events WHERE org_id = {p} ORDER BY seq"
"""An org's log, in order, as `replay` reads it (`{p}`: the backend's placeholder)."""


def replay(
    org_id: str, log: Iterable[tuple[int, str, str, dict[str, Any], datetime]], terms_of: TermsOf, language: str | None
) -> dict[str, Row]:
    """The projection an org's `log` yields (`REPLAY_READ`'s rows, payloads and times decoded), by entry id."""
    rows: dict[str, Row] = {}
    for seq, entry_id, kind, payload, at in log:
        rows[entry_id] = apply(
            rows.get(entry_id), org_id, entry_id, EventType(kind), payload, seq, at, terms_of, language
        )
    return rows


def apply_new(row: Row | None, org_id: str, event: NewEvent, seq: int, terms_of: TermsOf, language: str | None) -> Row:
    """`apply` for an event of the write path, given its sequence number."""
    return apply(row, org_id, event.entry_id, event.type, event.payload, seq, event.at, terms_of, language)


def to_entry(row: Row) -> Entry:
    return Entry.model_validate(row)  # Entry ignores the row's extra keys (terms, content_hash)


_COMPARED = (
    "title", "body", "kind", "source", "tags", "services", "severity", "status", "supersedes", "superseded_by",
    "meta", "seq", "terms", "content_hash", "incident_key",
)  # fmt: skip
_STAMPS = ("occurred_at", "created_at", "updated_at")


def compare(live: dict[str, Row], rebuilt: dict[str, Row]) -> RebuildResult:
    """How the live projection differs from the one the log yields (timestamps compared as instants: the two
    backends spell them differently)."""

    def same(a: Row, b: Row) -> bool:
        return all(a[key] == b[key] for key in _COMPARED) and all(
            datetime.fromisoformat(str(a[key])) == datetime.fromisoformat(str(b[key])) for key in _STAMPS
        )

    return RebuildResult(
        entries=len(rebuilt),
        missing=sorted(set(rebuilt) - set(live)),
        extra=sorted(set(live) - set(rebuilt)),
        changed=sorted(
            entry_id for entry_id in set(live) & set(rebuilt) if not same(live[entry_id], rebuilt[entry_id])
        ),
    )


_VERB = {"corrected": "correct", "retired": "retire", "purged": "purge"}  # what an event of each kind does
