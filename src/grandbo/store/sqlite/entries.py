"""The embedded store's entries: the event log, its projection (`store.projection`) and the reads of it."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic_core import to_json

from grandbo.figures import EntryFigures
from grandbo.incarnation import Incarnation
from grandbo.model import Entry, Event, EventType, Listing, Status, utcnow
from grandbo.ports import NewEvent, RebuildResult, Replayed
from grandbo.store import projection
from grandbo.store.base import NOTHING_GIVEN, Given, loads_json
from grandbo.store.sql import storage
from grandbo.store.sql.entries import figures_read, listed, runbooks_read
from grandbo.store.sqlite.connection import Connection, next_epoch
from grandbo.store.sqlite.dialect import DOCUMENTS, REPLACE, chunks, json_text, marks
from grandbo.store.sqlite.vectors import write_vectors

ENTRY_COLUMNS = projection.ENTRY_COLUMNS
READ_COLUMNS = (
    "org_id, entry_id, title, body, kind, source, tags, services, severity, occurred_at, status, "
    "created_at, updated_at, supersedes, superseded_by, meta, seq"
)
WRITE_ROW = f"{REPLACE} INTO memory_entries ({ENTRY_COLUMNS}) VALUES ({marks(projection.ENTRY_WIDTH)})"
LAST_SEQ = "SELECT coalesce(max(seq), 0) FROM memory_events WHERE org_id = ?"
"""The org's last sequence number (the next are this writer's: it holds the database). Numbered
per org, as on Postgres (migration 32): a store-wide number told an org how many events the others wrote."""
INSERT_EVENT = f"INSERT INTO memory_events (seq, org_id, entry_id, type, payload, actor, at) VALUES ({marks(7)})"


def row_from_db(record: sqlite3.Row) -> projection.Row:
    row = dict(record)
    row["id"] = row.pop("entry_id")
    return _decoded(row)


def _decoded(row: dict[str, Any]) -> projection.Row:
    """The row with its JSON columns (tags, services, meta) read into values, in place."""
    for key in ("tags", "services", "meta"):
        row[key] = loads_json(row[key])
    return row


# The reading path's columns by the names an Entry takes. Its rows come as plain tuples (`_select_entries`): a
# sqlite3.Row made into a dict cost as much as the query itself (a recall reads its hits' entries this way).
_READ_FIELDS = tuple("id" if column == "entry_id" else column for column in READ_COLUMNS.replace(" ", "").split(","))


def _entry_from_db(values: tuple[Any, ...]) -> Entry:
    """An Entry straight from a row of READ_COLUMNS (the reading path: no index terms, no hash)."""
    return projection.to_entry(_decoded(dict(zip(_READ_FIELDS, values, strict=True))))


def _select_entries(db: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows (tuples, for `_entry_from_db`) of `SELECT READ_COLUMNS FROM memory_entries WHERE ...`."""
    cursor = db.cursor()
    cursor.row_factory = None
    rows: list[tuple[Any, ...]] = cursor.execute(
        f"SELECT {READ_COLUMNS} FROM memory_entries WHERE {where}", params
    ).fetchall()
    return rows


def row_to_db(row: projection.Row) -> tuple[Any, ...]:
    return projection.row_values(row, json_text, _as_is)


def _as_is(text: str) -> str:
    """A time as this store keeps it: ISO 8601 text."""
    return text


def rows(db: sqlite3.Connection, org_id: str, entry_ids: Sequence[str]) -> dict[str, projection.Row]:
    """The projected rows of these entries (those that exist), by id."""
    found: dict[str, projection.Row] = {}
    for chunk in chunks(entry_ids):
        for record in db.execute(
            f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE org_id = ? AND entry_id IN ({marks(len(chunk))})",
            (org_id, *chunk),
        ):
            row = row_from_db(record)
            found[row["id"]] = row
    return found


def _idempotent(db: sqlite3.Connection, org_id: str, key: str) -> Replayed | None:
    row = db.execute(
        "SELECT entry_ids, request_hash FROM idempotency_keys WHERE org_id = ? AND key = ?", (org_id, key)
    ).fetchone()
    return Replayed(loads_json(row[0]), row[1]) if row else None


