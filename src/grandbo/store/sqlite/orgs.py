"""The embedded store's organizations: creating and dropping one, its declared language.

A drop deletes an org's rows in steps of `DROP_ROWS` rows, each its own short write, so that a large org's drop
does not hold the file's only write lock (every org's writes, in every process) for as long as deleting it all
takes: a 20,000-entry org's drop in one transaction held it 0.5 s. The org is gone at once all the same. The first
step deletes its row in `orgs` and its keys and webhook secrets, and marks the drop in `store_meta`: no request
reaches the org after it, no write can add to it (each checks the org, and the foreign keys of the tables that
have one refuse a row of an org that does not exist), and creating the org again finishes the drop first, so a
same-named successor never sees a row of the org before it. A drop cut short (a crash) is finished when the store is
next opened, or by the worker's maintenance (`SQLiteStore.maintain`).
"""

from __future__ import annotations

import sqlite3
import time
from datetime import datetime, timedelta

import structlog

from grandbo.errors import ConflictError
from grandbo.incarnation import Incarnation
from grandbo.model import utcnow
from grandbo.processes import named_gone
from grandbo.store import projection
from grandbo.store.base import CREDENTIALS, DROPPED, DROPS_KEPT_S, loads_json
from grandbo.store.sql.documents import HAS_KEYS
from grandbo.store.sql.holders import holder
from grandbo.store.sqlite.connection import Connection, next_epoch
from grandbo.store.sqlite.dialect import REPLACE, marks
from grandbo.store.sqlite.erasure import erasing
from grandbo.store.sqlite.images import ImageEraser
from grandbo.store.sqlite.schema import store_terms

log = structlog.get_logger(__name__)
LANGUAGE_ATTEMPTS = 4  # reads a language change works its terms out from, when its org's terms move meanwhile

DROP_ROWS = 500  # rows of a dropped org deleted by one statement
DROP_STEP_S = 0.02  # a drop's write deletes DROP_ROWS at a time until it has held the write lock this long
DROPPING = "org_dropping:"  # + org id: a `store_meta` key while the org's rows go, valued with its last step's time
DROP_STALE_S = 30.0  # a drop that took no step for this long was cut short (a crash)
DROPPER = "org_dropper:"  # + org id: a `store_meta` key valued with the process deleting the org's rows (`holder`):
# one proved gone (killed on this machine: `grandbo.processes`) was cut short, and the next open finishes its drop at
# once; it waited out DROP_STALE_S, so a command run right after the kill left the org's rows in the file (probe 32)
# The order a drop empties the tables in. Embed jobs first, so that workers stop embedding the org; its entries
# before their vectors, so that no vector is written for an entry after its row went (`write_vectors`).
_DROPPED_IN_STEPS = ("embed_outbox", "pending_work", "idempotency_keys", "documents", "document_events",
                     "memory_entries", "entry_vectors", "memory_events", "index_images")  # fmt: skip
_REASON = "organization deleted"

_TERMS_SOURCE = "SELECT entry_id, title, body, tags, services, terms, seq FROM memory_entries WHERE org_id = ?"


