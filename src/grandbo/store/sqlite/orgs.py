"""The embedded store's organizations: creating and dropping one, its declared language."""

from __future__ import annotations

import sqlite3
from datetime import datetime

import structlog

from grandbo.model import utcnow
from grandbo.store import projection
from grandbo.store.base import ORG_TABLES, loads_json
from grandbo.store.sqlite.connection import Connection, next_epoch
from grandbo.store.sqlite.erasure import erasing
from grandbo.store.sqlite.schema import rederive_org, store_terms

log = structlog.get_logger(__name__)

_TERMS_SOURCE = "SELECT entry_id, title, body, tags, services, terms, seq FROM memory_entries WHERE org_id = ?"


class Orgs(Connection):
    def ensure_org(self, org_id: str) -> None:
        with self._write() as db:
            if db.execute("SELECT 1 FROM orgs WHERE org_id = ?", (org_id,)).fetchone() is None:
                db.execute(
                    "INSERT INTO orgs (org_id, created_at, epoch) VALUES (?, ?, ?)",
                    (org_id, utcnow().isoformat(), next_epoch(db)),
                )

    def orgs(self) -> list[str]:
        with self._reading() as db:
            return [row[0] for row in db.execute("SELECT org_id FROM orgs ORDER BY org_id").fetchall()]

    def org_created(self) -> dict[str, datetime]:
        with self._reading() as db:
            rows = db.execute("SELECT org_id, created_at FROM orgs").fetchall()
        return {row[0]: datetime.fromisoformat(row[1]) for row in rows}

    def drop_org(self, org_id: str) -> None:
        with self._write() as db, erasing(db, org_id, "organization deleted"):
            for table in ORG_TABLES:
                db.execute(f"DELETE FROM {table} WHERE org_id = ?", (org_id,))

    def language(self, org_id: str) -> str | None:
        with self._read() as db:
            return self._require_org(db, org_id)

    def stored_bytes(self, org_id: str) -> int:
        with self._read() as db:
            found = db.execute("SELECT stored_bytes FROM orgs WHERE org_id = ?", (org_id,)).fetchone()
        return int(found[0]) if found else 0

    def set_language(self, org_id: str, language: str | None) -> int:
        # The new terms are worked out from one read, without holding the store's connection (the whole process
        # would wait for it: every request of every org); the write then applies them, and derives again in it
        # only the entries written meanwhile (their terms were made in the old language).
        with self._read() as db:
            self._require_org(db, org_id)
            read_epoch = _epoch(db, org_id)
            rows = db.execute(_TERMS_SOURCE, (org_id,)).fetchall()
        read_up_to = max((row[6] for row in rows), default=0)
        updates = projection.rederived(rows, self._terms_of, language, loads_json)
        with self._write() as db:
            self._require_org(db, org_id)
            if _epoch(db, org_id) != read_epoch:
                # Another declaration, a rebuild or a purge rewrote terms in place meanwhile (no new seq): what
                # was worked out from the read may no longer be a diff of what is stored. Derive it all here.
                changed = rederive_org(db, self._terms_of, org_id, language)
            else:
                moved = db.execute(_TERMS_SOURCE + " AND seq > ?", (org_id, read_up_to)).fetchall()
                for row in moved:  # what was worked out from their old text no longer holds
                    updates.pop(row[0], None)
                updates.update(projection.rederived(moved, self._terms_of, language, loads_json))
                store_terms(db, org_id, updates)
                changed = list(updates)
            db.execute("UPDATE orgs SET language = ?, epoch = ? WHERE org_id = ?", (language, next_epoch(db), org_id))
        log.info("store.language_set", org_id=org_id, language=language or "auto", entries_changed=len(changed))
        return len(changed)


def _epoch(db: sqlite3.Connection, org_id: str) -> int | None:
    found = db.execute("SELECT epoch FROM orgs WHERE org_id = ?", (org_id,)).fetchone()
    return int(found[0]) if found is not None and found[0] is not None else None
