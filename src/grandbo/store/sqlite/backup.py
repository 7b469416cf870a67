"""The embedded store's backup and restore: SQLite's online backup API, checked before it is called done."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import structlog

from grandbo.errors import InvalidInputError, StoreBusyError, StoreError
from grandbo.files import removed_files
from grandbo.store.files import other_backend_backup, private_file
from grandbo.store.sqlite import candidate, full
from grandbo.store.sqlite.schema import Schema

log = structlog.get_logger(__name__)

# Beside the store: the backup a restore is proving (removed once it is done, whatever happened; one a kill left is
# removed by the next open of the store, `sweep_staged`), and the store a restore replaced (kept until the next
# restore replaces it, for its owner to delete once the restored one is right).
STAGED = ".restoring"
KEPT = ".before-restore"
_SQLITE_FILES = ("", "-journal", "-wal", "-shm")
LEFT_BY_A_KILL = "left beside the store by a restore that was cut short: a copy of a backup, not the store"


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
            _remove(partial)  # and SQLite's -journal, -wal and -shm of the copy cut short
            raise

    def restore(self, source: Path) -> Path:
        """Replace the whole store with a backup (`backup`); return where the store it replaced is kept.

        Nothing of the store is touched until the backup has proved itself beside it: checked to be a sound Grandbo
        store (`candidate.check`), copied to STAGED, migrated and opened there as a store. Then the store as it is
        is copied to KEPT (owner-only; the one an earlier restore kept is replaced), and the staged copy is written
        over the store in one transaction with SQLite's backup API, not by renaming files: another process that has
        the store open (a `grandbo serve`) keeps valid connections and reads the restored rows, where a renamed file
        would leave it on the old one, with -wal and -shm that are no longer its own."""
        if (wrong := other_backend_backup(source, "the embedded (SQLite) store")) is not None:
            raise StoreError(wrong, detail={"path": str(source)})
        staged, kept = self._beside(STAGED), self._beside(KEPT)
        if source.resolve() == staged.resolve():
            raise candidate.not_a_backup(source, "it is the copy a restore makes of a backup, not a backup")
        with full.translated(staged, f"the restore of {source}"), _staging(self.path):
            with contextlib.closing(_read_only(source)) as backup:
                candidate.check(source, backup)
                with contextlib.closing(sqlite3.connect(staged)) as copy:
                    backup.backup(copy)
            self._prove(source, staged)
            self._copy_to(kept)
            with contextlib.closing(_staged_copy(staged)) as copy:
                self._fit(copy)
                with self._lock:
                    copy.backup(self._db)
        log.info("store.restored", source=str(source), kept=str(kept))
        return kept

    def _beside(self, suffix: str) -> Path:
        return self.path.with_name(self.path.name + suffix)

    def _prove(self, source: Path, staged: Path) -> None:
        """Open the staged copy as a store (which migrates a backup of an older release) and read it as every command
        does first; free the embed jobs and write-behinds it holds leased. A failure is the backup's: the store is
        untouched."""
        try:
            store = type(self)(staged, self._terms_of, synchronous="NORMAL")
        except sqlite3.Error as error:
            raise candidate.not_a_backup(source, f"it cannot be opened as a store: {error}") from error
        try:
            if store.space() is None:
                raise candidate.not_a_backup(source, "it records no embedding space")
            with store._write() as db:
                db.execute("SELECT org_id FROM orgs").fetchall()
                # Leases the backup holds are of workers and runners that held them when it was taken: none holds
                # them now, and they would keep their jobs from every worker until they ran out (five minutes), a
                # write-behind's then counted as an attempt lost with its runner (`store.sql.holders.LAPSED`).
                released = db.execute(
                    "UPDATE embed_outbox SET claimed_until = NULL, claimed_by = NULL WHERE claimed_until IS NOT NULL"
                ).rowcount
                freed = db.execute(
                    "UPDATE pending_work SET claimed_until = NULL, claimed_by = NULL WHERE claimed_until IS NOT NULL"
                ).rowcount
        finally:
            store.close()
        if released or freed:
            log.info("store.restore_released_leases", jobs=released, write_behinds=freed)

    def _fit(self, copy: sqlite3.Connection) -> None:
        """Give the staged copy the store's page size: SQLite's backup API cannot write pages of another size into a
        database in WAL mode (a backup of a store made with another page size, or VACUUMed to one)."""
        copy.execute("PRAGMA journal_mode=DELETE")
        (size,) = self._db.execute("PRAGMA page_size").fetchone()
        if copy.execute("PRAGMA page_size").fetchone()[0] != size:
            copy.execute(f"PRAGMA page_size={int(size)}")
            copy.execute("VACUUM")

    def _copy_to(self, kept: Path) -> None:
        """A copy of the store as it is now at `kept`, owner-only, complete or not there at all."""
        partial = kept.with_name(kept.name + ".partial")
        try:
            private_file(partial)
            with contextlib.closing(sqlite3.connect(partial)) as copy, self._lock:
                self._db.backup(copy)
            with contextlib.closing(sqlite3.connect(partial)) as copy:
                copy.execute("PRAGMA journal_mode=DELETE")  # a file on its own, no -wal and -shm beside it
            _remove(kept)
            partial.replace(kept)
        except BaseException:
            _remove(partial)
            raise


def _read_only(source: Path) -> sqlite3.Connection:
    """The file `source`, opened read-only; on a read-only mount as an immutable file: a backup is in WAL mode (the
    backup API copies the store's header), and SQLite cannot make the -shm such a file is read through there."""
    uri = source.resolve().as_uri()
    db = sqlite3.connect(f"{uri}?mode=ro", uri=True)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:  # "unable to open database file"
        db.close()
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True)
    except sqlite3.DatabaseError:  # not SQLite at all: `candidate.check` says so
        pass
    return db