class Entries(Connection):
    def append(self, org_id: str, events: Sequence[NewEvent], given: Given = NOTHING_GIVEN) -> list[Entry]:
        idempotency, vectors = given.idempotency, given.vectors
        touched: dict[str, projection.Row | None] = {}
        payloads = [to_json(event.payload) for event in events]  # before the lock; their size is charged
        with self._write(org_id) as db:
            language = self._require_org(db, org_id, given.incarnation)
            if idempotency is not None:
                if (earlier := _idempotent(db, org_id, idempotency.key)) is not None:
                    raise earlier
                db.execute(
                    "INSERT INTO idempotency_keys (org_id, key, request_hash, entry_ids, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (org_id, idempotency.key, idempotency.request_hash,
                     json_text(list(dict.fromkeys(e.entry_id for e in events))), utcnow().isoformat()),
                )  # fmt: skip
            touched.update(rows(db, org_id, list(dict.fromkeys(event.entry_id for event in events))))
            if any(event.type is not EventType.RETIRED for event in events):  # retirements go on under the reserve
                self._keep_reserve()
            storage.charge(db, DOCUMENTS, org_id, sum(map(len, payloads)), self.storage_limit_mb)
            # One writer holds the database (BEGIN IMMEDIATE), so the org's next sequence numbers are ours.
            (base,) = db.execute(LAST_SEQ, (org_id,)).fetchone()
            logged = []
            for offset, (event, payload) in enumerate(zip(events, payloads, strict=True), start=1):
                seq = base + offset
                touched[event.entry_id] = projection.apply_new(
                    touched.get(event.entry_id), org_id, event, seq, self._terms_of, language
                )
                logged.append(
                    (seq, org_id, event.entry_id, event.type.value, payload.decode(), event.actor,
                     event.at.isoformat())
                )  # fmt: skip
            db.executemany(INSERT_EVENT, logged)
            changed = [row for row in touched.values() if row is not None]
            db.executemany(WRITE_ROW, [row_to_db(row) for row in changed])
            now = utcnow().isoformat()
            active = [row for row in changed if row["status"] == Status.ACTIVE.value]
            inactive = [row for row in changed if row["status"] != Status.ACTIVE.value]
            db.executemany(
                "INSERT INTO embed_outbox (org_id, entry_id, content_hash, available_at, created_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (org_id, entry_id) DO UPDATE SET "
                "content_hash = excluded.content_hash, attempts = 0, last_error = NULL, "
                "available_at = excluded.available_at, claimed_until = NULL, claimed_by = NULL "
                "WHERE embed_outbox.content_hash != excluded.content_hash",
                [(org_id, row["id"], row["content_hash"], now, now) for row in active if row["id"] not in vectors],
            )
            supplied = [
                (org_id, row["id"], row["content_hash"], vectors[row["id"]]) for row in active if row["id"] in vectors
            ]
            if supplied:
                assert given.space is not None
                write_vectors(db, given.space, supplied)
            db.executemany(
                "DELETE FROM embed_outbox WHERE org_id = ? AND entry_id = ?",
                [(org_id, row["id"]) for row in inactive],
            )
        return [projection.to_entry(row) for row in changed]

    def idempotent(self, org_id: str, key: str) -> Replayed | None:
        with self._reading() as db:
            return _idempotent(db, org_id, key)

    def rebuild(self, org_id: str, *, replace: bool = False, incarnation: Incarnation | None = None) -> RebuildResult:
        # The log is replayed and compared in a read snapshot: under the store's write lock, the compare alone of an
        # org of 40,000 entries held every org's writes for 15 s, and another org's write through a server was
        # refused `store_busy` after 10 (probe 24). A replacement is written under the lock, replayed there again
        # only when the org's log, erasures, epoch or language moved since the snapshot (`_mark`).
        with self._read() as db:
            self._require_org(db, org_id, incarnation)
            mark, (result, rebuilt) = _mark(db, org_id), self._replayed(db, org_id)
        if result.identical or not replace:
            return result
        with self._write(org_id) as db:
            self._require_org(db, org_id, incarnation)
            if _mark(db, org_id) != mark:
                result, rebuilt = self._replayed(db, org_id)
                if result.identical:
                    return result
            db.execute("DELETE FROM memory_entries WHERE org_id = ?", (org_id,))
            db.execute("UPDATE orgs SET epoch = ? WHERE org_id = ?", (next_epoch(db), org_id))
            db.executemany(
                f"INSERT INTO memory_entries ({ENTRY_COLUMNS}) VALUES ({marks(projection.ENTRY_WIDTH)})",
                [row_to_db(row) for row in rebuilt.values()],
            )
        return dataclasses.replace(result, replaced=True)

    def _replayed(self, db: sqlite3.Connection, org_id: str) -> tuple[RebuildResult, dict[str, projection.Row]]:
        """The projection `org_id`'s log yields, and how it compares with the stored one, as `db` sees them."""
        language = self._require_org(db, org_id)
        log = db.execute(projection.REPLAY_READ.format(p="?"), (org_id,))
        decoded = ((seq, entry_id, kind, loads_json(payload), datetime.fromisoformat(at))
                   for seq, entry_id, kind, payload, at in log)  # fmt: skip
        rebuilt = projection.replay(org_id, decoded, self._terms_of, language)
        stored = db.execute(f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE org_id = ?", (org_id,))
        live = {row["id"]: row for row in map(row_from_db, stored)}
        return projection.compare(live, rebuilt), rebuilt

    def get_many(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, Entry]:
        records = []
        with self._reading() as db:
            for chunk in chunks(entry_ids):
                records += _select_entries(db, f"org_id = ? AND entry_id IN ({marks(len(chunk))})", (org_id, *chunk))
        return {entry.id: entry for entry in map(_entry_from_db, records)}

    def entries(self, org_id: str, *, include_inactive: bool = False, listing: Listing | None = None) -> list[Entry]:
        where, values, order = listed(DOCUMENTS, include_inactive, listing)
        with self._reading() as db:
            records = _select_entries(db, f"org_id = ?{where} ORDER BY {order}", (org_id, *values))
        return [_entry_from_db(record) for record in records]

    def examples(self, org_id: str, content_type: str, limit: int) -> list[Entry]:
        with self._reading() as db:
            records = _select_entries(
                db,
                "org_id = ? AND status = 'active' AND kind = 'example' "
                "AND lower(trim(json_extract(meta, '$.content_type'))) = ? ORDER BY occurred_at DESC, seq DESC LIMIT ?",
                (org_id, content_type, limit),
            )
        return [_entry_from_db(record) for record in records]

    def runbooks(self, org_id: str, runbook_id: str, limit: int) -> tuple[bool, list[str]]:
        with self._read() as db:
            return runbooks_read(db.execute, "?", org_id, runbook_id, limit)

    def entry_figures(self, org_id: str, linked: Sequence[str], since: int | None = None) -> EntryFigures | None:
        # The day of a time in UTC (date() turns the text's own zone into UTC), as Postgres counts it.
        spelled = ("json_each(e.services)", "date({})", "{} IN (SELECT value FROM json_each(?))")
        with self._read() as db:
            return figures_read(db.execute, "?", org_id, since, spelled, lambda: list(linked), json_text)

    def events(
        self, org_id: str, entry_id: str | None = None, since_seq: int = 0, *, holding: str = "",
        limit: int | None = None,
    ) -> list[Event]:  # fmt: skip
        query = "SELECT seq, org_id, entry_id, type, payload, actor, at FROM memory_events WHERE org_id = ? AND seq > ?"
        params: tuple[Any, ...] = (org_id, since_seq)
        if entry_id is not None:
            query += " AND entry_id = ?"
            params += (entry_id,)
        if holding:  # ASCII (`Store.events`): SQLite's lower() folds ASCII letters only
            query += " AND instr(lower(payload), ?) > 0"
            params += (holding.lower(),)
        with self._reading() as db:
            records = db.execute(query + " ORDER BY seq" + (f" LIMIT {int(limit)}" if limit else ""), params).fetchall()
        return [
            Event(
                seq=r["seq"],
                org_id=r["org_id"],
                entry_id=r["entry_id"],
                type=EventType(r["type"]),
                payload=loads_json(r["payload"]),
                actor=r["actor"],
                at=datetime.fromisoformat(r["at"]),
            )
            for r in records
        ]


def _mark(db: sqlite3.Connection, org_id: str) -> tuple[Any, ...]:
    """What moves when an org's projection may: its log's last event (a purge's too), its erasures (events rewritten),
    its epoch and its language."""
    row = db.execute("SELECT (SELECT max(seq) FROM memory_events WHERE org_id = ?), erasures, epoch, language FROM "
                     "orgs WHERE org_id = ?", (org_id, org_id)).fetchone()  # fmt: skip
    return tuple(row) if row is not None else ()