class Orgs(Connection):
    def ensure_org(self, org_id: str) -> bool:
        while True:  # a former org of this name: its rows all go before the new org exists
            self._finish_drop(org_id)
            with self._write(org_id) as db:
                if db.execute("SELECT 1 FROM orgs WHERE org_id = ?", (org_id,)).fetchone() is not None:
                    return False
                # In the same write as the insert: a drop whose first step committed after the read above would
                # otherwise delete the new org's rows with the old one's.
                if db.execute("SELECT 1 FROM store_meta WHERE key = ?", (DROPPING + org_id,)).fetchone() is None:
                    epoch = next_epoch(db)  # its first epoch is its incarnation (`grandbo.incarnation`)
                    db.execute(
                        "INSERT INTO orgs (org_id, created_at, epoch, incarnation) VALUES (?, ?, ?, ?)",
                        (org_id, utcnow().isoformat(), epoch, epoch),
                    )
                    return True

    def orgs(self) -> list[str]:
        with self._reading() as db:
            return [row[0] for row in db.execute("SELECT org_id FROM orgs ORDER BY org_id").fetchall()]

    def org_created(self) -> dict[str, datetime]:
        with self._reading() as db:
            rows = db.execute("SELECT org_id, created_at FROM orgs").fetchall()
        return {row[0]: datetime.fromisoformat(row[1]) for row in rows}

    def drop_org(self, org_id: str) -> None:
        with self._lock:
            # The org's row goes first, while rows still name it: the only write that runs without the tables'
            # foreign keys (off on this connection between transactions, under the store's lock).
            self._db.execute("PRAGMA foreign_keys = OFF")
            try:
                with self._write(org_id) as db, erasing(db, org_id, _REASON):
                    now = utcnow()
                    db.execute("DELETE FROM store_meta WHERE key LIKE ? AND value < ?",
                               (DROPPED + "%", (now - timedelta(seconds=DROPS_KEPT_S)).isoformat()))  # fmt: skip
                    exists = db.execute("SELECT 1 FROM orgs WHERE org_id = ?", (org_id,)).fetchone() is not None
                    keyed = db.execute(HAS_KEYS.format(p="?"), (org_id,)).fetchone() is not None
                    # its rows' deletion marked only if any; the drop's time only if a key cache may hold its keys
                    kept = (DROPPED,) * keyed + (DROPPING,) * exists
                    db.executemany(f"{REPLACE} INTO store_meta (key, value) VALUES (?, ?)",
                                   [(key + org_id, now.isoformat()) for key in kept])  # fmt: skip
                    if exists:
                        db.execute(
                            f"{REPLACE} INTO store_meta (key, value) VALUES (?, ?)", (DROPPER + org_id, holder())
                        )
                    db.execute(f"DELETE FROM documents WHERE org_id = ? AND collection IN ({marks(len(CREDENTIALS))})",
                               (org_id, *CREDENTIALS))  # fmt: skip
                    db.execute("DELETE FROM orgs WHERE org_id = ?", (org_id,))
            finally:
                self._db.execute("PRAGMA foreign_keys = ON")
        self._finish_drop(org_id)

    def since_dropped(self, org_id: str) -> float | None:
        with self._reading() as db:  # one machine's clock: the file is local
            found = db.execute("SELECT value FROM store_meta WHERE key = ?", (DROPPED + org_id,)).fetchone()
        return (utcnow() - datetime.fromisoformat(found[0])).total_seconds() if found is not None else None

    def finish_drops(self) -> list[str]:
        """Finish every drop cut short (at open): one whose last step is DROP_STALE_S old, or whose process is proved
        gone (`DROPPER`). A drop going on in another process is left to it; every process that opens the store
        meanwhile would otherwise join in."""
        stale = (utcnow() - timedelta(seconds=DROP_STALE_S)).isoformat()
        with self._reading() as db:
            marked = db.execute(
                "SELECT m.key, m.value < ?, d.value FROM store_meta m LEFT JOIN store_meta d ON d.key = ? || substr("
                "m.key, ?) WHERE m.key LIKE ?", (stale, DROPPER, len(DROPPING) + 1, DROPPING + "%"),
            ).fetchall()  # fmt: skip
        orgs = [key.removeprefix(DROPPING) for key, old, by in marked if old or (by is not None and named_gone(by))]
        for org_id in orgs:
            self._finish_drop(org_id)
        return orgs

    def _finish_drop(self, org_id: str) -> None:
        """Delete what is left of a dropped org in writes of about DROP_STEP_S each (`_Dropping.write`), with the
        pauses of `_in_short_writes` between them. Returns at once when no drop of `org_id` is marked, and stops when
        another process finished it."""
        with self._reading() as db:
            if db.execute("SELECT 1 FROM store_meta WHERE key = ?", (DROPPING + org_id,)).fetchone() is None:
                return
        dropping = _Dropping(org_id)
        self._in_short_writes(org_id, dropping.write)
        if dropping.finished:
            self._emptied_log(_REASON)
            log.info("store.org_dropped", org_id=org_id, rows=dropping.deleted)

    def language(self, org_id: str) -> str | None:
        with self._read() as db:
            return self._require_org(db, org_id)

    def incarnation(self, org_id: str) -> int | None:
        with self._reading() as db:
            found = db.execute("SELECT incarnation FROM orgs WHERE org_id = ?", (org_id,)).fetchone()
        return int(found[0]) if found is not None else None

    def erasures(self, org_id: str) -> int:
        with self._reading() as db:
            found = db.execute("SELECT erasures FROM orgs WHERE org_id = ?", (org_id,)).fetchone()
        return int(found[0]) if found is not None else 0

    def stored_bytes(self, org_id: str) -> int:
        with self._read() as db:
            found = db.execute("SELECT stored_bytes FROM orgs WHERE org_id = ?", (org_id,)).fetchone()
        return int(found[0]) if found else 0

    def set_language(self, org_id: str, language: str | None, incarnation: Incarnation | None = None) -> int:
        # The new terms are worked out from one read, without holding the store's lock (every write of every org
        # waits for it); the write then applies them, and derives again in it only the entries written meanwhile
        # (their terms were made in the old language). When another declaration, a rebuild or a purge rewrote terms
        # in place meanwhile (no new seq), what was worked out may no longer be a diff of what is stored: it is
        # worked out again from a new read, never under the lock (derived there, four of one org's language changes
        # at once held every other org's writes for 7-23 s: probe 18).
        for _attempt in range(LANGUAGE_ATTEMPTS):
            with self._read() as db:
                self._require_org(db, org_id)
                read_epoch = _epoch(db, org_id)
                rows = db.execute(_TERMS_SOURCE, (org_id,)).fetchall()
            read_up_to = max((row[6] for row in rows), default=0)
            updates = projection.rederived(rows, self._terms_of, language, loads_json)
            with self._write(org_id) as db:
                self._require_org(db, org_id, incarnation)
                if _epoch(db, org_id) != read_epoch:
                    continue
                moved = db.execute(_TERMS_SOURCE + " AND seq > ?", (org_id, read_up_to)).fetchall()
                for row in moved:  # what was worked out from their old text no longer holds
                    updates.pop(row[0], None)
                updates.update(projection.rederived(moved, self._terms_of, language, loads_json))
                store_terms(db, org_id, updates)
                db.execute(
                    "UPDATE orgs SET language = ?, epoch = ? WHERE org_id = ?", (language, next_epoch(db), org_id)
                )
            log.info("store.language_set", org_id=org_id, language=language or "auto", entries_changed=len(updates))
            return len(updates)
        raise ConflictError(
            f"Organization {org_id!r}'s memories were rewritten {LANGUAGE_ATTEMPTS} times while its new language was "
            "being applied (other language changes, a rebuild or a purge of it), so it was not changed. Send it "
            "again once those have ended.",
            detail={"org_id": org_id, "attempts": LANGUAGE_ATTEMPTS},
        )