def _staged_copy(staged: Path) -> sqlite3.Connection:
    """The proved copy, to write over the store: opened only if it is there (`mode=rw`), never made empty, which
    would be written over the store (a second restore removed it, and the store was left empty)."""
    try:
        return sqlite3.connect(f"{staged.resolve().as_uri()}?mode=rw", uri=True)
    except sqlite3.OperationalError as error:
        raise StoreError(
            f"The proved copy of the backup, {staged}, is gone (removed by hand?): nothing of the store was "
            "changed. Run the restore again.",
            detail={"path": str(staged)},
        ) from error


def _remove(path: Path) -> None:
    """Remove a copy of the store and what SQLite may have left beside it."""
    for suffix in _SQLITE_FILES:
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def _left_by_a_restore(store: Path) -> list[Path]:
    """What a restore writes beside the store while it runs: the staged backup, the store's copy it is making
    (KEPT's `.partial`), and SQLite's files of each."""
    return [store.with_name(store.name + part + suffix) for part in (STAGED, f"{KEPT}.partial")
            for suffix in _SQLITE_FILES]  # fmt: skip


@contextlib.contextmanager
def _staging(store: Path) -> Iterator[None]:
    """STAGED for one restore of `store`, held locked (flock) from its making to its removal, so that another process
    tells a restore under way (refused: one at a time) from what a killed one left (removed, `sweep_staged`). What
    the restore wrote beside the store is removed before the lock is let go, whatever happened."""
    staged = store.with_name(store.name + STAGED)
    sweep_staged(store)
    try:
        held = os.open(staged, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)  # owner-only: it holds every org's memory
    except FileExistsError:
        raise _restoring(store) from None
    try:
        try:  # a sweep in another process may take it between its making and its lock: then it is not ours
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            ours = os.fstat(held).st_ino == os.stat(staged).st_ino
        except OSError:
            ours = False
        if not ours:
            raise _restoring(store)
        try:
            yield
        finally:
            removed_files(_left_by_a_restore(store))
    finally:
        os.close(held)


def sweep_staged(store: Path) -> str | None:
    """Remove what a restore of `store` that was cut short (kill -9, a crash, the machine's end) left beside it, and
    say what (`grandbo.db.restoring, grandbo.db.restoring-journal (463 MB)`, logged too); None when there was
    nothing, or when it is a restore's under way in another process (its STAGED is locked: `_staging`). Every open
    of the store and every restore calls it: the copy (a whole backup: every org's memory, which a later purge does
    not reach) stayed beside the store until the next restore, which said nothing of it."""
    staged = store.with_name(store.name + STAGED)
    try:
        held: int | None = os.open(staged, os.O_RDONLY)
    except FileNotFoundError:
        held = None  # none under way (its STAGED is made first and removed first); maybe SQLite's files of one
    except OSError:
        return None  # not ours to read: left as it is
    try:
        if held is not None:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None  # a restore under way
            if os.fstat(held).st_ino != os.stat(staged).st_ino:
                return None  # removed and made again meanwhile: another restore's now
        swept = removed_files(_left_by_a_restore(store))
    except OSError:
        return None
    else:
        if swept is not None:
            log.warning("store.restore_leftover_removed", removed=swept, why=LEFT_BY_A_KILL, store=str(store))
        return swept
    finally:
        if held is not None:
            os.close(held)


def _restoring(store: Path) -> StoreBusyError:
    return StoreBusyError(
        f"Another `grandbo restore` of {store} is under way ({store.name}{STAGED} beside it is its copy of the "
        "backup): one restore at a time. Run this one once it has ended.",
        detail={"path": str(store)},
    )
