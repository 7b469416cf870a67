"""The embedded store: one SQLite file.

The database is the truth. Both retrieval arms are computed in process, by the search index above the
store (`retrieval.keeper`), from the rows and vectors this store's change feed hands up (`marks`,
`snapshot`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog
from pydantic_core import to_json

from grandbo.errors import (
    EntryStateError,
    InvalidInputError,
    MigrationError,
    NotFoundError,
    StoreBusyError,
    StoreError,
    StoreUnavailableError,
)
from grandbo.model import CorpusStats, EmbeddingSpace, Entry, Event, EventType, Status, utcnow
from grandbo.ports import (
    Document,
    DocumentEvent,
    DocumentLog,
    DocumentWrite,
    EmbedJob,
    EmbedResult,
    Idempotency,
    IndexRow,
    JobState,
    Marks,
    NewEvent,
    NewWork,
    RebuildResult,
    Replayed,
    StoredIndex,
)
from grandbo.redaction import erase_text
from grandbo.store import projection, queue
from grandbo.store.base import (
    ORG_TABLES,
    REDERIVE_BATCH,
    REDERIVE_TERMS,
    TERMS_DERIVED_VECTORS,
    WRITE_ORDER,
    TermsOf,
    check_documents,
    document_conflict,
    loads_json,
    not_empty,
    other_backend_backup,
    owner_only,
    picked,
    private_file,
    refuse_newer_backup,
    stored_index,
)
from grandbo.store.sqlite.migrations import MIGRATIONS
from grandbo.store.sqlite.pending import PendingWorkMixin

log = structlog.get_logger(__name__)

_ENTRY_COLUMNS = (
    "org_id, entry_id, title, body, kind, source, tags, services, severity, occurred_at, status, "
    "created_at, updated_at, supersedes, superseded_by, meta, seq, terms, content_hash"
)


_READ_COLUMNS = (
    "org_id, entry_id, title, body, kind, source, tags, services, severity, occurred_at, status, "
    "created_at, updated_at, supersedes, superseded_by, meta, seq"
)


def _chunks(ids: Sequence[str], size: int = 500) -> Iterator[list[str]]:
    """The ids in lists short enough for one `IN (?, ...)` (SQLite caps the parameters of a statement)."""
    for start in range(0, len(ids), size):
        yield list(ids[start : start + size])


def _row_from_db(record: sqlite3.Row) -> projection.Row:
    row = dict(record)
    row["id"] = row.pop("entry_id")
    for key in ("tags", "services", "meta"):
        row[key] = loads_json(row[key])
    return row


def _entry_from_db(record: sqlite3.Row) -> Entry:
    """An Entry straight from a row (the reading path: no index terms, no hash)."""
    return projection.to_entry(_row_from_db(record))


def _data(text: str, keys: Sequence[str] | None) -> Any:
    return loads_json(text) if keys is None else picked(loads_json(text))


def _json(value: Any) -> str:
    """JSON text for a column, serialized by pydantic-core (Rust): four times faster than json.dumps on an
    event payload, which a bulk import writes for every entry."""
    return to_json(value).decode()


def _row_to_db(row: projection.Row) -> tuple[Any, ...]:
    return (
        row["org_id"],
        row["id"],
        row["title"],
        row["body"],
        row["kind"],
        row["source"],
        _json(row["tags"]),
        _json(row["services"]),
        row["severity"],
        row["occurred_at"],
        row["status"],
        row["created_at"],
        row["updated_at"],
        row["supersedes"],
        row["superseded_by"],
        _json(row["meta"]),
        row["seq"],
        row["terms"],
        row["content_hash"],
    )


_UNREADABLE = "the entry's row cannot be read (a damaged value); fix or purge it"


class SQLiteStore(PendingWorkMixin):
    """Every organization's memory in one SQLite file."""

    searches_vectors = False  # the in-process index computes the vector arm
    busy_timeout_ms = 10_000  # how long a write waits for another process's lock on the file before it fails

    def __init__(self, path: Path, terms_of: TermsOf) -> None:
        self.path = path
        self._terms_of = terms_of
        self.url = f"sqlite:///{path}"
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
        for pragma in (
            "journal_mode=WAL",
            "synchronous=NORMAL",
            "foreign_keys=ON",
            f"busy_timeout={self.busy_timeout_ms}",
        ):
            self._db.execute(f"PRAGMA {pragma}")
        self._lock = threading.RLock()
        self._claim_after: str | None = None  # the embed claim's round-robin cursor (`store.queue`)
        self._readers: SimpleQueue[sqlite3.Connection] = SimpleQueue()  # `snapshot`'s connections
        self._image_lock = threading.Lock()
        self._image_db: sqlite3.Connection | None = None  # `save_index`'s connection, opened on first use
        self._migrate()

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

    # ----------------------------------------------------------------- lifecycle

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._begin_write()
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _begin_write(self) -> None:
        """Take the file's write lock, waiting up to the busy timeout for another process that holds it (a long
        import, backup, purge or migration); past that the write is refused with what to do, not the driver's
        bare "database is locked"."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            raise StoreBusyError(
                "The SQLite store is busy: another process has held its write lock for over "
                f"{self.busy_timeout_ms / 1000:g} s, so nothing was written. {StoreBusyError.remedy}",
                detail={"waited_ms": self.busy_timeout_ms},  # no path: API clients see this
            ) from error

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One consistent snapshot for several statements (inside `consistent_read`: its snapshot)."""
        with self._lock:
            if self._db.in_transaction:
                yield self._db
                return
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    @contextmanager
    def consistent_read(self, org_id: str) -> Iterator[None]:
        # The connection is the store's only one and this thread holds its lock: every read within runs in one
        # read transaction, which in WAL mode sees the database as of its first read, whatever other
        # processes commit meanwhile.
        with self._read():
            yield

    def _migrate(self) -> None:
        with self._write() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            applied = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
            known = {version for version, _, _ in MIGRATIONS}
            if applied - known:
                raise MigrationError(
                    f"The store at {self.path} has schema versions {sorted(applied - known)} that this Grandbo "
                    "does not know; it was written by a newer release. Upgrade Grandbo.",
                    detail={"unknown_versions": sorted(applied - known)},
                )
            for version, name, statements in MIGRATIONS:
                if version in applied:
                    continue
                for statement in statements:
                    if statement == REDERIVE_TERMS:
                        self._rederive_terms(db)
                    else:
                        db.execute(statement)
                db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, utcnow().isoformat()),
                )
                log.info("store.migrated", version=version, name=name)

    def _rederive_terms(self, db: sqlite3.Connection) -> None:
        """Migration step REDERIVE_TERMS (store/base.py), org by org, in batches of entries."""
        space = self.space() if db.execute("SELECT 1 FROM store_meta WHERE key = 'provider'").fetchone() else None
        changed = 0
        for org_id, language in self._languages(db).items():
            updated = self._rederive_org(db, org_id, language)
            if space is not None and space.provider == TERMS_DERIVED_VECTORS:
                db.executemany(
                    "DELETE FROM entry_vectors WHERE org_id = ? AND entry_id = ? AND provider = ?",
                    [(org_id, entry_id, TERMS_DERIVED_VECTORS) for entry_id in updated],
                )
            changed += len(updated)
        queued = self._enqueue_missing(db, None, space) if space is not None and changed else 0
        db.execute("UPDATE orgs SET epoch = ?", (self._next_epoch(db),))
        log.info("store.terms_rederived", entries_changed=changed, embed_jobs=queued)

    def _rederive_org(self, db: sqlite3.Connection, org_id: str, language: str | None) -> list[str]:
        """Derive the stored terms of one org's entries again (in `language`), in batches; return the ids of
        the entries whose terms changed."""
        after = ""
        changed: list[str] = []
        while True:
            rows = db.execute(
                "SELECT entry_id, title, body, tags, services, terms FROM memory_entries "
                "WHERE org_id = ? AND entry_id > ? ORDER BY entry_id LIMIT ?",
                (org_id, after, REDERIVE_BATCH),
            ).fetchall()
            if not rows:
                return changed
            after = rows[-1][0]
            updates = projection.rederived(rows, self._terms_of, language, loads_json)
            self._store_terms(db, org_id, updates)
            changed += list(updates)

    @staticmethod
    def _store_terms(db: sqlite3.Connection, org_id: str, terms: Mapping[str, str]) -> None:
        db.executemany(
            "UPDATE memory_entries SET terms = ? WHERE org_id = ? AND entry_id = ?",
            [(new, org_id, entry_id) for entry_id, new in terms.items()],
        )

    @staticmethod
    def _languages(db: sqlite3.Connection) -> dict[str, str | None]:
        """Every org and its declared language (None before migration 8 added the column)."""
        declared = any(column[1] == "language" for column in db.execute("PRAGMA table_info(orgs)"))
        return dict(db.execute(f"SELECT org_id, {'language' if declared else 'NULL'} FROM orgs ORDER BY org_id"))

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
        private_file(partial)
        target = sqlite3.connect(partial)
        try:
            with self._lock:
                self._db.backup(target)
            (verdict,) = target.execute("PRAGMA integrity_check").fetchone()
        finally:
            target.close()
        if verdict != "ok":
            partial.unlink(missing_ok=True)
            raise StoreError(f"The backup of {self.path} failed its integrity check: {verdict}.", detail={})
        partial.replace(destination)

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

    def schema_versions(self) -> list[int]:
        with self._lock:
            return [row[0] for row in self._db.execute("SELECT version FROM schema_migrations ORDER BY version")]

    def close(self) -> None:
        with self._lock:
            self._db.close()
            while not self._readers.empty():
                self._readers.get_nowait().close()
        with self._image_lock:
            if self._image_db is not None:
                self._image_db.close()
                self._image_db = None

    def initialize(self, space: EmbeddingSpace) -> None:
        with self._write() as db:
            db.executemany(
                "INSERT OR REPLACE INTO store_meta (key, value) VALUES (?, ?)",
                [
                    ("provider", space.provider),
                    ("model", space.model),
                    ("dimension", str(space.dimension)),
                    ("created_at", utcnow().isoformat()),
                ],
            )

    def space(self) -> EmbeddingSpace | None:
        with self._lock:
            meta = dict(self._db.execute("SELECT key, value FROM store_meta").fetchall())
        if "provider" not in meta:
            return None
        return EmbeddingSpace(provider=meta["provider"], model=meta["model"], dimension=int(meta["dimension"]))

    def switch_space(self, space: EmbeddingSpace, *, every_entry: bool = False) -> int:
        with self._write() as db:
            db.executemany(
                "UPDATE store_meta SET value = ? WHERE key = ?",
                [(space.provider, "provider"), (space.model, "model"), (str(space.dimension), "dimension")],
            )
            if every_entry:
                db.execute("DELETE FROM entry_vectors")
                db.execute("UPDATE orgs SET epoch = ?", (self._next_epoch(db),))
            count = self._enqueue_missing(db, None, space)
        return count

    # ----------------------------------------------------------------- organizations

    def ensure_org(self, org_id: str) -> None:
        with self._write() as db:
            if db.execute("SELECT 1 FROM orgs WHERE org_id = ?", (org_id,)).fetchone() is None:
                db.execute(
                    "INSERT INTO orgs (org_id, created_at, epoch) VALUES (?, ?, ?)",
                    (org_id, utcnow().isoformat(), self._next_epoch(db)),
                )

    @staticmethod
    def _next_epoch(db: sqlite3.Connection) -> int:
        (epoch,) = db.execute("UPDATE counters SET value = value + 1 WHERE name = 'epoch' RETURNING value").fetchone()
        return int(epoch)

    def orgs(self) -> list[str]:
        with self._lock:
            return [row[0] for row in self._db.execute("SELECT org_id FROM orgs ORDER BY org_id")]

    def org_created(self) -> dict[str, datetime]:
        with self._lock:
            rows = self._db.execute("SELECT org_id, created_at FROM orgs").fetchall()
        return {row[0]: datetime.fromisoformat(row[1]) for row in rows}

    def drop_org(self, org_id: str) -> None:
        with self._write() as db, self._erasing(db, org_id, "organization deleted"):
            for table in ORG_TABLES:
                db.execute(f"DELETE FROM {table} WHERE org_id = ?", (org_id,))

    @staticmethod
    @contextmanager
    def _erasing(db: sqlite3.Connection, org_id: str, reason: str) -> Iterator[None]:
        """Within (inside a write transaction): the append-only logs of `org_id` accept UPDATE and DELETE, for
        deleting an organization or purging an entry. The triggers look for this row; it never outlives the
        transaction."""
        db.execute(
            "INSERT OR REPLACE INTO log_erasures (org_id, reason, at) VALUES (?, ?, ?)",
            (org_id, reason, utcnow().isoformat()),
        )
        yield
        db.execute("DELETE FROM log_erasures WHERE org_id = ?", (org_id,))

    def _require_org(self, db: sqlite3.Connection, org_id: str) -> str | None:
        """The org's declared language, or NotFoundError when there is no such org."""
        found = db.execute("SELECT language FROM orgs WHERE org_id = ?", (org_id,)).fetchone()
        if found is None:
            raise NotFoundError(
                f"No organization {org_id!r} in this store. Create it first (`grandbo --org {org_id} ...` "
                "creates it on the embedded store).",
                detail={"org_id": org_id},
            )
        return str(found[0]) if found[0] is not None else None

    def language(self, org_id: str) -> str | None:
        with self._read() as db:
            return self._require_org(db, org_id)

    _TERMS_SOURCE = "SELECT entry_id, title, body, tags, services, terms, seq FROM memory_entries WHERE org_id = ?"

    def set_language(self, org_id: str, language: str | None) -> int:
        # The new terms are worked out from one read, without holding the store's connection (the whole process
        # would wait for it: every request of every org); the write then applies them, and derives again in it
        # only the entries written meanwhile (their terms were made in the old language).
        with self._read() as db:
            self._require_org(db, org_id)
            read_epoch = self._epoch(db, org_id)
            rows = db.execute(self._TERMS_SOURCE, (org_id,)).fetchall()
        read_up_to = max((row[6] for row in rows), default=0)
        updates = projection.rederived(rows, self._terms_of, language, loads_json)
        with self._write() as db:
            self._require_org(db, org_id)
            if self._epoch(db, org_id) != read_epoch:
                # Another declaration, a rebuild or a purge rewrote terms in place meanwhile (no new seq): what
                # was worked out from the read may no longer be a diff of what is stored. Derive it all here.
                changed = self._rederive_org(db, org_id, language)
            else:
                moved = db.execute(self._TERMS_SOURCE + " AND seq > ?", (org_id, read_up_to)).fetchall()
                for row in moved:  # what was worked out from their old text no longer holds
                    updates.pop(row[0], None)
                updates.update(projection.rederived(moved, self._terms_of, language, loads_json))
                self._store_terms(db, org_id, updates)
                changed = list(updates)
            db.execute(
                "UPDATE orgs SET language = ?, epoch = ? WHERE org_id = ?", (language, self._next_epoch(db), org_id)
            )
        log.info("store.language_set", org_id=org_id, language=language or "auto", entries_changed=len(changed))
        return len(changed)

    @staticmethod
    def _epoch(db: sqlite3.Connection, org_id: str) -> int | None:
        found = db.execute("SELECT epoch FROM orgs WHERE org_id = ?", (org_id,)).fetchone()
        return int(found[0]) if found is not None and found[0] is not None else None

    # ----------------------------------------------------------------- writes

    def append(
        self,
        org_id: str,
        events: Sequence[NewEvent],
        vectors: Mapping[str, npt.NDArray[np.float32]] | None = None,
        space: EmbeddingSpace | None = None,
        *,
        idempotency: Idempotency | None = None,
    ) -> list[Entry]:
        vectors = vectors or {}
        touched: dict[str, projection.Row | None] = {}
        with self._write() as db:
            language = self._require_org(db, org_id)
            if idempotency is not None:
                if (earlier := self._idempotent(db, org_id, idempotency.key)) is not None:
                    raise earlier
                db.execute(
                    "INSERT INTO idempotency_keys (org_id, key, request_hash, entry_ids, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (org_id, idempotency.key, idempotency.request_hash,
                     _json(list(dict.fromkeys(e.entry_id for e in events))), utcnow().isoformat()),
                )  # fmt: skip
            touched.update(self._rows(db, org_id, list(dict.fromkeys(event.entry_id for event in events))))
            # One writer holds the database (BEGIN IMMEDIATE), so the next sequence numbers are ours.
            (base,) = db.execute(
                "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memory_events'), 0), "
                "coalesce((SELECT max(seq) FROM memory_events), 0))"
            ).fetchone()
            logged = []
            for offset, event in enumerate(events, start=1):
                seq = base + offset
                touched[event.entry_id] = projection.apply_new(
                    touched.get(event.entry_id), org_id, event, seq, self._terms_of, language
                )
                logged.append(
                    (
                        seq,
                        org_id,
                        event.entry_id,
                        event.type.value,
                        _json(event.payload),
                        event.actor,
                        event.at.isoformat(),
                    )
                )
            db.executemany(
                "INSERT INTO memory_events (seq, org_id, entry_id, type, payload, actor, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                logged,
            )
            changed = [row for row in touched.values() if row is not None]
            db.executemany(
                f"INSERT OR REPLACE INTO memory_entries ({_ENTRY_COLUMNS}) VALUES ({', '.join('?' * 19)})",
                [_row_to_db(row) for row in changed],
            )
            now = utcnow().isoformat()
            active = [row for row in changed if row["status"] == Status.ACTIVE.value]
            inactive = [row for row in changed if row["status"] != Status.ACTIVE.value]
            db.executemany(
                "INSERT INTO embed_outbox (org_id, entry_id, content_hash, available_at, created_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (org_id, entry_id) DO UPDATE SET "
                "content_hash = excluded.content_hash, attempts = 0, last_error = NULL, "
                "available_at = excluded.available_at, claimed_until = NULL "
                "WHERE embed_outbox.content_hash != excluded.content_hash",
                [(org_id, row["id"], row["content_hash"], now, now) for row in active if row["id"] not in vectors],
            )
            given = [
                (org_id, row["id"], row["content_hash"], vectors[row["id"]]) for row in active if row["id"] in vectors
            ]
            if given:
                assert space is not None
                self._write_vectors(db, space, given)
            db.executemany(
                "DELETE FROM embed_outbox WHERE org_id = ? AND entry_id = ?",
                [(org_id, row["id"]) for row in inactive],
            )
        return [projection.to_entry(row) for row in changed]

    @staticmethod
    def _idempotent(db: sqlite3.Connection, org_id: str, key: str) -> Replayed | None:
        row = db.execute(
            "SELECT entry_ids, request_hash FROM idempotency_keys WHERE org_id = ? AND key = ?", (org_id, key)
        ).fetchone()
        return Replayed(loads_json(row[0]), row[1]) if row else None

    def idempotent(self, org_id: str, key: str) -> Replayed | None:
        with self._lock:
            return self._idempotent(self._db, org_id, key)

    def _rows(self, db: sqlite3.Connection, org_id: str, entry_ids: Sequence[str]) -> dict[str, projection.Row]:
        rows: dict[str, projection.Row] = {}
        for chunk in _chunks(entry_ids):
            for record in db.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM memory_entries WHERE org_id = ? "
                f"AND entry_id IN ({', '.join('?' * len(chunk))})",
                (org_id, *chunk),
            ):
                row = _row_from_db(record)
                rows[row["id"]] = row
        return rows

    def rebuild(self, org_id: str, *, replace: bool = False) -> RebuildResult:
        rows: dict[str, projection.Row] = {}
        with self._write() as db:
            language = self._require_org(db, org_id)
            for record in db.execute(
                "SELECT seq, entry_id, type, payload, at FROM memory_events WHERE org_id = ? ORDER BY seq", (org_id,)
            ):
                entry_id = record["entry_id"]
                rows[entry_id] = projection.apply(
                    rows.get(entry_id),
                    org_id,
                    entry_id,
                    EventType(record["type"]),
                    loads_json(record["payload"]),
                    record["seq"],
                    datetime.fromisoformat(record["at"]),
                    self._terms_of,
                    language,
                )
            live = {
                row["id"]: row
                for row in map(
                    _row_from_db, db.execute(f"SELECT {_ENTRY_COLUMNS} FROM memory_entries WHERE org_id = ?", (org_id,))
                )
            }
            result = projection.compare(live, rows)
            if result.identical or not replace:
                return result
            db.execute("DELETE FROM memory_entries WHERE org_id = ?", (org_id,))
            db.execute("UPDATE orgs SET epoch = ? WHERE org_id = ?", (self._next_epoch(db), org_id))
            db.executemany(
                f"INSERT INTO memory_entries ({_ENTRY_COLUMNS}) VALUES ({', '.join('?' * 19)})",
                [_row_to_db(row) for row in rows.values()],
            )
        return dataclasses.replace(result, replaced=True)

    # ----------------------------------------------------------------- reads

    def get_many(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, Entry]:
        found: dict[str, Entry] = {}
        with self._lock:
            for chunk in _chunks(entry_ids):
                for record in self._db.execute(
                    f"SELECT {_READ_COLUMNS} FROM memory_entries WHERE org_id = ? "
                    f"AND entry_id IN ({', '.join('?' * len(chunk))})",
                    (org_id, *chunk),
                ):
                    found[record["entry_id"]] = _entry_from_db(record)
        return found

    def entries(self, org_id: str, *, include_inactive: bool = False) -> list[Entry]:
        status = "" if include_inactive else "AND status = 'active'"
        with self._lock:
            records = self._db.execute(
                f"SELECT {_READ_COLUMNS} FROM memory_entries WHERE org_id = ? {status} ORDER BY seq",
                (org_id,),
            ).fetchall()
        return [_entry_from_db(record) for record in records]

    def examples(self, org_id: str, content_type: str, limit: int) -> list[Entry]:
        with self._lock:
            records = self._db.execute(
                f"SELECT {_READ_COLUMNS} FROM memory_entries WHERE org_id = ? AND status = 'active' "
                "AND kind = 'example' AND lower(trim(json_extract(meta, '$.content_type'))) = ? "
                "ORDER BY occurred_at DESC, seq DESC LIMIT ?",
                (org_id, content_type, limit),
            ).fetchall()
        return [_entry_from_db(record) for record in records]

    def events(self, org_id: str, entry_id: str | None = None, since_seq: int = 0) -> list[Event]:
        query = "SELECT seq, org_id, entry_id, type, payload, actor, at FROM memory_events WHERE org_id = ? AND seq > ?"
        params: tuple[Any, ...] = (org_id, since_seq)
        if entry_id is not None:
            query += " AND entry_id = ?"
            params += (entry_id,)
        with self._lock:
            records = self._db.execute(query + " ORDER BY seq", params).fetchall()
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

    def vectors(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        space = self.space()
        if space is None or not entry_ids:
            return {}
        found: dict[str, npt.NDArray[np.float32]] = {}
        with self._lock:
            for chunk in _chunks(entry_ids):
                for entry_id, blob in self._db.execute(
                    "SELECT v.entry_id, v.vector FROM entry_vectors v JOIN memory_entries e USING (org_id, entry_id) "
                    "WHERE v.org_id = ? AND v.provider = ? AND v.model = ? AND v.dimension = ? "
                    f"AND v.content_hash = e.content_hash AND v.entry_id IN ({', '.join('?' * len(chunk))})",
                    (org_id, space.provider, space.model, space.dimension, *chunk),
                ):
                    found[entry_id] = np.frombuffer(blob, dtype="<f4").copy()
        return found

    def corpus_stats(self, org_id: str, max_attempts: int) -> CorpusStats:
        space = self.space()
        with self._read() as db:
            total = db.execute(
                "SELECT count(*) FROM memory_entries WHERE org_id = ? AND status = 'active'", (org_id,)
            ).fetchone()[0]
            readable = stale = 0
            if space is not None:
                readable, stale = db.execute(
                    "SELECT count(*) FILTER (WHERE v.provider = ? AND v.model = ? AND v.dimension = ? "
                    "                          AND v.content_hash = e.content_hash), "
                    "       count(*) FILTER (WHERE NOT (v.provider = ? AND v.model = ? AND v.dimension = ?)) "
                    "FROM memory_entries e JOIN entry_vectors v USING (org_id, entry_id) "
                    "WHERE e.org_id = ? AND e.status = 'active'",
                    (space.provider, space.model, space.dimension) * 2 + (org_id,),
                ).fetchone()
            pending, failed = db.execute(
                "SELECT count(*) FILTER (WHERE attempts < ?), count(*) FILTER (WHERE attempts >= ?) "
                "FROM embed_outbox WHERE org_id = ?",
                (max_attempts, max_attempts, org_id),
            ).fetchone()
        return CorpusStats(
            org_id=org_id,
            total=total,
            readable=readable or 0,
            unreadable=total - (readable or 0),
            pending=pending or 0,
            failed=failed or 0,
            stale=stale or 0,
            space=space,
        )

    def embed_jobs(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, JobState]:
        found: dict[str, JobState] = {}
        with self._read() as db:
            for chunk in _chunks(entry_ids):
                for r in db.execute(
                    "SELECT entry_id, attempts, last_error, available_at FROM embed_outbox "
                    f"WHERE org_id = ? AND entry_id IN ({', '.join('?' * len(chunk))})",
                    (org_id, *chunk),
                ):
                    found[r[0]] = JobState(r[0], r[1], r[2], datetime.fromisoformat(r[3]))
        return found

    # ----------------------------------------------------------------- documents

    def put_documents(
        self, org_id: str, writes: Sequence[DocumentWrite], actor: str, work: Sequence[NewWork] = ()
    ) -> list[Document]:
        check_documents(writes)
        now = utcnow().isoformat()
        out: list[Document] = []
        with self._write() as db:
            self._require_org(db, org_id)
            self._record_work(db, org_id, work)  # the write-behinds it acknowledges, in its transaction
            for write in writes:
                row = db.execute(
                    "SELECT version FROM documents WHERE org_id = ? AND collection = ? AND doc_id = ?",
                    (org_id, write.collection, write.doc_id),
                ).fetchone()
                found = row[0] if row else None
                if write.expected_version is not None and found != (write.expected_version or None):
                    raise document_conflict(org_id, write, found)
                db.execute(
                    "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (org_id, write.collection, write.doc_id, write.event, _json(write.data),
                     actor, now),
                )  # fmt: skip
                if write.data is None:
                    db.execute(
                        "DELETE FROM documents WHERE org_id = ? AND collection = ? AND doc_id = ?",
                        (org_id, write.collection, write.doc_id),
                    )
                    continue
                version = (found or 0) + 1
                db.execute(
                    "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (org_id, collection, doc_id) DO UPDATE SET "
                    "ref = excluded.ref, data = excluded.data, version = excluded.version, "
                    "updated_at = excluded.updated_at",
                    (org_id, write.collection, write.doc_id, write.ref, _json(write.data),
                     version, now),
                )  # fmt: skip
                out.append(Document(write.collection, write.doc_id, write.ref, write.data, version,
                                    datetime.fromisoformat(now)))  # fmt: skip
        return out

    def get_document(self, org_id: str, collection: str, doc_id: str) -> Document | None:
        found = self._documents(org_id, collection, "AND doc_id = ?", (doc_id,))
        return found[0] if found else None

    def find_documents(
        self,
        org_id: str,
        collection: str,
        refs: Sequence[str] | None = None,
        *,
        by_write: bool = False,
        keys: Sequence[str] | None = None,
    ) -> list[Document]:
        order = f"{WRITE_ORDER}, doc_id" if by_write else "doc_id"
        if refs is None:
            return self._documents(org_id, collection, "", (), order, keys)
        if not refs:
            return []
        where = f"AND ref IN ({', '.join('?' * len(refs))})"
        return self._documents(org_id, collection, where, tuple(refs), order, keys)

    # By the instant (julianday), not the text: a document loaded from an export keeps the UTC offset its time
    # was written with, and such text does not sort as time does. Migration 10 indexes this very expression.
    _WRITTEN = "julianday(updated_at)"

    def oldest_documents(
        self,
        org_id: str,
        collection: str,
        before: datetime,
        limit: int,
        *,
        after: tuple[datetime, str] | None = None,
        keys: Sequence[str] | None = None,
    ) -> list[Document]:
        where, params = f"AND {self._WRITTEN} < julianday(?)", tuple[str, ...]((before.isoformat(),))
        if after is not None:  # spelled so that the index is sought from `after` on, not walked from the start
            at, doc_id = after[0].isoformat(), after[1]
            where += f" AND {self._WRITTEN} >= julianday(?) AND ({self._WRITTEN} > julianday(?) OR doc_id > ?)"
            params = (*params, at, at, doc_id)
        order = f"{self._WRITTEN}, doc_id LIMIT {int(limit)}"
        return self._documents(org_id, collection, where, params, order, keys)

    def _documents(
        self,
        org_id: str,
        collection: str,
        where: str,
        params: tuple[Any, ...],
        order: str = "doc_id",
        keys: Sequence[str] | None = None,
    ) -> list[Document]:
        data, asked = "data", tuple[str, ...]()
        if keys is not None:  # each key asked for by name and JSON path (quoted: our own names, plain words)
            asked = tuple(part for key in keys for part in (key, f'$."{key}"'))
            pairs = ", ".join("?, data -> ?" for _ in keys)
            data = f"CASE WHEN json_type(data) = 'object' THEN json_object({pairs}) ELSE data END"
        with self._lock:
            rows = self._db.execute(
                f"SELECT doc_id, ref, {data} AS data, version, updated_at FROM documents AS d "
                f"WHERE org_id = ? AND collection = ? {where} ORDER BY {order}",
                (*asked, org_id, collection, *params),
            ).fetchall()
        return [
            Document(collection, r["doc_id"], r["ref"], _data(r["data"], keys), r["version"],
                     datetime.fromisoformat(r["updated_at"]))
            for r in rows
        ]  # fmt: skip

    # One collection's version: one read of the (org, collection, seq) index. Several are asked for one by one
    # (an IN list would walk every event of those collections).
    _VERSION_OF = "(SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = ? AND collection = ?)"

    def documents_version(self, org_id: str, collections: Sequence[str] | None = None) -> int:
        if collections is not None:
            return max(self.documents_stamp(org_id, collections)[1], default=0)
        with self._lock:
            (version,) = self._db.execute(
                "SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = ?", (org_id,)
            ).fetchone()
        return int(version)

    def documents_stamp(self, org_id: str, collections: Sequence[str]) -> tuple[int | None, list[int]]:
        columns = ", ".join(["(SELECT epoch FROM orgs WHERE org_id = ?)", *[self._VERSION_OF] * len(collections)])
        params = [org_id, *[part for collection in collections for part in (org_id, collection)]]
        with self._lock:
            epoch, *versions = self._db.execute(f"SELECT {columns}", params).fetchone()
        return (int(epoch) if epoch is not None else None), [int(v) for v in versions]

    def changed_documents(self, org_id: str, collection: str, after: int) -> tuple[list[Document], list[str]]:
        with self._read() as db:
            ids = list(
                dict.fromkeys(  # each once, in the order they were written (the newest events come last)
                    r[0]
                    for r in db.execute(
                        "SELECT doc_id FROM document_events WHERE org_id = ? AND collection = ? AND seq > ? "
                        "ORDER BY seq",
                        (org_id, collection, after),
                    )
                )
            )
            found = [
                doc
                for chunk in _chunks(ids)
                for doc in self._documents(
                    org_id, collection, f"AND doc_id IN ({', '.join('?' * len(chunk))})", (*chunk,)
                )
            ]
        present = {doc.doc_id for doc in found}
        return found, [doc_id for doc_id in ids if doc_id not in present]

    def document_history(self, org_id: str, collection: str, doc_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, type, data, actor, at FROM document_events "
                "WHERE org_id = ? AND collection = ? AND doc_id = ? ORDER BY seq",
                (org_id, collection, doc_id),
            ).fetchall()
        return [{"seq": r["seq"], "type": r["type"], "data": loads_json(r["data"]), "actor": r["actor"],
                 "at": r["at"]} for r in rows]  # fmt: skip

    def document_log(self, org_id: str) -> DocumentLog:
        with self._read() as db:
            events = db.execute(
                "SELECT collection, doc_id, type, data, actor, at FROM document_events WHERE org_id = ? ORDER BY seq",
                (org_id,),
            ).fetchall()
            documents = db.execute(
                "SELECT collection, doc_id, ref, data, version, updated_at FROM documents WHERE org_id = ? "
                "ORDER BY collection, doc_id",
                (org_id,),
            ).fetchall()
        return DocumentLog(
            [DocumentEvent(r["collection"], r["doc_id"], r["type"], loads_json(r["data"]), r["actor"],
                           datetime.fromisoformat(r["at"])) for r in events],
            [Document(r["collection"], r["doc_id"], r["ref"], loads_json(r["data"]), r["version"],
                      datetime.fromisoformat(r["updated_at"])) for r in documents],
        )  # fmt: skip

    def load_documents(self, org_id: str, log: DocumentLog) -> int:
        check_documents([DocumentWrite(e.collection, e.doc_id, e.data, e.type) for e in log.events])
        check_documents([DocumentWrite(d.collection, d.doc_id, d.data, "load", d.ref) for d in log.documents])
        with self._write() as db:
            self._require_org(db, org_id)
            if db.execute(
                "SELECT 1 FROM document_events WHERE org_id = ? UNION ALL SELECT 1 FROM documents WHERE org_id = ?",
                (org_id, org_id),
            ).fetchone():
                raise not_empty(org_id, "documents")
            db.executemany(
                "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(org_id, e.collection, e.doc_id, e.type, _json(e.data), e.actor, e.at.isoformat())
                 for e in log.events],
            )  # fmt: skip
            db.executemany(
                "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(org_id, d.collection, d.doc_id, d.ref, _json(d.data), d.version, d.updated_at.isoformat())
                 for d in log.documents],
            )  # fmt: skip
        return len(log.events)

    # ----------------------------------------------------------------- erasure

    def purge(self, org_id: str, entry_id: str, reason: str, actor: str) -> Entry:
        at = utcnow()
        with self._lock:
            self._db.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed, not left with the old text
            try:
                purged = self._purge(org_id, entry_id, reason, actor, at)
            finally:
                self._db.execute("PRAGMA secure_delete = OFF")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the write-ahead log held the old pages too
        return purged

    def erase_document_text(
        self, org_id: str, pattern: re.Pattern[str], audit: DocumentWrite, actor: str, *, only_if_found: bool = False
    ) -> tuple[int, int]:
        check_documents([audit])
        with self._lock:
            self._db.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed, not left with the old text
            try:
                counts = self._erase_document_text(org_id, pattern, audit, actor, only_if_found)
            finally:
                self._db.execute("PRAGMA secure_delete = OFF")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return counts

    def _erase_document_text(
        self, org_id: str, pattern: re.Pattern[str], audit: DocumentWrite, actor: str, only_if_found: bool
    ) -> tuple[int, int]:
        now, counts = utcnow().isoformat(), [0, 0]
        with self._write() as db, self._erasing(db, org_id, "erasure of a text from documents"):
            self._require_org(db, org_id)
            for index, (table, key) in enumerate((("documents", "collection, doc_id"), ("document_events", "seq"))):
                rows = db.execute(f"SELECT {key}, doc_id AS own_id, data FROM {table} WHERE org_id = ?", (org_id,))
                for record in rows.fetchall():
                    data = loads_json(record["data"])
                    if (erased := erase_text(data, pattern, own_id=record["own_id"])) != data:
                        where = " AND ".join(f"{column} = ?" for column in key.split(", "))
                        db.execute(f"UPDATE {table} SET data = ? WHERE org_id = ? AND {where}",
                                   (_json(erased), org_id, *tuple(record)[:-2]))  # fmt: skip
                        counts[index] += 1
            if only_if_found and counts == [0, 0]:
                return 0, 0
            db.execute(
                "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (org_id, audit.collection, audit.doc_id, audit.event, _json(audit.data), actor, now),
            )
            db.execute(
                "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
                "VALUES (?, ?, ?, ?, ?, 1, ?)",
                (org_id, audit.collection, audit.doc_id, audit.ref, _json(audit.data), now),
            )
        return counts[0], counts[1]

    def _purge(self, org_id: str, entry_id: str, reason: str, actor: str, at: datetime) -> Entry:
        with self._write() as db, self._erasing(db, org_id, f"purge of entry {entry_id}"):
            language = self._require_org(db, org_id)
            row = self._rows(db, org_id, [entry_id]).get(entry_id)
            if row is None:
                raise NotFoundError(
                    f"No entry {entry_id!r} in org {org_id!r}.", detail={"entry_id": entry_id, "org_id": org_id}
                )
            for record in db.execute(
                "SELECT seq, type, payload FROM memory_events WHERE org_id = ? AND entry_id = ? ORDER BY seq",
                (org_id, entry_id),
            ).fetchall():
                erased = projection.redacted_payload(EventType(record["type"]), loads_json(record["payload"]))
                if erased is not None:
                    db.execute("UPDATE memory_events SET payload = ? WHERE seq = ?", (_json(erased), record["seq"]))
            (base,) = db.execute(
                "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memory_events'), 0), "
                "coalesce((SELECT max(seq) FROM memory_events), 0))"
            ).fetchone()
            payload = {"reason": reason}
            db.execute(
                "INSERT INTO memory_events (seq, org_id, entry_id, type, payload, actor, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (base + 1, org_id, entry_id, EventType.PURGED.value, _json(payload), actor, at.isoformat()),
            )
            purged = projection.apply(
                row, org_id, entry_id, EventType.PURGED, payload, base + 1, at, self._terms_of, language
            )
            db.execute(
                f"INSERT OR REPLACE INTO memory_entries ({_ENTRY_COLUMNS}) VALUES ({', '.join('?' * 19)})",
                _row_to_db(purged),
            )
            db.execute("DELETE FROM entry_vectors WHERE org_id = ? AND entry_id = ?", (org_id, entry_id))
            db.execute("DELETE FROM embed_outbox WHERE org_id = ? AND entry_id = ?", (org_id, entry_id))
            db.execute("DELETE FROM index_images WHERE org_id = ?", (org_id,))  # it held the entry's terms
            db.execute("UPDATE orgs SET epoch = ? WHERE org_id = ?", (self._next_epoch(db), org_id))
        return projection.to_entry(purged)

    # ----------------------------------------------------------------- the embed outbox

    def outbox_depth(self) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT count(*) FROM embed_outbox").fetchone()
        return int(count)

    def readiness(self) -> tuple[int, int]:
        with self._lock:
            schema, depth = self._db.execute(
                "SELECT (SELECT max(version) FROM schema_migrations), (SELECT count(*) FROM embed_outbox)"
            ).fetchone()
        return int(schema), int(depth)

    def claim_jobs(
        self, limit: int, max_attempts: int, org_id: str | None = None, lease_seconds: float = 300.0
    ) -> list[EmbedJob]:
        now = utcnow().isoformat()
        lease = (utcnow() + timedelta(seconds=lease_seconds)).isoformat()
        with self._write() as db:
            if org_id is not None:
                orgs = [org_id]
            else:  # the orgs with any outbox row, one index step each (a loose index scan)
                orgs = [
                    row[0]
                    for row in db.execute(
                        "WITH RECURSIVE busy(org) AS (SELECT min(org_id) FROM embed_outbox UNION ALL "
                        "SELECT (SELECT min(org_id) FROM embed_outbox WHERE org_id > busy.org) FROM busy "
                        "WHERE busy.org IS NOT NULL) SELECT org FROM busy WHERE org IS NOT NULL"
                    )
                ]

            def fetch(
                requests: Mapping[str, tuple[int, tuple[Any, ...] | None]],
            ) -> dict[str, list[queue.Candidate]]:
                found: dict[str, list[queue.Candidate]] = {}
                for org, (count, after) in requests.items():
                    rows = db.execute(
                        "SELECT available_at, job_id FROM embed_outbox WHERE org_id = ? AND available_at <= ? "
                        "AND (available_at, job_id) > (?, ?) AND attempts < ? "
                        "AND (claimed_until IS NULL OR claimed_until <= ?) ORDER BY available_at, job_id LIMIT ?",
                        (org, now, *(after or ("", -1)), max_attempts, now, count),
                    ).fetchall()
                    found[org] = [queue.Candidate(org, (row[0], row[1]), row[1]) for row in rows]
                return found

            chosen, cursor = queue.fair_claim(orgs, limit, fetch, self._claim_after)
            if org_id is None and cursor is not None:
                self._claim_after = cursor
            if not chosen:
                return []
            order = {candidate.job_id: n for n, candidate in enumerate(chosen)}
            claimed = db.execute(
                f"UPDATE embed_outbox SET claimed_until = ? WHERE job_id IN ({', '.join('?' * len(chosen))}) "
                "RETURNING job_id, org_id, entry_id, attempts",
                (lease, *order),
            ).fetchall()
            jobs: list[EmbedJob] = []
            gone: list[int] = []
            broken: list[int] = []
            for org, group in itertools.groupby(
                sorted(claimed, key=lambda r: (r["org_id"], r["job_id"])), key=lambda r: r["org_id"]
            ):
                records = list(group)
                rows, unreadable = self._readable_rows(db, org, [record["entry_id"] for record in records])
                for record in records:
                    row = rows.get(record["entry_id"])
                    if record["entry_id"] in unreadable:
                        broken.append(record["job_id"])
                        continue
                    if row is None or row["status"] != Status.ACTIVE.value:
                        gone.append(record["job_id"])
                        continue
                    jobs.append(
                        EmbedJob(
                            record["job_id"],
                            org,
                            row["id"],
                            row["content_hash"],
                            projection.embed_text(row),
                            record["attempts"],
                        )
                    )
            db.executemany("DELETE FROM embed_outbox WHERE job_id = ?", [(job_id,) for job_id in gone])
            db.executemany(  # fails for good, never again in the way of other jobs or orgs
                "UPDATE embed_outbox SET attempts = 1000000, claimed_until = NULL, last_error = ? WHERE job_id = ?",
                [(_UNREADABLE, job_id) for job_id in broken],
            )
        return sorted(jobs, key=lambda job: order[job.job_id])  # as dealt: every org in the first batch

    def _readable_rows(
        self, db: sqlite3.Connection, org_id: str, entry_ids: Sequence[str]
    ) -> tuple[dict[str, projection.Row], set[str]]:
        """`_rows`, and the ids of rows that cannot be read (damaged JSON, say): one bad row must not stop the
        claim for every other job and org."""
        try:
            return self._rows(db, org_id, entry_ids), set()
        except (ValueError, sqlite3.DataError):
            pass
        rows: dict[str, projection.Row] = {}
        unreadable: set[str] = set()
        for entry_id in entry_ids:
            try:
                rows.update(self._rows(db, org_id, [entry_id]))
            except (ValueError, sqlite3.DataError) as error:
                log.error("store.row_unreadable", org_id=org_id, entry_id=entry_id, error=str(error)[:200])
                unreadable.add(entry_id)
        return rows, unreadable

    def complete_jobs(self, space: EmbeddingSpace, results: Sequence[EmbedResult]) -> int:
        written = [result for result in results if result.vector is not None]
        with self._write() as db:
            current = self.space()
            if current != space:
                raise EntryStateError(
                    f"The store's embedding space changed to {current} while vectors of {space} were being "
                    "computed; they were not written. Restart the worker.",
                    detail={"store_space": str(current), "worker_space": str(space)},
                )
            count = 0
            for org_id, group in itertools.groupby(sorted(written, key=lambda r: r.job.org_id), lambda r: r.job.org_id):
                results = list(group)
                db.execute("SAVEPOINT complete_org")  # one org's refused write must not stop the others
                try:
                    count += self._write_vectors(
                        db, space, [(r.job.org_id, r.job.entry_id, r.job.content_hash, r.vector) for r in results]
                    )
                    db.executemany(
                        "DELETE FROM embed_outbox WHERE job_id = ? AND content_hash = ?",
                        [(r.job.job_id, r.job.content_hash) for r in results],
                    )
                except sqlite3.DatabaseError as error:
                    db.execute("ROLLBACK TO complete_org")
                    log.error("store.complete_failed", org_id=org_id, jobs=len(results), error=str(error)[:200])
                db.execute("RELEASE complete_org")
        return count

    @staticmethod
    def _write_vectors(
        db: sqlite3.Connection,
        space: EmbeddingSpace,
        vectors: Sequence[tuple[str, str, str, npt.NDArray[np.float32] | None]],
    ) -> int:
        """Write (org, entry, content hash, vector) rows, stamped with the space; a vector is written only
        for the text it was computed from (the entry's current content hash)."""
        (last,) = db.execute(
            "UPDATE counters SET value = value + ? WHERE name = 'vseq' RETURNING value", (len(vectors),)
        ).fetchone()
        vseq, now = last - len(vectors), utcnow().isoformat()
        cursor = db.executemany(
            "INSERT INTO entry_vectors (org_id, entry_id, provider, model, dimension, vector, content_hash, "
            "vseq, embedded_at) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM memory_entries "
            "WHERE org_id = ? AND entry_id = ? AND content_hash = ?) "
            "ON CONFLICT (org_id, entry_id) DO UPDATE SET provider = excluded.provider, "
            "model = excluded.model, dimension = excluded.dimension, vector = excluded.vector, "
            "content_hash = excluded.content_hash, vseq = excluded.vseq, embedded_at = excluded.embedded_at",
            [
                (
                    org_id,
                    entry_id,
                    space.provider,
                    space.model,
                    space.dimension,
                    np.asarray(vector, dtype="<f4").tobytes(),
                    content_hash,
                    vseq + number,
                    now,
                    org_id,
                    entry_id,
                    content_hash,
                )
                for number, (org_id, entry_id, content_hash, vector) in enumerate(vectors, start=1)
            ],
        )
        return max(0, cursor.rowcount)

    def fail_jobs(self, jobs: Sequence[EmbedJob], error: str, retry_at: datetime, *, final: bool = False) -> None:
        with self._write() as db:
            db.executemany(
                "UPDATE embed_outbox SET attempts = CASE WHEN ? THEN 1000000 ELSE attempts + 1 END, "
                "last_error = ?, available_at = ?, claimed_until = NULL WHERE job_id = ?",
                [(final, error[:2000], retry_at.isoformat(), job.job_id) for job in jobs],
            )

    def release_jobs(self, jobs: Sequence[EmbedJob]) -> None:
        with self._write() as db:
            db.executemany("UPDATE embed_outbox SET claimed_until = NULL WHERE job_id = ?", [(j.job_id,) for j in jobs])

    def retry_failed(self, org_id: str | None = None) -> int:
        with self._write() as db:
            cursor = db.execute(
                "UPDATE embed_outbox SET attempts = 0, available_at = ?, claimed_until = NULL "
                "WHERE (attempts > 0 OR claimed_until IS NOT NULL)" + (" AND org_id = ?" if org_id else ""),
                (utcnow().isoformat(), *((org_id,) if org_id else ())),
            )
            return cursor.rowcount

    def enqueue_missing(self, org_id: str | None = None) -> int:
        space = self.space()
        if space is None:
            return 0
        with self._write() as db:
            return self._enqueue_missing(db, org_id, space)

    def build_vector_indexes(self) -> list[str]:
        return []  # exact search over the in-process matrix: no approximate index to build

    def _enqueue_missing(self, db: sqlite3.Connection, org_id: str | None, space: EmbeddingSpace) -> int:
        now = utcnow().isoformat()
        cursor = db.execute(
            "INSERT INTO embed_outbox (org_id, entry_id, content_hash, available_at, created_at) "
            "SELECT e.org_id, e.entry_id, e.content_hash, ?, ? FROM memory_entries e "
            "LEFT JOIN entry_vectors v ON v.org_id = e.org_id AND v.entry_id = e.entry_id "
            "  AND v.provider = ? AND v.model = ? AND v.dimension = ? AND v.content_hash = e.content_hash "
            "WHERE e.status = 'active' AND v.entry_id IS NULL"
            + (" AND e.org_id = ?" if org_id else "")
            + " ON CONFLICT (org_id, entry_id) DO NOTHING",
            (now, now, space.provider, space.model, space.dimension, *((org_id,) if org_id else ())),
        )
        return cursor.rowcount

    # ----------------------------------------------------------------- the change feed (ports.IndexFeed)

    _MARKS = (
        "SELECT (SELECT coalesce(max(seq), 0) FROM memory_entries WHERE org_id = ?), "
        "       (SELECT coalesce(max(vseq), 0) FROM entry_vectors WHERE org_id = ?), "
        "       (SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = ?), "
        "       (SELECT epoch FROM orgs WHERE org_id = ?), "
        "       (SELECT value FROM store_meta WHERE key = 'provider'), "
        "       (SELECT value FROM store_meta WHERE key = 'model'), "
        "       (SELECT value FROM store_meta WHERE key = 'dimension'), "
        "       (SELECT language FROM orgs WHERE org_id = ?)"
    )

    def _marks(self, db: sqlite3.Connection, org_id: str) -> Marks:
        entry_seq, vector_seq, documents_seq, epoch, provider, model, dimension, language = db.execute(
            self._MARKS, (org_id,) * 5
        ).fetchone()
        space = EmbeddingSpace(provider=provider, model=model, dimension=int(dimension)) if provider else None
        return Marks(entry_seq, vector_seq, documents_seq, epoch, space, language)

    def marks(self, org_id: str) -> Marks:
        with self._lock:
            return self._marks(self._db, org_id)

    @contextmanager
    def snapshot(self, org_id: str) -> Iterator[_Snapshot]:
        # On a reader connection of its own, not the store's: in WAL mode it reads one consistent snapshot while
        # the store's connection writes, so the index is built from it without the store's lock and every other
        # organization's reads and writes go on meanwhile.
        try:
            db = self._readers.get_nowait()
        except Empty:
            db = self._connect_reader()
        try:
            db.execute("BEGIN")
            try:
                yield _Snapshot(db, org_id, self._marks(db, org_id))
            finally:
                db.execute("COMMIT")
        finally:
            self._readers.put(db)

    def _connect_reader(self) -> sqlite3.Connection:
        reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        reader.row_factory = sqlite3.Row
        # mmap: an index image (megabytes over overflow pages) is read from the page cache without a read call
        # per page.
        for pragma in ("query_only=ON", f"busy_timeout={self.busy_timeout_ms}", "mmap_size=268435456"):
            reader.execute(f"PRAGMA {pragma}")
        return reader

    def save_index(self, org_id: str, image: StoredIndex) -> None:
        # On a connection of its own, not under the store's lock: an image is megabytes (a 60,000-entry org's
        # vectors alone are 92 MB), and writing it under the lock held every other org's reads and writes for about
        # half a second. Other writers wait for the file's write lock meanwhile; readers (WAL) do not.
        at, space = image.marks, image.marks.space
        with self._image_lock:
            if self._image_db is None:
                self._image_db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                for pragma in ("synchronous=NORMAL", "foreign_keys=ON", f"busy_timeout={self.busy_timeout_ms}"):
                    self._image_db.execute(f"PRAGMA {pragma}")
            db = self._image_db
            db.execute("BEGIN IMMEDIATE")  # the epoch is read inside the write: a purge or drop cannot pass it
            try:
                db.execute(
                    "INSERT OR REPLACE INTO index_images (org_id, epoch, language, provider, model, dimension, "
                    "entry_seq, vector_seq, data, saved_at) SELECT org_id, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM orgs "
                    "WHERE org_id = ? AND epoch IS ?",
                    (at.epoch, at.language, *(_space_columns(space)), at.entry_seq, at.vector_seq, image.data,
                     utcnow().isoformat(), org_id, at.epoch),
                )  # fmt: skip
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")


