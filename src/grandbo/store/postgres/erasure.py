"""The Postgres store's erasure: purging an entry's text from the log, the projection and everything derived.

The logs refuse UPDATE and DELETE unless the transaction says it erases this org (`grandbo.erasing`, migration
3). A purge rewrites the entry's events without its text, appends a `purged` event, replaces its row, drops its
vector, job and the org's index image (it held the entry's words), and moves the org's epoch; then VACUUM
prunes the dead row versions that still hold the old text, off the request (`upkeep.py`). The copies of its text
that documents hold (a received alert's recall and plan) are rewritten in the same transaction
(`erased.entry_erased`). Documents erase a text of their own (documents.py).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import psycopg
import structlog

from grandbo.erased import entry_erased
from grandbo.errors import NotFoundError
from grandbo.incarnation import Incarnation
from grandbo.model import Entry, EventType, utcnow
from grandbo.store import projection
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.dialect import ERASING, jsonb, params
from grandbo.store.postgres.documents import SQL
from grandbo.store.postgres.rows import ENTRY_COLUMNS, ENTRY_WIDTH, row_to_db
from grandbo.store.sql import storage
from grandbo.store.sql.erasing import PURGE_BATCH, erase_copies, purge_batches

log = structlog.get_logger(__name__)


class ErasureMixin(PostgresConnection):
    """Purging entries, and vacuuming what an erasure left, for `PostgresStore`."""

    def _vacuum(self, *tables: str) -> None:
        """Prune the dead row versions an erasure left (they still hold the old text), off the request: the
        store's own thread runs it after the erasure committed (`upkeep.Vacuums`)."""
        self.vacuums.owe(*tables)

    def purge(
        self, org_id: str, entry_id: str, reason: str, actor: str, incarnation: Incarnation | None = None
    ) -> Entry:
        # The copies of its text in documents (received alerts' kept recall and plans), found before the write.
        copies = self._found(org_id, lambda data, _: entry_erased(data, entry_id), mentioning=[entry_id])
        with self._writing(org_id) as conn:
            language = self._require_org(conn, org_id, incarnation)
            # The log accepts UPDATE of this org's rows only inside an erasure (migration 3).
            conn.execute(ERASING, (org_id,))
            row = self._rows(conn, org_id, [entry_id]).get(entry_id)
            if row is None:
                raise NotFoundError(
                    f"No entry {entry_id!r} in org {org_id!r}.", detail={"entry_id": entry_id, "org_id": org_id}
                )
            purged = self._purge_one(conn, org_id, row, reason, actor, language)
            # Purged already: only the copies written since, and no event of the entry; none, nothing written.
            wrote = erase_copies(conn, SQL, jsonb, copies, org_id, [entry_id], reason, actor,
                                 logged=purged[1] if purged else 0)  # fmt: skip
        if wrote:
            self._vacuum_purged()
        return projection.to_entry(purged[0] if purged else row)

    def purge_many(
        self, org_id: str, entry_ids: Sequence[str], reason: str, actor: str, incarnation: Incarnation | None = None
    ) -> list[str]:
        """`purge` of those not purged yet, PURGE_BATCH a transaction (their copies in documents found before each:
        `purge_batches`), then what follows a purge once; those purged, in order. A crash leaves whole batches."""
        done: list[str] = []
        try:
            found, find = functools.partial(self._found, org_id), functools.partial(self._find, org_id)
            for batch, copies_found in purge_batches(found, find, entry_ids, PURGE_BATCH):
                copies = copies_found()  # read just before the write, outside it
                with self._writing(org_id) as conn:
                    language = self._require_org(conn, org_id, incarnation)
                    conn.execute(ERASING, (org_id,))
                    purged: list[str] = []
                    logged = 0
                    for entry_id, row in self._rows(conn, org_id, batch).items():
                        if (now := self._purge_one(conn, org_id, row, reason, actor, language)) is not None:
                            purged, logged = [*purged, entry_id], logged + now[1]
                    erase_copies(conn, SQL, jsonb, copies, org_id, batch, reason, actor, logged=logged)
                done += [entry_id for entry_id in batch if entry_id in purged]
        finally:  # once, for every batch committed (an error in a later one too)
            if done:
                self._vacuum_purged()
        return done

    def _vacuum_purged(self) -> None:
        self._vacuum("memory_events", "memory_entries", "entry_vectors", "embed_outbox", "documents", "document_events")
        self._vacuum("index_images")  # apart: a store granted before images existed may not MAINTAIN it yet

    def _purge_one(
        self, conn: psycopg.Connection[Any], org_id: str, row: projection.Row, reason: str, actor: str,
        language: str | None,
    ) -> tuple[projection.Row, int] | None:  # fmt: skip
        """Purge one entry (its projection `row`) inside the erasure `conn` is in: its events redacted, a `purged`
        event, its row, vector, embed job and the org's index image; its new row and what its log changed by
        (`storage`). None: purged already."""
        entry_id, at = row["id"], utcnow()
        if conn.execute(projection.PURGED_READ.format(p="%s"), (org_id, entry_id)).fetchone():
            return None
        freed = 0  # bytes of the log, and of documents' history below (`storage`)
        for seq, kind, held in conn.execute(
            "SELECT seq, type, payload FROM memory_events WHERE org_id = %s AND entry_id = %s ORDER BY seq",
            (org_id, entry_id),
        ).fetchall():
            erased = projection.redacted_payload(EventType(kind), held)
            if erased is not None:
                conn.execute(
                    "UPDATE memory_events SET payload = %s WHERE org_id = %s AND seq = %s", (jsonb(erased), org_id, seq)
                )
                freed += storage.size(held) - storage.size(erased)
        (last,) = conn.execute(
            "SELECT coalesce(max(seq), 0) FROM memory_events WHERE org_id = %s", (org_id,)
        ).fetchone()  # type: ignore[misc]
        payload = {"reason": reason}
        conn.execute(
            "INSERT INTO memory_events (org_id, seq, entry_id, type, payload, actor, at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (org_id, last + 1, entry_id, EventType.PURGED.value, jsonb(payload), actor, at),
        )
        purged = projection.apply(
            row, org_id, entry_id, EventType.PURGED, payload, last + 1, at, self._terms_of, language
        )
        conn.execute("DELETE FROM memory_entries WHERE org_id = %s AND entry_id = %s", (org_id, entry_id))
        conn.execute(f"INSERT INTO memory_entries ({ENTRY_COLUMNS}) VALUES ({params(ENTRY_WIDTH)})", row_to_db(purged))
        conn.execute("DELETE FROM entry_vectors WHERE org_id = %s AND entry_id = %s", (org_id, entry_id))
        conn.execute("DELETE FROM embed_outbox WHERE org_id = %s AND entry_id = %s", (org_id, entry_id))
        # The image held the entry's terms. The org keeps its epoch: an index kept in memory takes the purge as
        # any other change of a row, and saves an image without them (`IndexKeeper.purged`).
        conn.execute("DELETE FROM index_images WHERE org_id = %s", (org_id,))
        return purged, storage.size(payload) - freed
