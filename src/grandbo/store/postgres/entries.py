"""The Postgres store's entries: the append-only event log and the projection written with it.

An append holds the org's writer lock, records its idempotency key, applies each event to the entry's row
(`store.projection`, the same on both backends) and writes events, rows, given vectors and embed jobs in one
transaction, in steps (`steps.StepWriter`). `rebuild` replays the log against the projection. Reads return
entries and events; `_rederive_org` derives stored terms again when an org's language changes or a
migration asks.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row
from pydantic_core import to_json

from grandbo.figures import EntryFigures
from grandbo.incarnation import Incarnation
from grandbo.model import Entry, Event, EventType, Listing
from grandbo.ports import NewEvent, RebuildResult, Replayed
from grandbo.store import projection
from grandbo.store.base import NOTHING_GIVEN, REDERIVE_BATCH, Given
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.dialect import DOCUMENTS, NEW_EPOCH, PARAM, jsonb
from grandbo.store.postgres.rows import (
    ENTRIES_INSERT,
    ENTRY_COLUMNS,
    ENTRY_FIELDS,
    entries_inserted,
    entry_from_db,
    row_from_db,
)
from grandbo.store.postgres.steps import Step, StepWriter
from grandbo.store.sql import storage
from grandbo.store.sql.entries import figures_read, listed, runbooks_read

_TERMS_UPDATE = (
    "UPDATE memory_entries e SET terms = u.terms FROM unnest(%s::text[], %s::text[]) AS u(entry_id, terms) "
    "WHERE e.org_id = %s AND e.entry_id = u.entry_id"
)


class EntriesMixin(PostgresConnection):
    """The event log, the projection and their reads, for `PostgresStore`."""

    @staticmethod
    def _idempotent(conn: psycopg.Connection[Any], org_id: str, key: str) -> Replayed | None:
        row = conn.execute(
            "SELECT entry_ids, request_hash FROM idempotency_keys WHERE org_id = %s AND key = %s", (org_id, key)
        ).fetchone()
        return Replayed(list(row[0]), row[1]) if row else None

    def idempotent(self, org_id: str, key: str) -> Replayed | None:
        def read() -> Replayed | None:
            with self._tx(org_id) as conn:
                return self._idempotent(conn, org_id, key)

        return self._retrying(read)

    def _rows(
        self, conn: psycopg.Connection[Any], org_id: str, entry_ids: Sequence[str], columns: str = ENTRY_COLUMNS
    ) -> dict[str, projection.Row]:
        with conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(
                f"SELECT {columns} FROM memory_entries WHERE org_id = %s AND entry_id = ANY(%s)",
                (org_id, list(entry_ids)),
            )
            return {record["entry_id"]: row_from_db(record) for record in cursor.fetchall()}

    _STEP = 500  # events per step of a large append (measured: 1,000 and 2,500 gained less)

    def append(self, org_id: str, events: Sequence[NewEvent], given: Given = NOTHING_GIVEN) -> list[Entry]:
        idempotency, wrote_vectors = given.idempotency, 0
        payloads = [to_json(event.payload) for event in events]  # before the transaction; their size is charged
        with self._writing(org_id) as conn:
            # The org's writer lock: a key is checked and recorded under it.
            language = self._require_org(conn, org_id, given.incarnation)
            if idempotency is not None:
                if (earlier := self._idempotent(conn, org_id, idempotency.key)) is not None:
                    raise earlier
                conn.execute(
                    "INSERT INTO idempotency_keys (org_id, key, request_hash, entry_ids) VALUES (%s, %s, %s, %s)",
                    (org_id, idempotency.key, idempotency.request_hash,
                     jsonb(list(dict.fromkeys(e.entry_id for e in events)))),
                )  # fmt: skip
            rows: dict[str, projection.Row | None] = dict(
                self._rows(conn, org_id, list(dict.fromkeys(event.entry_id for event in events)))
            )
            storage.charge(conn, DOCUMENTS, org_id, sum(map(len, payloads)), self.storage_limit_mb)
            # The org's row lock is held: the next sequence numbers of this org are ours.
            (last,) = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM memory_events WHERE org_id = %s", (org_id,)
            ).fetchone()  # type: ignore[misc]
            # And its vector numbers: those the steps write are taken once they are written (an entry given a
            # vector and appended in two steps gets it twice).
            vseq = self._vector_seq(conn, org_id) if given.vectors else 0
            # A large append goes in steps, in the one transaction: the server inserts one step's rows while
            # this process builds the next step's.
            with StepWriter(conn) as writer:
                for start in range(0, len(events), self._STEP):
                    chunk = events[start : start + self._STEP]
                    seqs = range(last + 1 + start, last + 1 + start + len(chunk))
                    changed: dict[str, projection.Row] = {}
                    for seq, event in zip(seqs, chunk, strict=True):
                        row = projection.apply_new(
                            rows.get(event.entry_id), org_id, event, seq, self._terms_of, language
                        )
                        rows[event.entry_id] = changed[event.entry_id] = row
                    step = Step.of(
                        org_id,
                        chunk,
                        payloads[start : start + self._STEP],
                        seqs,
                        changed,
                        given.vectors,
                        given.space,
                        vseq + wrote_vectors,
                    )
                    wrote_vectors += len(step.vectors)
                    writer.write(step)
            if wrote_vectors:
                vseq = self._take_vector_seqs(conn, org_id, wrote_vectors) + wrote_vectors
        if wrote_vectors and self.auto_index:
            self._want_vector_index(org_id, vseq)
        return [projection.to_entry(row) for row in rows.values() if row is not None]

    def rebuild(self, org_id: str, *, replace: bool = False, incarnation: Incarnation | None = None) -> RebuildResult:
        with self._writing(org_id) as conn:
            language = self._require_org(conn, org_id, incarnation)
            log = conn.execute(projection.REPLAY_READ.format(p=PARAM), (org_id,))
            rows = projection.replay(org_id, log, self._terms_of, language)
            with conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s", (org_id,))
                live = {row["id"]: row for row in map(row_from_db, cursor.fetchall())}
            result = projection.compare(live, rows)
            if result.identical or not replace:
                return result
            conn.execute("DELETE FROM memory_entries WHERE org_id = %s", (org_id,))
            conn.execute(NEW_EPOCH + " WHERE org_id = %s", (org_id,))
            replayed = list(rows.values())
            for start in range(0, len(replayed), self._STEP):  # one statement a step, not one a row
                conn.execute(ENTRIES_INSERT, entries_inserted(org_id, replayed[start : start + self._STEP]))
        return dataclasses.replace(result, replaced=True)

    def get_many(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, Entry]:
        if not entry_ids:
            return {}

        def read() -> dict[str, Entry]:
            with self._tx(org_id, join=True) as conn:
                rows = self._rows(conn, org_id, entry_ids, ENTRY_FIELDS)
            return {entry_id: projection.to_entry(row) for entry_id, row in rows.items()}

        return self._retrying(read)

    def entries(self, org_id: str, *, include_inactive: bool = False, listing: Listing | None = None) -> list[Entry]:
        where, values, order = listed(DOCUMENTS, include_inactive, listing)

        def read() -> list[Entry]:
            with self._tx(org_id) as conn, conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(
                    f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s{where} ORDER BY {order}",
                    (org_id, *values),
                )
                return [entry_from_db(r) for r in cursor.fetchall()]

        return self._retrying(read)

    def examples(self, org_id: str, content_type: str, limit: int) -> list[Entry]:
        def read() -> list[Entry]:
            with self._tx(org_id) as conn, conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(
                    f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s AND status = 'active' "
                    "AND kind = 'example' AND translate(btrim(meta->>'content_type'), %s, %s) = %s "
                    "ORDER BY occurred_at DESC, seq DESC LIMIT %s",
                    (org_id, string.ascii_uppercase, string.ascii_lowercase, content_type, limit),
                )
                return [entry_from_db(r) for r in cursor.fetchall()]

        return self._retrying(read)

    def runbooks(self, org_id: str, runbook_id: str, limit: int) -> tuple[bool, list[str]]:
        def read() -> tuple[bool, list[str]]:
            with self._tx(org_id) as conn:
                return runbooks_read(conn.execute, "%s", org_id, runbook_id, limit)

        return self._retrying(read)

    def entry_figures(self, org_id: str, linked: Sequence[str], since: int | None = None) -> EntryFigures | None:
        # The day of a time in UTC, as SQLite counts it, not in the session's zone (the server's TimeZone).
        day = "(({}) AT TIME ZONE 'UTC')::date"
        spelled = ("jsonb_array_elements_text(e.services) AS s(value)", day, "{} = ANY(%s)")

        def read() -> EntryFigures | None:
            with self._tx(org_id) as conn:
                holdable = lambda: [key for key in linked if "\x00" not in key]  # noqa: E731 (text holds no NUL)
                return figures_read(conn.execute, "%s", org_id, since, spelled, holdable, lambda ids: ids)

        return self._retrying(read)

    def events(
        self, org_id: str, entry_id: str | None = None, since_seq: int = 0, *, holding: str = "",
        limit: int | None = None,
    ) -> list[Event]:  # fmt: skip
        query = (
            "SELECT seq, org_id, entry_id, type, payload, actor, at FROM memory_events WHERE org_id = %s AND seq > %s"
        )
        params: tuple[Any, ...] = (org_id, since_seq)
        if entry_id is not None:
            query += " AND entry_id = %s"
            params += (entry_id,)
        if holding:  # ASCII without the letter i (`Store.events`), which some collations lower otherwise
            query += " AND strpos(lower(payload::text), %s) > 0"
            params += (holding.lower(),)

        def read() -> list[Event]:
            with self._tx(org_id) as conn, conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(query + " ORDER BY seq" + (f" LIMIT {int(limit)}" if limit else ""), params)
                return [Event.model_validate(dict(r, type=EventType(r["type"]))) for r in cursor.fetchall()]

        return self._retrying(read)

    def _rederive_org(self, conn: psycopg.Connection[Any], org_id: str, language: str | None) -> list[str]:
        """`projection.rederive` of one org, in this transaction."""

        def write(updates: dict[str, str]) -> None:
            if updates:  # one statement a batch: a row-by-row one runs migration 34's triggers once a row
                conn.execute(_TERMS_UPDATE, (list(updates), list(updates.values()), org_id))

        read = projection.REDERIVE_READ.format(p=PARAM)
        return projection.rederive(
            lambda after: conn.execute(read, (org_id, after, REDERIVE_BATCH)).fetchall(),
            write,
            self._terms_of,
            language,
            list,
        )
