"""The embedded store's backup and restore: SQLite's online backup API, checked before it is called done."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import structlog

from grandbo.errors import InvalidInputError, StoreError
from grandbo.store.base import other_backend_backup, private_file, refuse_newer_backup
from grandbo.store.sqlite import full
from grandbo.store.sqlite.migrations import MIGRATIONS
from grandbo.store.sqlite.schema import Schema

log = structlog.get_logger(__name__)


class Backup(Schema):
    def backup(self, destination: Path) -> None:
        """A consistent copy of the whole store, taken online (SQLite's backup API: writers wait only for
        the page copy), checked with `PRAGMA integrity_check` before it is called done."""
        own = {self.path.resolve().with_name(self.path.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")}
        if destination.resolve() in own:  # replacing the live file would cut off every process that has it open
            raise InvalidInputError(
                f"{destination} is the store itself (or one of its files); a backup goes to another file, "
                "best on another disk.",
                detail={"path": str(destination)},
            )
        destination.parent.mkdir(parents=True, exist_ok=True)
        partial = destination.with_name(destination.name + ".partial")
        try:  # whatever stops it (a full disk above all), no partial file is left behind
            with full.translated(partial, f"the backup {destination}"):
                private_file(partial)
                target = sqlite3.connect(partial)
                try:
                    with self._lock:
                        self._db.backup(target)
                    (verdict,) = target.execute("PRAGMA integrity_check").fetchone()
                finally:
                    target.close()
            if verdict != "ok":
                raise StoreError(f"The backup of {self.path} failed its integrity check: {verdict}.", detail={})
            partial.replace(destination)
        except BaseException:
            partial.unlink(missing_ok=True)
            partial.with_name(partial.name + "-journal").unlink(missing_ok=True)  # SQLite's, of a copy cut short
            raise

    def restore(self, source: Path) -> None:
        """Replace the whole store with a backup (`backup`), after checking it is a sound Grandbo store."""
        if (wrong := other_backend_backup(source, "the embedded (SQLite) store")) is not None:
            raise StoreError(wrong, detail={"path": str(source)})
        check = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        try:
            (verdict,) = check.execute("PRAGMA integrity_check").fetchone()
            versions = {row[0] for row in check.execute("SELECT version FROM schema_migrations")}
        except sqlite3.DatabaseError as error:
            raise StoreError(f"{source} is not a Grandbo backup: {error}.", detail={"path": str(source)}) from error
        if verdict != "ok" or not versions:
            check.close()
            raise StoreError(f"{source} is not a sound Grandbo backup ({verdict}).", detail={"path": str(source)})
        try:
            refuse_newer_backup(source, versions, MIGRATIONS)
            with self._lock:
                check.backup(self._db)
                # Leases the backup holds are of workers that held them when it was taken: no worker holds them
                # now, and they would keep their jobs from every worker until they ran out (five minutes).
                released = self._db.execute(
                    "UPDATE embed_outbox SET claimed_until = NULL WHERE claimed_until IS NOT NULL"
                ).rowcount
        finally:
            check.close()
        if released:
            log.info("store.restore_released_leases", jobs=released)
        self._migrate()  # a backup from an older release is brought up to date
