"""The embedded store's connection: the file, its transactions, and what every operation reads first.

One connection serves the process's writes, under one lock (`_write`); reads run on reader connections of their own
(`_reading` for one statement, `_read` and `consistent_read` for one snapshot of several), as `snapshot` does, and
`save_index` writes on another (`feed.py`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any, NamedTuple

import structlog

from grandbo import unerased
from grandbo.errors import NotFoundError, StoreBusyError, StoreError, StoreUnavailableError
from grandbo.files import not_a_folder
from grandbo.incarnation import Incarnation
from grandbo.model import EmbeddingSpace
from grandbo.store import fence
from grandbo.store.base import TermsOf
from grandbo.store.files import owner_only
from grandbo.store.sqlite import full
from grandbo.store.sqlite.checkpoint import Checkpoints
from grandbo.store.sqlite.dialect import BEGIN_WRITE
from grandbo.store.sqlite.turns import TurnLock

log = structlog.get_logger(__name__)

WRITE_POLL_S = 0.002  # how often a write waiting for another process's write lock asks for it again


class LockWait(NamedTuple):
    """How a write waits for another process's write lock: `seconds` at most, `waiting()` called once when it starts
    to wait, and `refusal()` raised when the time is up (`Connection._begin_write`; by default the busy timeout)."""

    seconds: float
    refusal: Callable[[], Exception]
    waiting: Callable[[], object] = lambda: None


OLDEST_SQLITE = (3, 38, 0)  # JSON's `->` and `->>` operators (an outcome's check, migration 33)


class Reader(sqlite3.Connection):
    """A pooled reader connection (`query_only`), with what it read of the orgs' watermarks at the file's
    `data_version` it saw last (`Feed.marks`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.data_version: int | None = None
        self.marks: dict[str, tuple[Any, ...]] = {}


class Connection:
    """The store's file and its one connection; each concern's methods build on it (`store.SQLiteStore`)."""

    searches_vectors = False  # the in-process index computes the vector arm
    busy_timeout_ms = 10_000  # how long a write waits for another process's lock on the file before it fails
    storage_limit_mb = 0  # the most an org stores (`store.sql.storage`; `open_store` sets it)
    disk_reserve_mb = 0  # free space a write that adds to the store leaves on its disk (`full`; `open_store` sets it)
    schema_known: int | None = None  # this release's newest migration, once the store is migrated (`fence`)
    _upgraded_to: int | None = None  # the newer release's migration this process has seen (`_hold`)

    def __init__(self, path: Path, terms_of: TermsOf, *, synchronous: str = "FULL") -> None:
        self.path = path
        self._synchronous = synchronous  # FULL: an acknowledged write survives a power loss (docs/reliability.md)
        self._terms_of = terms_of
        self.url = f"sqlite:///{path}"
        if sqlite3.sqlite_version_info < OLDEST_SQLITE:  # the store's SQL reads JSON with `->` (migration 33)
            raise StoreUnavailableError(
                f"The embedded store needs SQLite {'.'.join(map(str, OLDEST_SQLITE))} or later; this Python links "
                f"SQLite {sqlite3.sqlite_version}. Use a Python built with a newer SQLite (python.org's, Debian 12's, "
                "a pyenv build against a current libsqlite3), or Postgres (GRANDBO_DATABASE_URL).",
                detail={"sqlite_version": sqlite3.sqlite_version},
            )
        if (file := not_a_folder(path)) is not None:
            raise StoreUnavailableError(
                f"Cannot open the SQLite store at {path}: {file} is a file, not a folder. Point GRANDBO_HOME at a "
                "folder (it is made if missing), or move the file away.",
                detail={"path": str(path)},
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):  # a new store is its owner's only (SQLite's -wal follows)
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            self._tighten(path)
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as error:
            raise StoreUnavailableError(
                f"Cannot open the SQLite store at {path}: {error}. Check the path and its permissions "
                "(GRANDBO_HOME or GRANDBO_DATABASE_URL).",
                detail={"path": str(path)},
            ) from error
        self._db.row_factory = sqlite3.Row
        self._disk = full.DiskWatch(path)
        self._checkpoints = Checkpoints(self.busy_timeout_ms)
        try:
            self._pragmas()
        except sqlite3.Error as error:  # a read-only folder or file: SQLite cannot make its -wal and -shm
            self._db.close()
            remedy = (
                "The file is no SQLite database: point GRANDBO_HOME at a Grandbo store's folder, or move the file "
                "away and `grandbo restore` a backup."
                if isinstance(error, sqlite3.DatabaseError) and "not a database" in str(error)
                else "The store needs its file and its folder writable (SQLite keeps its -wal and -shm files beside "
                "it): mount the folder read-write, or give the files to the user running Grandbo (chown); to copy a "
                "read-only store, `sqlite3 FILE '.backup COPY'`."
            )
            raise StoreUnavailableError(f"Cannot open the SQLite store at {path}: {error}. {remedy}",
                                        detail={"path": str(path)}) from error  # fmt: skip
        self._lock = TurnLock()  # writers of several orgs waiting take turns (`turns.py`)
        self._claim_after: str | None = None  # the embed claim's round-robin cursor (`store.queue`)
        self._readers: SimpleQueue[Reader] = SimpleQueue()  # `_reading`'s and `snapshot`'s connections
        self._pinned = threading.local()  # the reader of this thread's `consistent_read`, if any
        self._trace: Callable[[str], object] | None = None  # `trace`
        self._image_lock = threading.Lock()
        self._image_db: sqlite3.Connection | None = None  # `save_index`'s connection, opened on first use

    def _pragmas(self) -> None:
        """The connection's settings, the first of which (WAL) writes to the store's folder."""
        with full.translated(self.path):  # a full disk stops the open (its shared-memory file) as clearly as a write
            # secure_delete on every write, not only a purge's: a row written over or deleted before (an entry
            # retired, a document replaced) leaves its old text in the page's free space unless zeroed then, where a
            # later purge of it never looks. It was set off after each purge, so every write after the first purge
            # left its old text, and a later purge left the secret in the file.
            for pragma in (
                "journal_mode=WAL",
                f"synchronous={self._synchronous}",
                "foreign_keys=ON",
                "secure_delete=ON",
                # (SQLite's default, said: the corpus counts' BEFORE INSERT trigger counts the row an INSERT OR
                # REPLACE deletes, which with recursive triggers the DELETE trigger would count again: migration 34)
                "recursive_triggers=OFF",
                f"busy_timeout={self.busy_timeout_ms}",
            ):
                self._db.execute(f"PRAGMA {pragma}")

    @staticmethod
    def _tighten(path: Path) -> None:
        """An existing store file (and its -wal and -shm) that group or world may read, left so by an older
        release or a copy, is made owner-only before it is opened, and that is logged (once: it stays so). A
        file this process does not own is left as it is, with a warning: opening the store still works."""
        for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            try:
                was = owner_only(part)
            except PermissionError:
                log.warning("store.file_readable_by_others", path=str(part),
                            remedy=f"chmod 600 {part} as its owner")  # fmt: skip
                continue
            if was is not None:
                log.warning("store.file_permissions_tightened", path=str(part), was=oct(was), now=oct(was & 0o700))

    @contextmanager
    def _write(self, org_id: str | None = None, *, wait: LockWait | None = None) -> Iterator[sqlite3.Connection]:
        # In `org_id`'s turn (None: store-wide work, one turn of its own). A full disk is a StoreFullError (`full`);
        # a COMMIT that failed is rolled back too, so the connection is never left inside a transaction that refuses
        # every later write. `wait`: for another process's write lock, other than the busy timeout (a migration's).
        with self._lock.turn(org_id or ""), self._disk.watch():
            self._begin_write(wait or LockWait(self.busy_timeout_ms / 1000, self._busy))
            try:
                if self.schema_known is not None:  # inside the write: no migration passes between it and the write
                    self._hold(self._db.execute(f"SELECT {fence.NEWEST}").fetchone()[0])
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._checkpoints.settle(self._db)  # an erasure's owed checkpoint, when readers let it go

    def _hold(self, newest: int | None) -> None:
        """`fence.hold`, remembered: once a write, a recall or `/readyz` has seen a newer release's migration, every
        read of this process refuses too (it reads no version of its own)."""
        if newest is not None and self.schema_known is not None and newest > self.schema_known:
            self._upgraded_to = newest
        fence.hold(newest, self.schema_known)

    @contextmanager
    def _leaving_no_copy(self, why: str) -> Iterator[None]:
        """Within (holding the store's lock): the write zeroes what it frees (as every write does, `secure_delete`);
        after, the write-ahead log, which held the old pages too, is emptied (an erasure; a write replacing a
        secret)."""
        with self._lock:
            yield
            self._emptied_log(why)

    def _emptied_log(self, why: str) -> None:
        """Empty the write-ahead log after an erasure: it held the old pages too."""
        with self._lock:
            self._checkpoints.truncate(self._db, why)

    def _in_short_writes(self, org_id: str, step: Callable[[sqlite3.Connection], bool]) -> None:
        """Run `step` in one write after another while it says more is left (a long erasure: an org's drop, an index
        image erased a piece at a time), pausing after each as long as it held the file's write lock, so that every
        other writer, of this process or another (which asks every WRITE_POLL_S), gets it between."""
        while True:
            with self._write(org_id) as db:
                held_since = time.monotonic()
                more = step(db)
            if not more:
                return
            time.sleep(max(2 * WRITE_POLL_S, time.monotonic() - held_since))

    def _keep_reserve(self) -> None:
        """Refuse a write that adds to the store when its disk is under GRANDBO_DISK_RESERVE_MB free (`full`)."""
        self._disk.keep_reserve(self.disk_reserve_mb)

    @property
    def refused_writes(self) -> StoreError | None:
        """Why the last write was refused when the disk was full (None once a write commits again), or why the next
        one would be: the disk is under its reserve (a revocation, which the reserve lets through, commits). A
        refusal for the reserve is checked again (one statvfs): a disk freed since is ready at once."""
        return self._disk.recheck(self.disk_reserve_mb)

    def _begin_write(self, wait: LockWait) -> None:
        """Take the file's write lock, waiting up to `wait.seconds` for another process that holds it (a long
        import, backup, purge or migration); past that the write is refused with what to do (`wait.refusal`), not
        the driver's bare "database is locked".

        The wait asks for the lock every WRITE_POLL_S, not through SQLite's busy handler: that one sleeps 100 ms
        between tries once it has waited a third of a second, and a process that writes again 1 ms after each
        commit (an embed worker filing a fast provider's batches) left it a free moment so seldom that an
        API write waited 2.2 s and an import's 2.4 s (benchmarks/embed_fairness.py)."""
        self._db.execute("PRAGMA busy_timeout = 0")
        deadline, waited = time.monotonic() + wait.seconds, False
        try:
            while True:
                try:
                    self._db.execute(BEGIN_WRITE)
                    return
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) and "busy" not in str(error):
                        raise
                    if time.monotonic() >= deadline:
                        raise wait.refusal() from error
                    if not waited:
                        waited = True
                        wait.waiting()
                time.sleep(WRITE_POLL_S)
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")

    def _busy(self) -> StoreBusyError:
        return StoreBusyError(
            "The SQLite store is busy: another process has held its write lock for over "
            f"{self.busy_timeout_ms / 1000:g} s, so nothing was written. {StoreBusyError.remedy}",
            detail={"waited_ms": self.busy_timeout_ms},  # no path: API clients see this
        )

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One consistent snapshot for several statements: this thread's transaction or `consistent_read` where it is
        inside one (`_reading`), else a read transaction on a reader connection of its own, so that a read of a whole
        org (its stats, its document log) keeps no other thread's writes waiting for the store's lock."""
        with self._reading() as db:
            if db.in_transaction:
                yield db
                return
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A connection for one read statement: the snapshot of this thread's `consistent_read`, or the store's own
        connection when this thread is inside its transaction (a write: the read sees it), else a reader connection
        of its own. In WAL mode a reader sees every write committed before it starts and waits for no writer, so a
        read never queues behind another thread's write on the store's connection, its commit's sync, or its wait
        for another process's write lock (measured under `grandbo bench tenants`: over half of a recall's time in a
        server was that queue). The statement's rows are fetched before the connection goes back (an open cursor
        holds a snapshot)."""
        if self._upgraded_to is not None:
            fence.hold(self._upgraded_to, self.schema_known)
        pinned = getattr(self._pinned, "db", None)
        if pinned is not None:
            yield pinned
            return
        if self._lock.acquire(blocking=False):
            try:
                if self._db.in_transaction:  # only the thread that holds the lock can be inside its transaction
                    yield self._db
                    return
            finally:
                self._lock.release()
        with self._pooled_reader() as db:
            yield db

    @contextmanager
    def _pooled_reader(self) -> Iterator[Reader]:
        """A reader connection from the pool, back in it after; one whose read an error cut short is closed instead
        (a statement left open holds its old snapshot, and the next read on it would miss later writes)."""
        db = self._reader()
        try:
            yield db
        except BaseException:
            db.close()
            raise
        self._readers.put(db)

    def _reader(self) -> Reader:
        try:
            reader = self._readers.get_nowait()
        except Empty:
            reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, factory=Reader)
            reader.row_factory = sqlite3.Row
            # mmap: an index image (megabytes over overflow pages) is read from the page cache without a read call
            # per page.
            for pragma in ("query_only=ON", f"busy_timeout={self.busy_timeout_ms}", "mmap_size=268435456"):
                reader.execute(f"PRAGMA {pragma}")
        reader.set_trace_callback(self._trace)
        return reader

    def trace(self, callback: Callable[[str], object] | None) -> None:
        """Hand every statement any of the store's connections sends from now on to `callback` (None: stop);
        tests count a path's reads with it."""
        self._trace = callback
        self._db.set_trace_callback(callback)

    @contextmanager
    def consistent_read(self, org_id: str) -> Iterator[None]:
        # Every read of this thread within runs on one reader connection in one read transaction, which in WAL mode
        # sees the database as of its first read whatever is committed meanwhile; no lock is held, so an export
        # keeps no other thread's writes waiting.
        if getattr(self._pinned, "db", None) is not None:
            yield
            return
        with self._read() as db:
            self._pinned.db = db
            try:
                yield
            finally:
                self._pinned.db = None

    def close(self) -> None:
        with self._lock:
            self._checkpoints.settle(self._db)
            self._db.close()
            while not self._readers.empty():
                self._readers.get_nowait().close()
        with self._image_lock:
            if self._image_db is not None:
                self._image_db.close()
                self._image_db = None

    def space(self) -> EmbeddingSpace | None:
        with self._reading() as db:
            meta = dict(db.execute("SELECT key, value FROM store_meta").fetchall())
        if "provider" not in meta:
            return None
        return EmbeddingSpace(provider=meta["provider"], model=meta["model"], dimension=int(meta["dimension"]))

    @staticmethod
    def _require_org(db: sqlite3.Connection, org_id: str, incarnation: Incarnation | None = None) -> str | None:
        """The org's declared language, or NotFoundError when there is no such org; inside a handle's write, the
        org's `incarnation` checked (OrgDroppedError: the handle's org was dropped, `grandbo.incarnation`), and its
        erasures (ErasedMeanwhileError: the running work read before one, `grandbo.unerased`)."""
        found = db.execute("SELECT language, incarnation, erasures FROM orgs WHERE org_id = ?", (org_id,)).fetchone()
        if incarnation is not None:
            incarnation.check(found[1] if found is not None else None)
            if found is not None:
                unerased.check(org_id, found[2])
        if found is None:
            raise NotFoundError(
                f"No organization {org_id!r} in this store. Create it first (`grandbo --org {org_id} ...` "
                "creates it on the embedded store).",
                detail={"org_id": org_id},
            )
        return str(found[0]) if found[0] is not None else None


def next_epoch(db: sqlite3.Connection) -> int:
    """A new epoch from the store's counter (inside a write): an org's derived data was rewritten in place."""
    (epoch,) = db.execute("UPDATE counters SET value = value + 1 WHERE name = 'epoch' RETURNING value").fetchone()
    return int(epoch)