def _space_columns(space: EmbeddingSpace | None) -> tuple[str | None, str | None, int | None]:
    return (space.provider, space.model, space.dimension) if space else (None, None, None)


class _Snapshot:
    """`ports.FeedSnapshot` inside one read transaction on a reader connection (not under the store's lock)."""

    def __init__(self, db: sqlite3.Connection, org_id: str, marks: Marks) -> None:
        self._db, self._org, self.marks = db, org_id, marks

    def rows(self, after_seq: int, *, active_only: bool) -> Iterable[IndexRow]:
        status = "AND status = 'active'" if active_only else ""
        for entry_id, status_value, terms, content_hash in self._db.execute(
            "SELECT entry_id, status, terms, content_hash FROM memory_entries "
            f"WHERE org_id = ? AND seq > ? {status} ORDER BY seq",
            (self._org, after_seq),
        ):
            yield IndexRow(entry_id, status_value == Status.ACTIVE.value, terms, content_hash)

    def recent(self, after_seq: int, limit: int) -> Iterable[projection.Row]:
        for record in self._db.execute(
            f"SELECT {_READ_COLUMNS} FROM memory_entries WHERE org_id = ? AND seq > ? "
            "AND status = 'active' ORDER BY seq DESC LIMIT ?",
            (self._org, after_seq, limit),
        ):
            yield _row_from_db(record)

    def stored(self) -> StoredIndex | None:
        found = self._db.execute(
            "SELECT epoch, language, provider, model, dimension, entry_seq, vector_seq, data FROM index_images "
            "WHERE org_id = ?",
            (self._org,),
        ).fetchone()
        return stored_index(found)

    def vectors(self, after_vseq: int) -> Iterable[tuple[str, str, npt.NDArray[np.float32]]]:
        space = self.marks.space
        if space is None:
            return
        for entry_id, content_hash, blob in self._db.execute(
            "SELECT entry_id, content_hash, vector FROM entry_vectors WHERE org_id = ? AND vseq > ? "
            "AND provider = ? AND model = ? AND dimension = ? ORDER BY vseq",
            (self._org, after_vseq, space.provider, space.model, space.dimension),
        ):
            yield entry_id, content_hash, np.frombuffer(blob, dtype="<f4")