class _Dropping:
    """What is left of a dropped org, deleted a write at a time (`write`), a piece at a time within it (`step`)."""

    def __init__(self, org_id: str) -> None:
        self.org_id = org_id
        self.image = ImageEraser()  # its index image, zeroed in place a piece at a time before it is deleted
        self.deleted = 0  # rows and image bytes so far
        self.finished = False  # this drop deleted the last of it (not another process)

    def write(self, db: sqlite3.Connection) -> bool:
        """One write of the drop: pieces until DROP_STEP_S has passed (one write per piece would pay a sync to disk
        per few hundred rows); whether more is left. Nothing once the mark is gone (another process finished it)."""
        started, marker = time.monotonic(), (DROPPING + self.org_id,)
        if db.execute("SELECT 1 FROM store_meta WHERE key = ?", marker).fetchone() is None:
            return False  # finished by another process meanwhile (which may have created the org again)
        if db.execute("SELECT 1 FROM orgs WHERE org_id = ?", (self.org_id,)).fetchone() is not None:
            # Never so (`ensure_org` finishes a marked drop first), unless a process of an earlier release created
            # it: its rows are not the dropped org's to delete.
            log.error("store.drop_left_for_a_new_org", org_id=self.org_id)
            return False
        with erasing(db, self.org_id, _REASON):
            while more := self.step(db):
                self.deleted += more
                if time.monotonic() - started > DROP_STEP_S:
                    db.execute("UPDATE store_meta SET value = ? WHERE key = ?", (utcnow().isoformat(), *marker))
                    db.execute(f"{REPLACE} INTO store_meta (key, value) VALUES (?, ?)",
                               (DROPPER + self.org_id, holder()))  # this process goes on with it  # fmt: skip
                    return True
            db.execute("DELETE FROM store_meta WHERE key IN (?, ?)", (*marker, DROPPER + self.org_id))
        self.finished = True
        return False

    def step(self, db: sqlite3.Connection) -> int:
        """Up to DROP_ROWS rows of the first table in `_DROPPED_IN_STEPS` that holds any, or a piece of the index
        image (`images.ImageEraser`); how many rows or bytes went (0: nothing is left)."""
        for table in _DROPPED_IN_STEPS:
            if table == "index_images":
                return self._image_piece(db)
            deleted = db.execute(
                f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE org_id = ? LIMIT ?)",
                (self.org_id, DROP_ROWS),
            ).rowcount
            if deleted:
                return int(deleted)
        return 0

    def _image_piece(self, db: sqlite3.Connection) -> int:
        found = db.execute("SELECT rowid, saved_at FROM index_images WHERE org_id = ?", (self.org_id,)).fetchone()
        if found is None:
            return 0
        return self.image.step(db, int(found[0]), found[1]) or 1  # 1: its row went, a step all the same


def _epoch(db: sqlite3.Connection, org_id: str) -> int | None:
    found = db.execute("SELECT epoch FROM orgs WHERE org_id = ?", (org_id,)).fetchone()
    return int(found[0]) if found is not None and found[0] is not None else None
