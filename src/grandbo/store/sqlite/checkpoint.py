"""The checkpoint an erasure owes: purged text must leave the write-ahead log, not only the database file.

Every write zeroes what it frees in the file (`secure_delete`, on since the connection opened), but the `-wal` file
still holds the pages as they were until a checkpoint copies the log back and truncates it. `PRAGMA
wal_checkpoint(TRUNCATE)` cannot finish while another connection (another process, or this one's index build)
reads an older snapshot: it answers busy, and that answer was ignored, so the purged text stayed in the -wal for
as long as the log was not reset. Now the checkpoint is verified: tried a few times, briefly (a short busy timeout,
not the store's 10 s, so the purge's caller is not held); when readers still hold the log, the checkpoint is
recorded as owed, logged (`store.checkpoint_owed`), and tried again after every later write without waiting
(busy timeout 0) until it goes through (`store.checkpoint_done`), and when the store closes.

What is owed is kept in the store file too (`store_meta`'s `checkpoint_owed`), so that any process pays it after
its next write: a `grandbo purge-text` run beside a server, its checkpoint held up by a reader, exited owing it,
and the server's later writes never paid it, leaving the purged text in the -wal.
"""

from __future__ import annotations

import sqlite3
import time

import structlog

log = structlog.get_logger(__name__)

ATTEMPTS = 3
BRIEF_MS = 200  # the busy timeout of one verified attempt
_OWED = "SELECT 1 FROM store_meta WHERE key = 'checkpoint_owed'"
_OWE = "INSERT OR REPLACE INTO store_meta (key, value) VALUES ('checkpoint_owed', ?)"


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
        try:  # for whichever process writes next, should this one exit first
            db.execute(_OWE, (why,))
        except sqlite3.Error as error:  # a full disk: this process still owes it, and retries after its writes
            log.warning("store.checkpoint_owed_unrecorded", error=str(error))
        return False

    def settle(self, db: sqlite3.Connection) -> None:
        """Pay an owed checkpoint, this process's or another's, if no reader holds the log now (no waiting); a
        write calls it after COMMIT."""
        if (self.owed or db.execute(_OWED).fetchone() is not None) and self._try(db, 0):
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
        db.execute("PRAGMA busy_timeout = 0")  # after a caller's COMMIT: never held up, never its failure
        try:
            if db.execute(_OWED).fetchone() is not None:  # a page of store_meta in the log again, no erased text
                db.execute("DELETE FROM store_meta WHERE key = 'checkpoint_owed'")
        except sqlite3.Error as error:  # another process writing, a full disk: the record stays, paid again later
            log.info("store.checkpoint_record_kept", error=str(error))
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        return True
