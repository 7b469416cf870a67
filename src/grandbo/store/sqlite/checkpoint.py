"""The checkpoint an erasure owes: purged text must leave the write-ahead log, not only the database file.

A purge (and a text erasure) zeroes the freed pages of the file (`secure_delete`), but the `-wal` file still
holds the pages as they were until a checkpoint copies the log back and truncates it. `PRAGMA
wal_checkpoint(TRUNCATE)` cannot finish while another connection (another process, or this one's index build)
reads an older snapshot: it answers busy, and that answer was ignored, so the purged text stayed in the -wal for
as long as the log was not reset. Now the checkpoint is verified: tried a few times, briefly (a short busy timeout,
not the store's 10 s, so the purge's caller is not held); when readers still hold the log, the checkpoint is
recorded as owed, logged (`store.checkpoint_owed`), and tried again after every later write without waiting
(busy timeout 0) until it goes through (`store.checkpoint_done`), and when the store closes.
"""

from __future__ import annotations

import sqlite3
import time

import structlog

log = structlog.get_logger(__name__)

ATTEMPTS = 3
BRIEF_MS = 200  # the busy timeout of one verified attempt


class Checkpoints:
    """Whether this store owes a truncating checkpoint, and the attempts that pay it."""

    def __init__(self, busy_timeout_ms: int) -> None:
        self.busy_timeout_ms = busy_timeout_ms
        self.owed = False

    def truncate(self, db: sqlite3.Connection, why: str) -> bool:
        """Checkpoint and truncate the log now, verified; False (and owed) when readers kept it."""
        for attempt in range(ATTEMPTS):
            if self._try(db, BRIEF_MS):
                return True
            time.sleep(0.05 * (attempt + 1))
        if not self.owed:
            log.warning("store.checkpoint_owed", why=why,
                        remedy="retried after each write; end long-running readers of the store file")  # fmt: skip
        self.owed = True
        return False

    def settle(self, db: sqlite3.Connection) -> None:
        """Pay an owed checkpoint if no reader holds the log now (no waiting); a write calls it after COMMIT."""
        if self.owed and self._try(db, 0):
            log.info("store.checkpoint_done")

    def _try(self, db: sqlite3.Connection, busy_ms: int) -> bool:
        db.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        try:
            (busy, _, _) = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.OperationalError:  # locked: another process's writer; the same as busy
            busy = 1
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        if busy:
            return False
        self.owed = False
        return True
