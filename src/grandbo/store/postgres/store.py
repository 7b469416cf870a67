"""The production store: Postgres with pgvector.

Every method names its organization and runs in a transaction that first sets `grandbo.org_id`;
row-level security (FORCEd, so the owning role is held to it too) is the second wall behind the
explicit `WHERE org_id = ...`. The vector arm runs in SQL (pgvector, exact or HNSW); the lexical arm
runs in process, in the search index above the store, over the rows this store's change feed hands up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import psycopg
import structlog
from pgvector.psycopg import register_vector
from psycopg import Pipeline, sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb, set_json_loads
from psycopg_pool import ConnectionPool, PoolTimeout
from pydantic_core import to_json

from grandbo.errors import (
    CommitUnknownError,
    ConfigError,
    EntryStateError,
    MigrationError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
)
from grandbo.model import ORG_ID_PATTERN, CorpusStats, EmbeddingSpace, Entry, Event, EventType, Status, utcnow
from grandbo.ports import (
    VECTOR_TIE_DIGITS,
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
    VectorHit,
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
    picked,
    refuse_newer_backup,
    stored_index,
)
from grandbo.store.postgres import backup as pg_backup
from grandbo.store.postgres.migrations import MIGRATIONS, OUTBOX_DEPTH_POLICY
from grandbo.store.postgres.pending import PendingWorkMixin
from grandbo.urls import mask_url

log = structlog.get_logger(__name__)


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Each pooled connection: pgvector's types, and jsonb parsed by pydantic-core instead of json.loads."""
    register_vector(conn)
    set_json_loads(loads_json, conn)


T = TypeVar("T")
_MIGRATION_LOCK = 0x6772616E64626F  # "grandbo": serializes migrators across processes
_ENTRY_COLUMNS = (
    "org_id, entry_id, title, body, kind, source, tags, services, severity, occurred_at, status, "
    "created_at, updated_at, supersedes, superseded_by, meta, seq, terms, content_hash"
)


# A new epoch for orgs: the sequence's next value taken once, then written (Citus refuses a volatile function
# in an UPDATE of a distributed table; each org's epoch still only grows).
_NEW_EPOCH = "WITH next AS (SELECT nextval('grandbo_epoch') AS epoch) UPDATE orgs SET epoch = next.epoch FROM next"


def redact(url: str) -> str:
    """The URL without its credentials (userinfo password, `password=` and the like), for messages and logs."""
    return mask_url(url)


def _index_name(org_id: str) -> str:
    return "entry_vectors_hnsw_" + hashlib.sha256(org_id.encode()).hexdigest()[:16]


def _row_from_db(record: dict[str, Any]) -> projection.Row:
    row = dict(record)
    row["id"] = row.pop("entry_id")
    for key in ("occurred_at", "created_at", "updated_at"):
        row[key] = row[key].isoformat()
    return row


def _entry_from_db(record: dict[str, Any]) -> Entry:
    return projection.to_entry(_row_from_db(record))


def _jsonb(value: Any) -> Jsonb:
    """A jsonb parameter serialized by pydantic-core (Rust): four times faster than json.dumps on an event
    payload, which a bulk import sends for every entry. Same JSON values (jsonb does not keep text)."""
    return Jsonb(value, to_json)


def _row_to_db(row: projection.Row) -> tuple[Any, ...]:
    return (
        row["org_id"],
        row["id"],
        row["title"],
        row["body"],
        row["kind"],
        row["source"],
        _jsonb(row["tags"]),
        _jsonb(row["services"]),
        row["severity"],
        datetime.fromisoformat(row["occurred_at"]),
        row["status"],
        datetime.fromisoformat(row["created_at"]),
        datetime.fromisoformat(row["updated_at"]),
        row["supersedes"],
        row["superseded_by"],
        _jsonb(row["meta"]),
        row["seq"],
        row["terms"],
        row["content_hash"],
    )


@dataclass(slots=True)
class _Step:
    """The rows one step of an append writes: events, entry rows, given vectors, embed jobs, and the
    entries that left the active set (their jobs and vectors are deleted)."""

    events: list[tuple[Any, ...]]
    entries: list[tuple[Any, ...]]
    vectors: list[tuple[Any, ...]]
    outbox: list[tuple[Any, ...]]
    gone: list[str]

    @classmethod
    def of(
        cls,
        org_id: str,
        events: Sequence[NewEvent],
        seqs: Sequence[int],
        changed: Mapping[str, projection.Row],
        vectors: Mapping[str, npt.NDArray[np.float32]],
        space: EmbeddingSpace | None,
    ) -> _Step:
        active = {entry_id: row for entry_id, row in changed.items() if row["status"] == Status.ACTIVE.value}
        given = [entry_id for entry_id in active if entry_id in vectors]
        if given and space is None:
            raise StoreError("Vectors were given without the embedding space they belong to.", detail={})
        labels = (space.provider, space.model, space.dimension) if space is not None else ()
        now = utcnow()
        return cls(
            events=[
                (org_id, seq, e.entry_id, e.type.value, _jsonb(e.payload), e.actor, e.at)
                for seq, e in zip(seqs, events, strict=True)
            ],
            entries=[_row_to_db(row) for row in changed.values()],
            vectors=[
                (
                    org_id,
                    entry_id,
                    *labels,
                    active[entry_id]["content_hash"],
                    now,
                    np.asarray(vectors[entry_id], dtype=np.float32),
                )
                for entry_id in given
            ],
            outbox=[
                (org_id, entry_id, row["content_hash"]) for entry_id, row in active.items() if entry_id not in vectors
            ],
            gone=[entry_id for entry_id in changed if entry_id not in active],
        )


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    columns: str
    conflict: str = ""  # what an INSERT does about a row that is already there


_EVENTS = _Table("memory_events", "org_id, seq, entry_id, type, payload, actor, at")
_ENTRIES = _Table(
    "memory_entries",
    _ENTRY_COLUMNS,
    "ON CONFLICT (org_id, entry_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _ENTRY_COLUMNS.split(", ")[2:]),
)
_VECTORS = _Table(
    "entry_vectors",
    "org_id, entry_id, provider, model, dimension, content_hash, embedded_at, embedding",
    "ON CONFLICT (org_id, entry_id) DO UPDATE SET provider = excluded.provider, model = excluded.model, "
    "dimension = excluded.dimension, content_hash = excluded.content_hash, embedded_at = excluded.embedded_at, "
    "embedding = excluded.embedding",
)
_OUTBOX = _Table(
    "embed_outbox",
    "org_id, entry_id, content_hash",
    "ON CONFLICT (org_id, entry_id) DO UPDATE SET content_hash = excluded.content_hash, attempts = 0, "
    "last_error = NULL, available_at = now(), claimed_until = NULL "
    "WHERE embed_outbox.content_hash <> excluded.content_hash",
)


class _StepWriter:
    """Writes the steps of one append, in its transaction.

    Large row sets are COPYed (binary) into temporary staging tables, because COPY is refused on tables
    under row-level security and row-by-row INSERTs are slow; `INSERT ... SELECT` then moves them. Those
    statements, and the small row sets' INSERTs, go out in pipeline mode: the server runs them while the
    caller builds the next step's rows, and the next `write` (or `finish`) waits for them and raises
    anything the server refused.
    """

    COPY_FROM = 200  # rows from which a table's rows go through COPY

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        # Per table staged in this transaction: the type oids its COPY sends.
        self._copy_types: dict[str, list[int]] = {}
        self._pipeline: contextlib.AbstractContextManager[Pipeline] | None = None

    def write(self, step: _Step) -> None:
        conn = self._conn
        self.finish()
        tables = ((_EVENTS, step.events), (_ENTRIES, step.entries), (_VECTORS, step.vectors), (_OUTBOX, step.outbox))
        for table, rows in tables:
            if len(rows) >= self.COPY_FROM:
                self._copy(table, rows)
        self._pipeline = conn.pipeline()
        self._pipeline.__enter__()
        for table, rows in tables:
            if len(rows) >= self.COPY_FROM:
                conn.execute(
                    f"INSERT INTO {table.name} ({table.columns}) SELECT {table.columns} FROM stage_{table.name} "
                    f"{table.conflict}"
                )
                conn.execute(f"TRUNCATE stage_{table.name}")
            elif rows:
                marks = ", ".join(["%s"] * len(table.columns.split(", ")))
                conn.cursor().executemany(
                    f"INSERT INTO {table.name} ({table.columns}) VALUES ({marks}) {table.conflict}", rows
                )
        if step.gone:
            org_id = step.entries[0][0]
            conn.execute("DELETE FROM embed_outbox WHERE org_id = %s AND entry_id = ANY(%s)", (org_id, step.gone))
            conn.execute("DELETE FROM entry_vectors WHERE org_id = %s AND entry_id = ANY(%s)", (org_id, step.gone))

    def _copy(self, table: _Table, rows: Sequence[tuple[Any, ...]]) -> None:
        conn, stage = self._conn, f"stage_{table.name}"
        types = self._copy_types.get(table.name)
        if types is None:  # the first COPY into this table in the transaction: make its staging table
            # Column types only (no constraints, defaults or identity): the real INSERT checks everything.
            conn.execute(
                f"CREATE TEMP TABLE {stage} ON COMMIT DROP AS SELECT {table.columns} FROM {table.name} WITH NO DATA"
            )
            types = self._copy_types[table.name] = [
                oid
                for (oid,) in conn.execute(
                    "SELECT atttypid FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 ORDER BY attnum",
                    (stage,),
                )
            ]
        with conn.cursor().copy(f"COPY {stage} ({table.columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)

    def finish(self) -> None:
        """Wait until the server has run everything sent; raise what it refused."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            pipeline.__exit__(None, None, None)

    def __enter__(self) -> _StepWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.finish()
            return
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:  # the caller's error wins; the transaction rolls back
            with contextlib.suppress(psycopg.Error):
                pipeline.__exit__(kind, error, tb)


# A job a worker may claim now (the parameter: GRANDBO_EMBED_MAX_ATTEMPTS).
_READY = "available_at <= now() AND attempts < %s AND (claimed_until IS NULL OR claimed_until <= now())"

# Stands for an entry row the driver refused to read (see `_readable_rows`); its job fails for good.
_UNREADABLE: projection.Row = {
    "error": "the entry's row cannot be read (a value outside what the store reads back); fix or purge it"
}


class PostgresStore(PendingWorkMixin):
    """Every organization's memory in one Postgres database with pgvector."""

    searches_vectors = True  # pgvector answers the vector arm (`vector_search`)

    def __init__(
        self,
        url: str,
        terms_of: TermsOf,
        *,
        pool_size: int = 10,
        hnsw_threshold: int = 20_000,
        ef_search: int = 140,
        hnsw_build_memory: str = "1GB",
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 128,
        connect_timeout: float = 10.0,
        migrate_url: str | None = None,
        backup_url: str | None = None,
        pg_bin_dir: Path | None = None,
    ) -> None:
        self.url = redact(url)
        self._dsn = url
        # The owner role's URL (GRANDBO_MIGRATE_DATABASE_URL): migrations and grants run as it; the pool
        # connects as the runtime role of `url`, which must own nothing (`_check_owns_nothing`).
        self._owner_dsn = migrate_url
        self._backup_dsn, self._pg_bin_dir = backup_url, pg_bin_dir  # pg_dump and pg_restore (`backup`)
        self._pool_size, self._connect_timeout = pool_size, connect_timeout
        self._pinned = threading.local()  # the connection of this thread's `consistent_read`, if any
        self._terms_of = terms_of
        self.hnsw_threshold = hnsw_threshold
        # Whether a write with vectors checks whether the org wants its HNSW index (built by the worker). A bulk
        # load that builds it afterwards turns this off: the check counts up to `hnsw_threshold` vectors.
        self.auto_index = True
        self._claim_after: str | None = None  # the embed claim's round-robin cursor (`store.queue`)
        self._index_waits_told: set[str] = set()  # orgs whose index waits for the owner's URL, logged once
        self._short_of_index: dict[str, int] = {}  # vectors an org lacked for its index at its last count
        self.ef_search = ef_search
        self.hnsw_build_memory = hnsw_build_memory
        self.hnsw_m = int(hnsw_m)
        self.hnsw_ef_construction = int(hnsw_ef_construction)
        try:
            with psycopg.connect(url, connect_timeout=int(connect_timeout)) as conn:
                self._check_role(conn)
                who = conn.execute("SELECT current_user, current_database()").fetchone()
                runtime_role, self._database = str(who[0]), str(who[1])  # type: ignore[index]
                self._server = _server_id(conn)
        except psycopg.OperationalError as error:
            raise StoreUnavailableError(
                f"Cannot reach Postgres at {self.url}: {str(error).strip().splitlines()[0]}. Check "
                "GRANDBO_DATABASE_URL, that the server runs, and that it accepts this role.",
                detail={"url": self.url},
            ) from error
        if migrate_url is not None:
            self.migrate(runtime_role)
        with psycopg.connect(url, connect_timeout=int(connect_timeout)) as conn:
            self._check_schema(conn)
            self._check_owns_nothing(conn, runtime_role)
        self._pool = self._open_pool()

    def _open_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self._dsn,
            min_size=1,
            max_size=self._pool_size,
            kwargs={"prepare_threshold": None, "options": "-c plan_cache_mode=force_custom_plan"},
            configure=_configure,
            check=ConnectionPool.check_connection,
            open=False,
        )
        pool.open()
        try:
            pool.wait(timeout=self._connect_timeout)
        except PoolTimeout as error:
            pool.close()
            raise StoreUnavailableError(
                f"Postgres at {self.url} accepted no pooled connection within {self._connect_timeout:g}s.",
                detail={"url": self.url},
            ) from error
        return pool

    # ----------------------------------------------------------------- backup and restore (pg_dump)

    def _backup_url(self) -> str:
        if self._backup_dsn is None:
            raise ConfigError(
                f"Backing up or restoring the Postgres store at {self.url} runs pg_dump / pg_restore as a role that "
                "bypasses row-level security: set GRANDBO_BACKUP_DATABASE_URL to a superuser's URL of this database "
                "(for backups alone, a BYPASSRLS role granted pg_read_all_data will do). README, 'Backup and "
                "restore'.",
                detail={"url": self.url},
            )
        role = "a role that bypasses row-level security"
        self._connect_as(self._backup_dsn, "the backup role", "GRANDBO_BACKUP_DATABASE_URL", role).close()
        return self._backup_dsn

    def backup(self, destination: Path) -> None:
        """A pg_dump archive of the whole database, from one snapshot (`postgres.backup.dump`)."""
        pg_backup.dump(self._backup_url(), destination, self._pg_bin_dir)

    def restore(self, source: Path) -> None:
        """Replace the database's Grandbo objects with a backup's, in one transaction. The pool is opened
        again afterwards: its connections knew the vector type the restore recreated."""
        if (wrong := other_backend_backup(source, "a Postgres store (pg_dump)")) is not None:
            raise StoreError(wrong, detail={"path": str(source)})
        url = self._backup_url()
        pg_backup.contents(source, self._pg_bin_dir)  # refuse a wrong file before touching the pool
        refuse_newer_backup(source, pg_backup.schema_versions(source, self._pg_bin_dir), MIGRATIONS)
        self._pool.close()
        try:
            pg_backup.restore(url, source, self._pg_bin_dir)
        finally:
            self._pool = self._open_pool()
        with psycopg.connect(self._dsn) as conn:
            self._check_schema(conn)
        # Leases the backup holds are of workers that held them when it was taken: none holds them after the
        # restore, and they would keep their jobs from every worker until they ran out (five minutes).
        released = 0
        for org in self.orgs():
            with self._writing(org) as conn:
                released += conn.execute(
                    "UPDATE embed_outbox SET claimed_until = NULL WHERE org_id = %s AND claimed_until IS NOT NULL",
                    (org,),
                ).rowcount
        if released:
            log.info("store.restore_released_leases", jobs=released)

    # ----------------------------------------------------------------- plumbing

    def _check_role(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").fetchone()
        if row and (row[0] or row[1]):
            raise StoreError(
                f"Grandbo refuses to connect to {self.url} as a role that bypasses row-level security "
                "(SUPERUSER or BYPASSRLS): tenant isolation would rest on the application alone. Connect as "
                "an ordinary role that owns nothing (README, 'Postgres: two roles').",
                detail={"url": self.url},
            )

    def _check_owns_nothing(self, conn: psycopg.Connection[Any], role: str) -> None:
        """Refuse a runtime role that owns anything here: an owner can ALTER its tables, switch row-level
        security off for itself (NO FORCE) and read every org's rows."""
        owned = [
            r[0]
            for r in conn.execute(
                "WITH me AS (SELECT oid FROM pg_roles WHERE rolname = current_user) "
                "(SELECT CASE c.relkind WHEN 'S' THEN 'sequence ' ELSE 'table ' END || n.nspname || '.' || c.relname "
                "  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, me WHERE c.relowner = me.oid "
                "  AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') "
                "  AND n.nspname NOT LIKE 'pg\\_%%' AND n.nspname <> 'information_schema' "
                "  ORDER BY c.relkind = 'S', c.relname) "
                "UNION ALL SELECT 'database ' || datname FROM pg_database, me WHERE datdba = me.oid "
                "  AND datname = current_database() "
                "UNION ALL SELECT 'schema ' || nspname FROM pg_namespace, me WHERE nspowner = me.oid "
                "UNION ALL SELECT 'function ' || n.nspname || '.' || p.proname FROM pg_proc p "
                "  JOIN pg_namespace n ON n.oid = p.pronamespace, me WHERE p.proowner = me.oid "
                "  AND n.nspname NOT LIKE 'pg\\_%%' AND n.nspname <> 'information_schema' "
                "LIMIT 6"
            )
        ]
        if owned:
            raise StoreError(
                f"Grandbo refuses to run as the role {role!r} at {self.url}: it owns {', '.join(owned[:5])}"
                f"{' and more' if len(owned) > 5 else ''}. An owner can switch row-level security off for itself "
                "and read every organization. Run as two roles (README, 'Postgres: two roles'): an owner role in "
                "GRANDBO_MIGRATE_DATABASE_URL for `grandbo migrate`, and a runtime role that owns nothing in "
                f"GRANDBO_DATABASE_URL. To hand an existing schema over: REASSIGN OWNED BY {role} TO <owner role>.",
                detail={"url": self.url, "role": role, "owns": owned[:5]},
            )

    def _check_schema(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse a schema that is missing, behind this release, or ahead of it (the runtime role never
        migrates: it may not)."""
        known = {v for v, _, _ in MIGRATIONS}
        applied: set[int] = set()
        if conn.execute("SELECT to_regclass('schema_migrations')").fetchone() != (None,):
            applied = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
        if unknown := applied - known:
            raise MigrationError(
                f"The database at {self.url} has schema versions {sorted(unknown)} this Grandbo does "
                "not know; it was migrated by a newer release. Upgrade Grandbo.",
                detail={"unknown_versions": sorted(unknown)},
            )
        if pending := sorted(known - applied):
            raise MigrationError(
                f"The database at {self.url} lacks schema migrations {pending}. Apply them as the owner role: "
                "GRANDBO_MIGRATE_DATABASE_URL=postgresql://OWNER@HOST/DB grandbo migrate (README, 'Postgres: "
                "two roles'); it also grants the runtime role of GRANDBO_DATABASE_URL what it needs.",
                detail={"pending_versions": pending},
            )

    @contextmanager
    def _tx(self, org_id: str | None = None, **local: str) -> Iterator[psycopg.Connection[Any]]:
        """A transaction, scoped to one org (SET LOCAL grandbo.org_id) when `org_id` is given; `local`
        holds more transaction-local settings (dots spelled as double underscores)."""
        settings = {"grandbo.org_id": org_id or "", **{k.replace("__", "."): v for k, v in local.items()}}
        calls = ", ".join("set_config(%s, %s, true)" for _ in settings)
        pinned: psycopg.Connection[Any] | None = getattr(self._pinned, "conn", None)
        with contextlib.nullcontext(pinned) if pinned else self._pool.connection() as conn, conn.transaction():
            conn.execute(f"SELECT {calls}", [part for pair in settings.items() for part in pair])
            yield conn

    @contextmanager
    def consistent_read(self, org_id: str) -> Iterator[None]:
        # One REPEATABLE READ, READ ONLY transaction pinned to this thread: every `_tx` within is a savepoint of
        # it, so every read sees the snapshot its first statement took.
        if getattr(self._pinned, "conn", None) is not None:
            yield
            return
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            self._pinned.conn = conn
            try:
                yield
            finally:
                self._pinned.conn = None

    def _retrying(self, read: Callable[[], T]) -> T:
        """Run a read; a connection lost underneath it is retried twice on fresh connections."""
        for attempt in range(3):
            try:
                return read()
            except psycopg.OperationalError as error:
                if attempt == 2:
                    raise StoreUnavailableError(
                        f"Lost the connection to Postgres at {self.url} three times: {error}. Retry later.",
                        detail={"url": self.url},
                    ) from error
                log.warning("store.connection_lost", attempt=attempt + 1, error=str(error).splitlines()[0])
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    @contextmanager
    def _writing(self, org_id: str | None) -> Iterator[psycopg.Connection[Any]]:
        """A write transaction. A connection lost before COMMIT was sent becomes a 503 with nothing written; one
        lost during COMMIT leaves the outcome unknown (the server may have committed), and says so."""
        committing = False
        try:
            with self._tx(org_id) as conn:
                yield conn
                committing = True  # the body is done: leaving the block sends COMMIT
        except psycopg.OperationalError as error:
            if committing:
                raise CommitUnknownError(
                    f"Lost the connection to Postgres at {self.url} while the write was committing: it may or may "
                    "not have been stored. Read it back before writing again, or retry with the same "
                    "idempotency key (a retry without one can write it twice).",
                    detail={"url": self.url, "outcome": "unknown"},
                ) from error
            raise StoreUnavailableError(
                f"Lost the connection to Postgres at {self.url} during a write, before it committed; nothing was "
                "written. Retry the request.",
                detail={"url": self.url, "outcome": "not_committed"},
            ) from error

    def migrate(self, runtime_role: str | None = None) -> list[int]:
        """Apply pending migrations as the owner role, each in its own transaction, serialized across
        processes; then grant `runtime_role` (default: the role of GRANDBO_DATABASE_URL) what it needs."""
        if self._owner_dsn is None:
            raise MigrationError(
                f"Migrations run as the owner role, and no GRANDBO_MIGRATE_DATABASE_URL is set for {self.url}. "
                "Set it to the role that owns Grandbo's schema and run `grandbo migrate` (README, 'Postgres: "
                "two roles').",
                detail={"url": self.url},
            )
        if runtime_role is None:
            with psycopg.connect(self._dsn) as conn:
                runtime_role = str(conn.execute("SELECT current_user").fetchone()[0])  # type: ignore[index]
        applied_now: list[int] = []
        with self._owner_connection() as conn:
            for version, name, statements in MIGRATIONS:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS schema_migrations "
                        "(version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)"
                    )
                    applied = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
                    unknown = applied - {v for v, _, _ in MIGRATIONS}
                    if unknown:
                        raise MigrationError(
                            f"The database at {self.url} has schema versions {sorted(unknown)} this Grandbo does "
                            "not know; it was migrated by a newer release. Upgrade Grandbo.",
                            detail={"unknown_versions": sorted(unknown)},
                        )
                    if version in applied:
                        continue
                    try:
                        for statement in statements:
                            if statement == REDERIVE_TERMS:
                                self._rederive_terms(conn)
                            else:
                                conn.execute(statement)  # fixed migration text
                    except psycopg.errors.InsufficientPrivilege as error:
                        raise MigrationError(
                            f"Migration {version} ({name}) needs a privilege this role lacks: {error}. If it is "
                            "the pgvector extension, ask an administrator to run CREATE EXTENSION vector in "
                            "this database once.",
                            detail={"version": version},
                        ) from error
                    conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, now())", (version, name))
                    applied_now.append(version)
                    log.info("store.migrated", version=version, name=name)
            with conn.transaction():  # under the lock too: concurrent GRANTs on one table collide
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                self._grant(conn, runtime_role)
        return applied_now

    def _owner_connection(self) -> psycopg.Connection[Any]:
        """A connection as the owner role of GRANDBO_MIGRATE_DATABASE_URL, to this store's database only."""
        role = "the role that owns Grandbo's schema"
        return self._connect_as(str(self._owner_dsn), "the owner role", "GRANDBO_MIGRATE_DATABASE_URL", role)

    def _connect_as(self, dsn: str, role: str, setting: str, what: str) -> psycopg.Connection[Any]:
        """A connection as `role` (the URL of `setting`, which names `what`), to this store's database only:
        a backup, restore, migration or grant through it must not land in another database."""
        shown = redact(dsn)
        try:
            conn = psycopg.connect(dsn, connect_timeout=int(self._connect_timeout))
        except psycopg.OperationalError as error:
            raise StoreUnavailableError(
                f"Cannot reach Postgres as {role} at {shown}: {str(error).strip().splitlines()[0]}. Check {setting} "
                f"({what}, its password), that the server runs, and that it accepts this role.",
                detail={"url": shown},
            ) from error
        database = str(conn.execute("SELECT current_database()").fetchone()[0])  # type: ignore[index]
        server = _server_id(conn)
        if database != self._database:
            conn.close()
            raise ConfigError(
                f"{setting} ({shown}) names the database {database}, not this store's ({self._database}, "
                "GRANDBO_DATABASE_URL). Point it at the store's database.",
                detail={"url": shown},
            )
        if None not in (server, self._server) and server != self._server:
            conn.close()
            raise ConfigError(
                f"{setting} ({shown}) reaches a database named {database} on another Postgres server than "
                "GRANDBO_DATABASE_URL's (their system identifiers differ). Point both at the same server.",
                detail={"url": shown},
            )
        return conn

    def _rederive_terms(self, conn: psycopg.Connection[Any]) -> None:
        """Migration step REDERIVE_TERMS (store/base.py), org by org (row-level security holds the migrator
        too), in batches of entries."""
        meta = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
        space = (
            EmbeddingSpace(provider=meta["provider"], model=meta["model"], dimension=int(meta["dimension"]))
            if "provider" in meta
            else None
        )
        changed = queued = 0
        declared = conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'orgs' AND column_name = 'language'"
        ).fetchone()  # migration 8 adds it
        language_column = "language" if declared else "NULL"
        for org_id, language in conn.execute(f"SELECT org_id, {language_column} FROM orgs ORDER BY org_id").fetchall():
            conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org_id,))
            updated = self._rederive_org(conn, org_id, language)
            if space is not None and space.provider == TERMS_DERIVED_VECTORS:
                conn.cursor().executemany(
                    "DELETE FROM entry_vectors WHERE org_id = %s AND entry_id = %s AND provider = %s",
                    [(org_id, entry_id, TERMS_DERIVED_VECTORS) for entry_id in updated],
                )
            if space is not None and updated:
                queued += self._enqueue_missing(conn, org_id, space)
            changed += len(updated)
        conn.execute("SELECT set_config('grandbo.org_id', '', true)")
        conn.execute(_NEW_EPOCH)
        log.info("store.terms_rederived", entries_changed=changed, embed_jobs=queued)

    def _rederive_org(self, conn: psycopg.Connection[Any], org_id: str, language: str | None) -> list[str]:
        """Derive the stored terms of one org's entries again (in `language`), in batches; return the ids of
        the entries whose terms changed."""
        after = ""
        changed: list[str] = []
        while True:
            rows = conn.execute(
                "SELECT entry_id, title, body, tags, services, terms FROM memory_entries "
                "WHERE org_id = %s AND entry_id > %s ORDER BY entry_id LIMIT %s",
                (org_id, after, REDERIVE_BATCH),
            ).fetchall()
            if not rows:
                return changed
            after = rows[-1][0]
            updates = projection.rederived(rows, self._terms_of, language, list)
            conn.cursor().executemany(
                "UPDATE memory_entries SET terms = %s WHERE org_id = %s AND entry_id = %s",
                [(new, org_id, entry_id) for entry_id, new in updates.items()],
            )
            changed += list(updates)

    @staticmethod
    def _grant(conn: psycopg.Connection[Any], role: str) -> None:
        """What the runtime role may do, and nothing more: read and write rows (the logs' triggers still
        refuse UPDATE and DELETE outside an erasure), use the sequences, call the DDL functions. No TRUNCATE
        (it skips triggers), no TRIGGER, no REFERENCES, no CREATE in the schema."""
        if conn.execute("SELECT rolname = current_user FROM pg_roles WHERE rolname = %s", (role,)).fetchone() == (
            True,
        ):
            return  # one role for both: the runtime check refuses it with the remedy
        who = sql.Identifier(role)
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tableowner = current_user"
            )
        ]
        for table in tables:
            rights = "SELECT" if table == "schema_migrations" else "SELECT, INSERT, UPDATE, DELETE"
            conn.execute(sql.SQL(f"GRANT {rights} ON {{}} TO {{}}").format(sql.Identifier(table), who))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(who))
        conn.execute(sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {}").format(who))
        if conn.info.server_version >= 170000:  # VACUUM after an erasure (`_vacuum`); MAINTAIN alters nothing
            for table in ("memory_events", "memory_entries", "entry_vectors", "embed_outbox", "documents",
                          "document_events", "index_images"):  # fmt: skip
                conn.execute(sql.SQL("GRANT MAINTAIN ON {} TO {}").format(sql.Identifier(table), who))
        # The outbox count reads through a policy of the owner's (migration 11). After the schema changed hands
        # (REASSIGN OWNED: a single-role store moved to two roles) it named the old owner, which may now be the
        # runtime role, or was dropped with it (DROP OWNED): it follows the owner that grants.
        current = conn.execute(
            "SELECT roles = ARRAY[current_user]::name[] FROM pg_policies WHERE schemaname = current_schema() "
            "AND tablename = 'embed_outbox' AND policyname = 'embed_outbox_depth'"
        ).fetchone()
        if current != (True,):
            conn.execute("DROP POLICY IF EXISTS embed_outbox_depth ON embed_outbox")
            conn.execute(OUTBOX_DEPTH_POLICY)
        PendingWorkMixin._grant_counting(conn)
        for function in (
            "grandbo_embedding_column(integer, boolean)",
            "grandbo_vector_index(text, boolean, integer, integer, text)",
            "grandbo_outbox_depth()",
            "grandbo_pending_work(integer)",
        ):
            conn.execute(sql.SQL(f"GRANT EXECUTE ON FUNCTION {function} TO {{}}").format(who))

    def schema_versions(self) -> list[int]:
        with self._tx() as conn:
            return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]

    def close(self) -> None:
        self._pool.close()

    # ----------------------------------------------------------------- the embedding space

    def initialize(self, space: EmbeddingSpace) -> None:
        with self._writing(None) as conn:
            conn.execute("LOCK TABLE store_meta IN EXCLUSIVE MODE")
            self._set_space(conn, space)
            conn.execute("SELECT grandbo_embedding_column(%s, false)", (space.dimension,))

    def _set_space(self, conn: psycopg.Connection[Any], space: EmbeddingSpace) -> None:
        conn.cursor().executemany(
            "INSERT INTO store_meta (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [
                ("provider", space.provider),
                ("model", space.model),
                ("dimension", str(space.dimension)),
                ("created_at", utcnow().isoformat()),
            ],
        )

    def space(self) -> EmbeddingSpace | None:
        def read() -> EmbeddingSpace | None:
            with self._tx() as conn:
                meta = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
            if "provider" not in meta:
                return None
            return EmbeddingSpace(provider=meta["provider"], model=meta["model"], dimension=int(meta["dimension"]))

        return self._retrying(read)

    def switch_space(self, space: EmbeddingSpace, *, every_entry: bool = False) -> int:
        current = self.space()
        with self._writing(None) as conn:
            conn.execute("LOCK TABLE store_meta IN EXCLUSIVE MODE")
            self._set_space(conn, space)
            if current is None or current.dimension != space.dimension or every_entry:
                # A vector(n) column holds one dimension: vectors of another one go, and their indexes.
                conn.execute("SELECT grandbo_embedding_column(%s, true)", (space.dimension,))
                conn.execute(_NEW_EPOCH)
        total = 0
        for org_id in self.orgs():
            with self._writing(org_id) as conn:
                if current is None or current.dimension != space.dimension or every_entry:
                    conn.execute("DELETE FROM entry_vectors WHERE org_id = %s", (org_id,))
                total += self._enqueue_missing(conn, org_id, space)
        return total

    # ----------------------------------------------------------------- organizations

    def ensure_org(self, org_id: str) -> None:
        with self._writing(org_id) as conn:
            conn.execute("INSERT INTO orgs (org_id) VALUES (%s) ON CONFLICT DO NOTHING", (org_id,))

    def orgs(self) -> list[str]:
        def read() -> list[str]:
            with self._tx() as conn:
                return [r[0] for r in conn.execute("SELECT org_id FROM orgs ORDER BY org_id")]

        return self._retrying(read)

    def org_created(self) -> dict[str, datetime]:
        def read() -> dict[str, datetime]:
            with self._tx() as conn:
                return {r[0]: r[1] for r in conn.execute("SELECT org_id, created_at FROM orgs")}

        return self._retrying(read)

    def drop_org(self, org_id: str) -> None:
        with self._writing(org_id) as conn:
            # The org's row first, exclusively: a write in flight holds it (`_require_org`, `_hold_org`), so the
            # deletes below wait for it to commit and then delete what it wrote; a write that comes later waits
            # here and then finds no org (NotFoundError). Deleting the row last, without this, let a write that
            # held it commit its rows after the deletes had passed them: a same-named org created next saw them.
            conn.execute("SELECT 1 FROM orgs WHERE org_id = %s FOR UPDATE", (org_id,))
            # The logs refuse DELETE unless the transaction says it erases this org (migration 3).
            conn.execute("SELECT set_config('grandbo.erasing', %s, true)", (org_id,))
            for table in ORG_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE org_id = %s", (org_id,))
            if self._owner_dsn is None:  # only the owner's function can drop it: in this transaction, as before
                conn.execute("SELECT grandbo_vector_index(%s, false, 0, 0, '')", (org_id,))
        if self._owner_dsn is not None:
            self._drop_vector_index(org_id)

    def _drop_vector_index(self, org_id: str) -> None:
        """Drop a dropped org's HNSW index concurrently, after the drop committed, as the worker builds one: a
        plain DROP INDEX in the drop's transaction waited for the shared table's ACCESS EXCLUSIVE lock behind
        any build under way, and every org's vector reads and writes queued behind it (or, during the org's own
        build, the two deadlocked). While any build runs it gives up after 2 s and leaves the index, which
        matches no row (it is partial, by org; an org created again under the name uses it)."""
        if not ORG_ID_PATTERN.fullmatch(org_id):
            return
        name = _index_name(org_id)  # of a checked org id: safe to put in the statement
        try:
            with psycopg.connect(self._owner_dsn or "", autocommit=True) as conn:
                # A build of any org holds the table's SHARE UPDATE EXCLUSIVE lock, which this drop needs too: it
                # waits a moment, not for the build (minutes); an index left behind matches no row.
                conn.execute("SET lock_timeout = '2s'")
                if conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (name,)).fetchone() != (True,):
                    raise psycopg.errors.LockNotAvailable("its index is being built")
                try:
                    conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
                finally:
                    conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))
        except psycopg.Error as error:  # the org is gone; an index left behind matches nothing
            log.warning("store.hnsw_index_not_dropped", org_id=org_id, error=str(error).splitlines()[0])

    def _require_org(self, conn: psycopg.Connection[Any], org_id: str) -> str | None:
        """Lock the org's row and return its declared language. Writers of one org take turns (so its sequence
        numbers commit in order, which the in-process lexical index relies on, and a write never derives its
        terms in a language being replaced), readers never wait."""
        # NO KEY UPDATE: writers of the org wait for each other and for a drop (FOR UPDATE), not for `_hold_org`.
        found = conn.execute("SELECT language FROM orgs WHERE org_id = %s FOR NO KEY UPDATE", (org_id,)).fetchone()
        if found is None:
            raise NotFoundError(
                f"No organization {org_id!r} in this store. Create it first.", detail={"org_id": org_id}
            )
        return str(found[0]) if found[0] is not None else None

    @staticmethod
    def _hold_org(conn: psycopg.Connection[Any], org_id: str) -> bool:
        """Keep the org from being dropped until this transaction ends (a share lock of its row, which only a
        drop waits for); False when there is no such org (any more)."""
        return conn.execute("SELECT 1 FROM orgs WHERE org_id = %s FOR KEY SHARE", (org_id,)).fetchone() is not None

    def language(self, org_id: str) -> str | None:
        def read() -> str | None:
            with self._tx(org_id) as conn:
                found = conn.execute("SELECT language FROM orgs WHERE org_id = %s", (org_id,)).fetchone()
            if found is None:
                raise NotFoundError(f"No organization {org_id!r} in this store.", detail={"org_id": org_id})
            return str(found[0]) if found[0] is not None else None

        return self._retrying(read)

    def set_language(self, org_id: str, language: str | None) -> int:
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id)  # the org's writers wait until the new terms commit
            conn.execute(
                "WITH next AS (SELECT nextval('grandbo_epoch') AS epoch) "
                "UPDATE orgs SET language = %s, epoch = next.epoch FROM next WHERE org_id = %s",
                (language, org_id),
            )
            changed = len(self._rederive_org(conn, org_id, language))
        log.info("store.language_set", org_id=org_id, language=language or "auto", entries_changed=changed)
        return changed

    # ----------------------------------------------------------------- writes

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

    def _rows(self, conn: psycopg.Connection[Any], org_id: str, entry_ids: Sequence[str]) -> dict[str, projection.Row]:
        with conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s AND entry_id = ANY(%s)",
                (org_id, list(entry_ids)),
            )
            return {record["entry_id"]: _row_from_db(record) for record in cursor.fetchall()}

    _STEP = 500  # events per step of a large append (measured: 1,000 and 2,500 gained less)

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
        wrote_vectors = 0
        with self._writing(org_id) as conn:
            language = self._require_org(conn, org_id)  # the org's writer lock: a key is checked and recorded under it
            if idempotency is not None:
                if (earlier := self._idempotent(conn, org_id, idempotency.key)) is not None:
                    raise earlier
                conn.execute(
                    "INSERT INTO idempotency_keys (org_id, key, request_hash, entry_ids) VALUES (%s, %s, %s, %s)",
                    (org_id, idempotency.key, idempotency.request_hash,
                     _jsonb(list(dict.fromkeys(e.entry_id for e in events)))),
                )  # fmt: skip
            rows: dict[str, projection.Row | None] = dict(
                self._rows(conn, org_id, list(dict.fromkeys(event.entry_id for event in events)))
            )
            # The org's row lock is held: the next sequence numbers of this org are ours.
            (last,) = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM memory_events WHERE org_id = %s", (org_id,)
            ).fetchone()  # type: ignore[misc]
            # A large append goes in steps, in the one transaction: the server inserts one step's rows while
            # this process builds the next step's.
            with _StepWriter(conn) as writer:
                for start in range(0, len(events), self._STEP):
                    chunk = events[start : start + self._STEP]
                    seqs = range(last + 1 + start, last + 1 + start + len(chunk))
                    changed: dict[str, projection.Row] = {}
                    for seq, event in zip(seqs, chunk, strict=True):
                        row = projection.apply_new(
                            rows.get(event.entry_id), org_id, event, seq, self._terms_of, language
                        )
                        rows[event.entry_id] = changed[event.entry_id] = row
                    step = _Step.of(org_id, chunk, seqs, changed, vectors, space)
                    wrote_vectors += len(step.vectors)
                    writer.write(step)
        if wrote_vectors and self.auto_index:
            self._want_vector_index(org_id, wrote_vectors)
        return [projection.to_entry(row) for row in rows.values() if row is not None]

    def rebuild(self, org_id: str, *, replace: bool = False) -> RebuildResult:
        with self._writing(org_id) as conn:
            language = self._require_org(conn, org_id)
            rows: dict[str, projection.Row] = {}
            with conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(
                    "SELECT seq, entry_id, type, payload, at FROM memory_events WHERE org_id = %s ORDER BY seq",
                    (org_id,),
                )
                for record in cursor:
                    entry_id = record["entry_id"]
                    rows[entry_id] = projection.apply(
                        rows.get(entry_id),
                        org_id,
                        entry_id,
                        EventType(record["type"]),
                        record["payload"],
                        record["seq"],
                        record["at"],
                        self._terms_of,
                        language,
                    )
            with conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(f"SELECT {_ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s", (org_id,))
                live = {row["id"]: row for row in map(_row_from_db, cursor.fetchall())}
            result = projection.compare(live, rows)
            if result.identical or not replace:
                return result
            conn.execute("DELETE FROM memory_entries WHERE org_id = %s", (org_id,))
            conn.execute(_NEW_EPOCH + " WHERE org_id = %s", (org_id,))
            conn.cursor().executemany(
                f"INSERT INTO memory_entries ({_ENTRY_COLUMNS}) VALUES ({', '.join(['%s'] * 19)})",
                [_row_to_db(row) for row in rows.values()],
            )
        return dataclasses.replace(result, replaced=True)

    # ----------------------------------------------------------------- reads

    def get_many(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, Entry]:
        if not entry_ids:
            return {}

        def read() -> dict[str, Entry]:
            with self._tx(org_id) as conn:
                rows = self._rows(conn, org_id, entry_ids)
            return {entry_id: projection.to_entry(row) for entry_id, row in rows.items()}

        return self._retrying(read)

    def entries(self, org_id: str, *, include_inactive: bool = False) -> list[Entry]:
        status = "" if include_inactive else "AND status = 'active'"

        def read() -> list[Entry]:
            with self._tx(org_id) as conn, conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(
                    f"SELECT {_ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s {status} ORDER BY seq",
                    (org_id,),
                )
                return [_entry_from_db(r) for r in cursor.fetchall()]

        return self._retrying(read)

    def examples(self, org_id: str, content_type: str, limit: int) -> list[Entry]:
        def read() -> list[Entry]:
            with self._tx(org_id) as conn, conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(
                    f"SELECT {_ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s AND status = 'active' "
                    "AND kind = 'example' AND translate(btrim(meta->>'content_type'), %s, %s) = %s "
                    "ORDER BY occurred_at DESC, seq DESC LIMIT %s",
                    (org_id, string.ascii_uppercase, string.ascii_lowercase, content_type, limit),
                )
                return [_entry_from_db(r) for r in cursor.fetchall()]

        return self._retrying(read)

    def events(self, org_id: str, entry_id: str | None = None, since_seq: int = 0) -> list[Event]:
        query = (
            "SELECT seq, org_id, entry_id, type, payload, actor, at FROM memory_events WHERE org_id = %s AND seq > %s"
        )
        params: tuple[Any, ...] = (org_id, since_seq)
        if entry_id is not None:
            query += " AND entry_id = %s"
            params += (entry_id,)

        def read() -> list[Event]:
            with self._tx(org_id) as conn, conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(query + " ORDER BY seq", params)
                return [Event.model_validate(dict(r, type=EventType(r["type"]))) for r in cursor.fetchall()]

        return self._retrying(read)

    # ----------------------------------------------------------------- the change feed (ports.IndexFeed)

    _MARKS = (
        "SELECT (SELECT coalesce(max(seq), 0) FROM memory_entries WHERE org_id = %(org)s), "
        "(SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = %(org)s), "
        "(SELECT epoch FROM orgs WHERE org_id = %(org)s), "
        "(SELECT language FROM orgs WHERE org_id = %(org)s)"
    )

    def marks(self, org_id: str) -> Marks:
        """The org's watermarks. Writers of one org hold its `orgs` row lock, so its sequence numbers become
        visible in order and the highest one is a safe watermark. Vectors are searched here, in SQL, so the
        feed carries no vector watermark nor space."""

        def read() -> Marks:
            with self._tx(org_id) as conn:
                return self._marks(conn, org_id)

        return self._retrying(read)

    def _marks(self, conn: psycopg.Connection[Any], org_id: str) -> Marks:
        entry_seq, documents_seq, epoch, language = conn.execute(self._MARKS, {"org": org_id}).fetchone()  # type: ignore[misc]
        return Marks(entry_seq, 0, documents_seq, epoch, None, language)

    @contextmanager
    def snapshot(self, org_id: str) -> Iterator[_Snapshot]:
        with self._tx(org_id) as conn:
            yield _Snapshot(conn, org_id, self._marks(conn, org_id))

    def save_index(self, org_id: str, image: StoredIndex) -> None:
        at, space = image.marks, image.marks.space
        provider, model, dimension = (space.provider, space.model, space.dimension) if space else (None, None, None)
        with self._writing(org_id) as conn:
            # The org's writer lock first, as a purge takes it: a save that read the epoch before a purge moved it
            # would otherwise insert its image (with the purged entry's words) after the purge deleted the old one.
            try:
                self._require_org(conn, org_id)
            except NotFoundError:
                return  # dropped meanwhile: nothing to save
            conn.execute(
                "INSERT INTO index_images (org_id, epoch, language, provider, model, dimension, entry_seq, "
                "vector_seq, data, saved_at) SELECT org_id, %(epoch)s, %(language)s, %(provider)s, %(model)s, "
                "%(dimension)s, %(entry_seq)s, %(vector_seq)s, %(data)s, now() FROM orgs "
                "WHERE org_id = %(org)s AND epoch IS NOT DISTINCT FROM %(epoch)s "
                "ON CONFLICT (org_id) DO UPDATE SET epoch = excluded.epoch, language = excluded.language, "
                "provider = excluded.provider, model = excluded.model, dimension = excluded.dimension, "
                "entry_seq = excluded.entry_seq, vector_seq = excluded.vector_seq, data = excluded.data, "
                "saved_at = excluded.saved_at",
                {"org": org_id, "epoch": at.epoch, "language": at.language, "provider": provider, "model": model,
                 "dimension": dimension, "entry_seq": at.entry_seq, "vector_seq": at.vector_seq, "data": image.data},
            )  # fmt: skip

    def any_vector(self, org_id: str, space: EmbeddingSpace) -> bool:
        def read() -> bool:
            with self._tx(org_id) as conn:
                row = conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM entry_vectors v JOIN memory_entries e USING (org_id, entry_id) "
                    "WHERE v.org_id = %s AND v.provider = %s AND v.model = %s AND e.status = 'active')",
                    (org_id, space.provider, space.model),
                ).fetchone()
            return bool(row[0]) if row else False

        return self._retrying(read)

    def embed_backlog(self, org_id: str) -> int:
        def read() -> int:
            with self._tx(org_id) as conn:
                row = conn.execute("SELECT count(*) FROM embed_outbox WHERE org_id = %s", (org_id,)).fetchone()
            return int(row[0]) if row else 0

        return self._retrying(read)

    def vector_search(
        self,
        org_id: str,
        space: EmbeddingSpace,
        vector: npt.NDArray[np.float32],
        limit: int,
        min_similarity: float,
    ) -> list[VectorHit]:
        query = np.asarray(vector, dtype=np.float32)

        def read() -> list[VectorHit]:
            with self._tx(
                org_id, hnsw__ef_search=str(max(self.ef_search, limit)), hnsw__iterative_scan="relaxed_order"
            ) as conn:
                # A plain ORDER BY ... LIMIT lets an HNSW index serve the scan; the floor is applied outside.
                # The inner query takes a few extra rows so that ties at the last place are broken by
                # entry id, like the embedded store does. The store's recorded space is checked in the
                # same statement: vectors of another space never answer.
                rows = conn.execute(
                    "SELECT entry_id, distance FROM ("
                    "  SELECT entry_id, embedding <=> %(q)s AS distance FROM entry_vectors"
                    "  WHERE org_id = %(org)s AND provider = %(provider)s AND model = %(model)s"
                    "  ORDER BY embedding <=> %(q)s LIMIT %(inner)s"
                    ") nearest WHERE distance <= %(max_distance)s AND EXISTS (SELECT 1 FROM memory_entries e"
                    "  WHERE e.org_id = %(org)s AND e.entry_id = nearest.entry_id AND e.status = 'active') AND ("
                    "  SELECT count(*) FROM store_meta WHERE (key, value) IN "
                    "  (('provider', %(provider)s), ('model', %(model)s), ('dimension', %(dimension)s))) = 3 "
                    f"ORDER BY round((1 - distance)::numeric, {VECTOR_TIE_DIGITS}) DESC, entry_id LIMIT %(limit)s",
                    {
                        "q": query,
                        "org": org_id,
                        "provider": space.provider,
                        "model": space.model,
                        "dimension": str(space.dimension),
                        "limit": limit,
                        "inner": limit + 16,
                        "max_distance": 1.0 - min_similarity,
                    },
                ).fetchall()
            return [VectorHit(entry_id, 1.0 - float(distance)) for entry_id, distance in rows]

        return self._retrying(read)

    def explain_vector_search(self, org_id: str, vector: npt.NDArray[np.float32], limit: int = 25) -> str:
        """The query plan of the vector arm for this org (to check which index serves it)."""
        space = self.space()
        assert space is not None
        with self._tx(org_id) as conn:
            rows = conn.execute(
                "EXPLAIN SELECT entry_id, embedding <=> %(q)s AS distance FROM entry_vectors "
                "WHERE org_id = %(org)s AND provider = %(provider)s AND model = %(model)s "
                "ORDER BY embedding <=> %(q)s LIMIT %(limit)s",
                {
                    "q": np.asarray(vector, dtype=np.float32),
                    "org": org_id,
                    "provider": space.provider,
                    "model": space.model,
                    "limit": limit,
                },
            ).fetchall()
        return "\n".join(r[0] for r in rows)

    def vectors(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        space = self.space()
        if space is None or not entry_ids:
            return {}

        def read() -> dict[str, npt.NDArray[np.float32]]:
            with self._tx(org_id) as conn:
                rows = conn.execute(
                    "SELECT v.entry_id, v.embedding FROM entry_vectors v "
                    "JOIN memory_entries e USING (org_id, entry_id) "
                    "WHERE v.org_id = %s AND v.provider = %s AND v.model = %s AND v.dimension = %s "
                    "AND v.content_hash = e.content_hash AND v.entry_id = ANY(%s)",
                    (org_id, space.provider, space.model, space.dimension, list(entry_ids)),
                ).fetchall()
            return {entry_id: np.asarray(vector.to_numpy(), dtype=np.float32) for entry_id, vector in rows}

        return self._retrying(read)

    def corpus_stats(self, org_id: str, max_attempts: int) -> CorpusStats:
        space = self.space()

        def read() -> CorpusStats:
            with self._tx(org_id) as conn:
                total = conn.execute(
                    "SELECT count(*) FROM memory_entries WHERE org_id = %s AND status = 'active'", (org_id,)
                ).fetchone()[0]  # type: ignore[index]
                readable = stale = 0
                if space is not None:
                    readable, stale = conn.execute(
                        "SELECT count(*) FILTER (WHERE v.provider = %(p)s AND v.model = %(m)s AND v.dimension = %(d)s "
                        "                          AND v.content_hash = e.content_hash), "
                        "       count(*) FILTER (WHERE NOT (v.provider = %(p)s AND v.model = %(m)s "
                        "                                   AND v.dimension = %(d)s)) "
                        "FROM memory_entries e JOIN entry_vectors v USING (org_id, entry_id) "
                        "WHERE e.org_id = %(org)s AND e.status = 'active'",
                        {"p": space.provider, "m": space.model, "d": space.dimension, "org": org_id},
                    ).fetchone()  # type: ignore[misc]
                pending, failed = conn.execute(
                    "SELECT count(*) FILTER (WHERE attempts < %s), count(*) FILTER (WHERE attempts >= %s) "
                    "FROM embed_outbox WHERE org_id = %s",
                    (max_attempts, max_attempts, org_id),
                ).fetchone()  # type: ignore[misc]
            return CorpusStats(
                org_id=org_id,
                total=total,
                readable=readable,
                unreadable=total - readable,
                pending=pending,
                failed=failed,
                stale=stale,
                space=space,
            )

        return self._retrying(read)

    def embed_jobs(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, JobState]:
        def read() -> dict[str, JobState]:
            with self._tx(org_id) as conn:
                rows = conn.execute(
                    "SELECT entry_id, attempts, last_error, available_at FROM embed_outbox "
                    "WHERE org_id = %s AND entry_id = ANY(%s)",
                    (org_id, list(entry_ids)),
                ).fetchall()
            return {r[0]: JobState(r[0], r[1], r[2], r[3]) for r in rows}

        return self._retrying(read)

    # ----------------------------------------------------------------- documents

    def put_documents(
        self, org_id: str, writes: Sequence[DocumentWrite], actor: str, work: Sequence[NewWork] = ()
    ) -> list[Document]:
        check_documents(writes)
        out: list[Document] = []
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id)
            self._record_work(conn, org_id, work)  # the write-behinds it acknowledges, in its transaction
            for write in writes:
                row = conn.execute(
                    "SELECT version FROM documents WHERE org_id = %s AND collection = %s AND doc_id = %s FOR UPDATE",
                    (org_id, write.collection, write.doc_id),
                ).fetchone()
                found = row[0] if row else None
                if write.expected_version is not None and found != (write.expected_version or None):
                    raise document_conflict(org_id, write, found)
                (now,) = conn.execute(
                    "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, now()) RETURNING at",
                    (org_id, write.collection, write.doc_id, write.event, _jsonb(write.data), actor),
                ).fetchone()  # type: ignore[misc]
                if write.data is None:
                    conn.execute(
                        "DELETE FROM documents WHERE org_id = %s AND collection = %s AND doc_id = %s",
                        (org_id, write.collection, write.doc_id),
                    )
                    continue
                version = (found or 0) + 1
                conn.execute(
                    "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (org_id, collection, doc_id) DO UPDATE SET "
                    "ref = excluded.ref, data = excluded.data, version = excluded.version, "
                    "updated_at = excluded.updated_at",
                    (org_id, write.collection, write.doc_id, write.ref, _jsonb(write.data), version, now),
                )
                out.append(Document(write.collection, write.doc_id, write.ref, write.data, version, now))
        return out

    def get_document(self, org_id: str, collection: str, doc_id: str) -> Document | None:
        found = self._documents(org_id, collection, "AND doc_id = %s", (doc_id,))
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
        return self._documents(org_id, collection, "AND ref = ANY(%s)", (list(refs),), order, keys)

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
        where, params = "AND updated_at < %s", tuple[Any, ...]((before,))
        if after is not None:
            where, params = f"{where} AND (updated_at, doc_id) > (%s, %s)", (before, *after)
        order = f"updated_at, doc_id LIMIT {int(limit)}"  # migration 10's index, in its order
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
        if keys is not None:
            asked = tuple(part for key in keys for part in (key, key))
            pairs = ", ".join("%s::text, data -> %s::text" for _ in keys)
            data = f"CASE WHEN jsonb_typeof(data) = 'object' THEN jsonb_build_object({pairs}) ELSE data END"

        def read() -> list[Document]:
            with self._tx(org_id) as conn:
                rows = conn.execute(
                    f"SELECT doc_id, ref, {data}, version, updated_at FROM documents AS d "
                    f"WHERE org_id = %s AND collection = %s {where} ORDER BY {order}",
                    (*asked, org_id, collection, *params),
                ).fetchall()
            if keys is None:
                return [Document(collection, *row) for row in rows]
            return [Document(collection, doc_id, ref, picked(held), *rest) for doc_id, ref, held, *rest in rows]

        return self._retrying(read)

    # One collection's version: one read of the (org, collection, seq) index. Several are asked for one by one:
    # `collection = ANY(...)` is planned as a backward walk of the primary key past every newer event.
    _VERSION_OF = "(SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = %s AND collection = %s)"

    def documents_version(self, org_id: str, collections: Sequence[str] | None = None) -> int:
        if collections is not None:
            return max(self.documents_stamp(org_id, collections)[1], default=0)

        def read() -> int:
            with self._tx(org_id) as conn:
                row = conn.execute(
                    "SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = %s", (org_id,)
                ).fetchone()
            return int(row[0]) if row else 0

        return self._retrying(read)

    def documents_stamp(self, org_id: str, collections: Sequence[str]) -> tuple[int | None, list[int]]:
        columns = ", ".join(["(SELECT epoch FROM orgs WHERE org_id = %s)", *[self._VERSION_OF] * len(collections)])
        params = [org_id, *[part for collection in collections for part in (org_id, collection)]]

        def read() -> tuple[int | None, list[int]]:
            with self._tx(org_id) as conn:
                epoch, *versions = conn.execute(f"SELECT {columns}", params).fetchone()  # type: ignore[misc]
            return (int(epoch) if epoch is not None else None), [int(v) for v in versions]

        return self._retrying(read)

    def changed_documents(self, org_id: str, collection: str, after: int) -> tuple[list[Document], list[str]]:
        def read() -> tuple[list[Document], list[str]]:
            with self._tx(org_id) as conn:
                ids = list(
                    dict.fromkeys(  # each once, in the order they were written
                        r[0]
                        for r in conn.execute(
                            "SELECT doc_id FROM document_events WHERE org_id = %s AND collection = %s AND seq > %s "
                            "ORDER BY seq",
                            (org_id, collection, after),
                        )
                    )
                )
                rows = conn.execute(
                    "SELECT doc_id, ref, data, version, updated_at FROM documents "
                    "WHERE org_id = %s AND collection = %s AND doc_id = ANY(%s) ORDER BY doc_id",
                    (org_id, collection, ids),
                ).fetchall()
            found = [Document(collection, *row) for row in rows]
            present = {doc.doc_id for doc in found}
            return found, [doc_id for doc_id in ids if doc_id not in present]

        return self._retrying(read)

    def document_history(self, org_id: str, collection: str, doc_id: str) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            with self._tx(org_id) as conn:
                rows = conn.execute(
                    "SELECT seq, type, data, actor, at FROM document_events "
                    "WHERE org_id = %s AND collection = %s AND doc_id = %s ORDER BY seq",
                    (org_id, collection, doc_id),
                ).fetchall()
            return [{"seq": s, "type": t, "data": d, "actor": a, "at": at.isoformat()} for s, t, d, a, at in rows]

        return self._retrying(read)

    def document_log(self, org_id: str) -> DocumentLog:
        def read() -> DocumentLog:
            with self._tx(org_id) as conn:
                events = conn.execute(
                    "SELECT collection, doc_id, type, data, actor, at FROM document_events WHERE org_id = %s "
                    "ORDER BY seq",
                    (org_id,),
                ).fetchall()
                documents = conn.execute(
                    "SELECT collection, doc_id, ref, data, version, updated_at FROM documents WHERE org_id = %s "
                    "ORDER BY collection, doc_id",
                    (org_id,),
                ).fetchall()
            return DocumentLog([DocumentEvent(*row) for row in events], [Document(*row) for row in documents])

        return self._retrying(read)

    def load_documents(self, org_id: str, log: DocumentLog) -> int:
        check_documents([DocumentWrite(e.collection, e.doc_id, e.data, e.type) for e in log.events])
        check_documents([DocumentWrite(d.collection, d.doc_id, d.data, "load", d.ref) for d in log.documents])
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id)
            if conn.execute(
                "SELECT 1 FROM document_events WHERE org_id = %s UNION ALL SELECT 1 FROM documents WHERE org_id = %s",
                (org_id, org_id),
            ).fetchone():
                raise not_empty(org_id, "documents")
            cursor = conn.cursor()
            cursor.executemany(
                "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(org_id, e.collection, e.doc_id, e.type, _jsonb(e.data), e.actor, e.at) for e in log.events],
            )
            cursor.executemany(
                "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(org_id, d.collection, d.doc_id, d.ref, _jsonb(d.data), d.version, d.updated_at)
                 for d in log.documents],
            )  # fmt: skip
        return len(log.events)

    # ----------------------------------------------------------------- erasure

    def erase_document_text(
        self, org_id: str, pattern: re.Pattern[str], audit: DocumentWrite, actor: str, *, only_if_found: bool = False
    ) -> tuple[int, int]:
        check_documents([audit])
        counts = [0, 0]
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id)
            conn.execute("SELECT set_config('grandbo.erasing', %s, true)", (org_id,))  # migration 3
            for index, (table, key) in enumerate((("documents", "collection, doc_id"), ("document_events", "seq"))):
                rows = conn.execute(f"SELECT {key}, doc_id, data FROM {table} WHERE org_id = %s", (org_id,))
                for record in rows.fetchall():
                    if (erased := erase_text(record[-1], pattern, own_id=record[-2])) != record[-1]:
                        where = " AND ".join(f"{column} = %s" for column in key.split(", "))
                        conn.execute(f"UPDATE {table} SET data = %s WHERE org_id = %s AND {where}",
                                     (_jsonb(erased), org_id, *record[:-2]))  # fmt: skip
                        counts[index] += 1
            if only_if_found and counts == [0, 0]:
                return 0, 0
            conn.execute(
                "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
                "VALUES (%s, %s, %s, %s, %s, %s, now())",
                (org_id, audit.collection, audit.doc_id, audit.event, _jsonb(audit.data), actor),
            )
            conn.execute(
                "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
                "VALUES (%s, %s, %s, %s, %s, 1, now())",
                (org_id, audit.collection, audit.doc_id, audit.ref, _jsonb(audit.data)),
            )
        self._vacuum("documents", "document_events")
        return counts[0], counts[1]

    def _vacuum(self, *tables: str) -> None:
        """Prune the dead row versions an erasure left (they still hold the old text) and free their space. The
        runtime role may (MAINTAIN, granted by `grandbo migrate` on Postgres 17+); without it, autovacuum will."""
        try:
            with psycopg.connect(self._dsn, autocommit=True) as conn:
                conn.execute(f"VACUUM {', '.join(tables)}")  # fixed table names
        except psycopg.Error as error:
            log.warning("store.vacuum_skipped", tables=list(tables), error=str(error).splitlines()[0])

    def purge(self, org_id: str, entry_id: str, reason: str, actor: str) -> Entry:
        purged = self._purge(org_id, entry_id, reason, actor)
        self._vacuum("memory_events", "memory_entries", "entry_vectors", "embed_outbox")
        self._vacuum("index_images")  # apart: a store granted before images existed may not MAINTAIN it yet
        return purged

    def _purge(self, org_id: str, entry_id: str, reason: str, actor: str) -> Entry:
        at = utcnow()
        with self._writing(org_id) as conn:
            language = self._require_org(conn, org_id)
            # The log accepts UPDATE of this org's rows only inside an erasure (migration 3).
            conn.execute("SELECT set_config('grandbo.erasing', %s, true)", (org_id,))
            row = self._rows(conn, org_id, [entry_id]).get(entry_id)
            if row is None:
                raise NotFoundError(
                    f"No entry {entry_id!r} in org {org_id!r}.", detail={"entry_id": entry_id, "org_id": org_id}
                )
            for seq, kind, payload in conn.execute(
                "SELECT seq, type, payload FROM memory_events WHERE org_id = %s AND entry_id = %s ORDER BY seq",
                (org_id, entry_id),
            ).fetchall():
                erased = projection.redacted_payload(EventType(kind), payload)
                if erased is not None:
                    conn.execute(
                        "UPDATE memory_events SET payload = %s WHERE org_id = %s AND seq = %s",
                        (_jsonb(erased), org_id, seq),
                    )
            (last,) = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM memory_events WHERE org_id = %s", (org_id,)
            ).fetchone()  # type: ignore[misc]
            payload = {"reason": reason}
            conn.execute(
                "INSERT INTO memory_events (org_id, seq, entry_id, type, payload, actor, at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (org_id, last + 1, entry_id, EventType.PURGED.value, _jsonb(payload), actor, at),
            )
            purged = projection.apply(
                row, org_id, entry_id, EventType.PURGED, payload, last + 1, at, self._terms_of, language
            )
            conn.execute("DELETE FROM memory_entries WHERE org_id = %s AND entry_id = %s", (org_id, entry_id))
            conn.execute(
                f"INSERT INTO memory_entries ({_ENTRY_COLUMNS}) VALUES ({', '.join(['%s'] * 19)})", _row_to_db(purged)
            )
            conn.execute("DELETE FROM entry_vectors WHERE org_id = %s AND entry_id = %s", (org_id, entry_id))
            conn.execute("DELETE FROM embed_outbox WHERE org_id = %s AND entry_id = %s", (org_id, entry_id))
            conn.execute("DELETE FROM index_images WHERE org_id = %s", (org_id,))  # it held the entry's terms
            conn.execute(_NEW_EPOCH + " WHERE org_id = %s", (org_id,))
        return projection.to_entry(purged)

    # ----------------------------------------------------------------- the embed outbox

    def outbox_depth(self) -> int:
        def read() -> int:
            # One statement whatever the number of orgs (`/readyz` asks it without a key): the owner's function
            # counts through row-level security and hands back the number alone (migration 11).
            with self._tx() as conn:
                return int(conn.execute("SELECT grandbo_outbox_depth()").fetchone()[0])  # type: ignore[index]

        return self._retrying(read)

    def readiness(self) -> tuple[int, int]:
        def read() -> tuple[int, int]:
            with self._tx() as conn:  # store-wide: grandbo_outbox_depth() refuses an org's transaction
                row = conn.execute("SELECT (SELECT max(version) FROM schema_migrations), grandbo_outbox_depth()")
                schema, depth = row.fetchone()  # type: ignore[misc]
            return int(schema), int(depth)

        return self._retrying(read)

    def claim_jobs(
        self, limit: int, max_attempts: int, org_id: str | None = None, lease_seconds: float = 300.0
    ) -> list[EmbedJob]:
        # One transaction, row-level security switched org by org (grandbo.org_id). The orgs' ready jobs
        # are read in (available_at, job_id) order from embed_outbox_ready, never sorted: without fresh
        # statistics after a bulk import the planner would sort the org's whole backlog (63 ms at 100,000
        # jobs, against 0.3 ms), so sorting is switched off for the reads.
        with self._writing(None) as conn:
            orgs = [org_id] if org_id else [row[0] for row in conn.execute("SELECT org_id FROM orgs")]
            conn.execute("SELECT set_config('enable_sort', 'off', true)")

            def fetch(
                requests: Mapping[str, tuple[int, tuple[Any, ...] | None]],
            ) -> dict[str, list[queue.Candidate]]:
                cursors = []
                with conn.pipeline():  # one round trip for every org asked
                    for org, (count, after) in requests.items():
                        conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
                        cursors.append((org, conn.execute(
                            f"SELECT available_at, job_id FROM embed_outbox WHERE org_id = %s AND {_READY} "
                            "AND (available_at, job_id) > (%s::timestamptz, %s::bigint) "
                            "ORDER BY available_at, job_id LIMIT %s",
                            (org, max_attempts, *(after or ("-infinity", -1)), count),
                        )))  # fmt: skip
                return {
                    org: [queue.Candidate(org, (at, job), job) for at, job in cur.fetchall()] for org, cur in cursors
                }

            chosen, cursor = queue.fair_claim(orgs, limit, fetch, self._claim_after)
            conn.execute("SELECT set_config('enable_sort', 'on', true)")
            if org_id is None and cursor is not None:
                self._claim_after = cursor
            order = {candidate.job_id: n for n, candidate in enumerate(chosen)}
            by_org: dict[str, list[int]] = {}
            for candidate in chosen:
                by_org.setdefault(candidate.org_id, []).append(candidate.job_id)
            jobs = self._lease(conn, by_org, max_attempts, lease_seconds)
        return sorted(jobs, key=lambda job: order[job.job_id])  # as dealt: every org in the first batch

    def _lease(
        self, conn: psycopg.Connection[Any], by_org: Mapping[str, list[int]], max_attempts: int, lease_seconds: float
    ) -> list[EmbedJob]:
        """Lease those of each org's `job_ids` that no other worker holds (SKIP LOCKED: concurrent workers each
        take different jobs and none waits for another) and are still ready; the jobs with their text. Two
        pipelined round trips whatever the number of orgs (a claim serves up to one org per job)."""
        with conn.pipeline():
            leases = {}
            for org, job_ids in by_org.items():
                conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
                leases[org] = conn.execute(
                    "UPDATE embed_outbox o SET claimed_until = now() + make_interval(secs => %s) FROM ("
                    f"  SELECT job_id FROM embed_outbox WHERE org_id = %s AND job_id = ANY(%s) AND {_READY} "
                    "  FOR UPDATE SKIP LOCKED"
                    ") ready WHERE o.org_id = %s AND o.job_id = ready.job_id "
                    "RETURNING o.job_id, o.entry_id, o.attempts",
                    (lease_seconds, org, job_ids, max_attempts, org),
                )
        claimed = {org: rows for org, cursor in leases.items() if (rows := cursor.fetchall())}
        with conn.pipeline():
            reads = {}
            for org, rows in claimed.items():
                conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
                reads[org] = conn.cursor(row_factory=dict_row).execute(
                    f"SELECT {_ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s AND entry_id = ANY(%s)",
                    (org, [entry_id for _, entry_id, _ in rows]),
                )
        jobs: list[EmbedJob] = []
        for org, rows in claimed.items():
            try:
                found = {record["entry_id"]: _row_from_db(record) for record in reads[org].fetchall()}
            except (psycopg.DataError, ValueError):  # a row the driver refuses: read them one by one
                conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
                found = self._readable_rows(conn, org, [entry_id for _, entry_id, _ in rows])
            jobs.extend(self._jobs_of(conn, org, rows, found))
        return jobs

    def _jobs_of(
        self,
        conn: psycopg.Connection[Any],
        org: str,
        claimed: Sequence[tuple[Any, ...]],
        rows: Mapping[str, projection.Row],
    ) -> list[EmbedJob]:
        """The leased jobs whose entry is active; a job whose entry is gone is dropped, one whose row cannot
        be read fails for good."""
        jobs, gone = [], []
        for job_id, entry_id, attempts in claimed:
            row = rows.get(entry_id)
            if row is _UNREADABLE:
                continue
            if row is None or row["status"] != Status.ACTIVE.value:
                gone.append(job_id)
                continue
            jobs.append(EmbedJob(job_id, org, entry_id, row["content_hash"], projection.embed_text(row), attempts))
        unreadable = [job_id for job_id, entry_id, _ in claimed if rows.get(entry_id) is _UNREADABLE]
        if gone or unreadable:
            conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
        if gone:
            conn.execute("DELETE FROM embed_outbox WHERE org_id = %s AND job_id = ANY(%s)", (org, gone))
        if unreadable:
            conn.execute(
                "UPDATE embed_outbox SET attempts = 1000000, claimed_until = NULL, last_error = %s "
                "WHERE org_id = %s AND job_id = ANY(%s)",
                (_UNREADABLE["error"], org, unreadable),
            )
        return jobs

    def _readable_rows(
        self, conn: psycopg.Connection[Any], org_id: str, entry_ids: Sequence[str]
    ) -> dict[str, projection.Row]:
        """`_rows`, but a row that cannot be read (a value the driver refuses, written before the write seam
        checked it) maps to `_UNREADABLE` instead of failing every other job of the claim, and of other orgs."""
        try:
            with conn.transaction():  # a savepoint: the claim survives a refused read
                return self._rows(conn, org_id, entry_ids)
        except (psycopg.DataError, ValueError):
            pass
        rows: dict[str, projection.Row] = {}
        for entry_id in entry_ids:
            try:
                with conn.transaction():
                    rows.update(self._rows(conn, org_id, [entry_id]))
            except (psycopg.DataError, ValueError) as error:
                log.error("store.row_unreadable", org_id=org_id, entry_id=entry_id, error=str(error)[:200])
                rows[entry_id] = _UNREADABLE
        return rows

    def complete_jobs(self, space: EmbeddingSpace, results: Sequence[EmbedResult]) -> int:
        written = 0
        by_org: dict[str, list[EmbedResult]] = {}
        for result in results:
            if result.vector is not None:
                by_org.setdefault(result.job.org_id, []).append(result)
        for org_id, group in by_org.items():
            try:
                written += self._complete_org(space, org_id, group)
            except (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError) as error:
                # One org's refused write must not stop the others; its jobs come back when the lease ends.
                log.error("store.complete_failed", org_id=org_id, jobs=len(group), error=str(error)[:200])
        return written

    def _complete_org(self, space: EmbeddingSpace, org_id: str, group: Sequence[EmbedResult]) -> int:
        with self._writing(org_id) as conn:
            if not self._hold_org(conn, org_id):
                return 0  # dropped meanwhile: its jobs went with it
            # The space cannot change until this commits: ROW SHARE waits for `switch_space`'s EXCLUSIVE lock and
            # holds it off. (Not SELECT ... FOR SHARE: that is filtered by store_meta's UPDATE policy, which an
            # org's transaction does not pass.)
            conn.execute("LOCK TABLE store_meta IN ROW SHARE MODE")
            current = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
            if (current.get("provider"), current.get("model"), current.get("dimension")) != (
                space.provider,
                space.model,
                str(space.dimension),
            ):
                raise EntryStateError(
                    f"The store's embedding space changed while vectors of {space} were being computed; "
                    "they were not written. Restart the worker.",
                    detail={"worker_space": str(space)},
                )
            # Only for entries still active with the text the vector was computed from. FOR SHARE waits for
            # a retire or correction of the row in flight and reads the row it commits (so a vector never
            # lands on an entry retired meanwhile); the write path deletes a retired entry's vector in its
            # own transaction, after which this one finds the row no longer active.
            current_hash = dict(
                conn.execute(
                    "SELECT entry_id, content_hash FROM memory_entries WHERE org_id = %s AND status = 'active' "
                    "AND entry_id = ANY(%s) FOR SHARE",
                    (org_id, [r.job.entry_id for r in group]),
                ).fetchall()
            )
            fresh = [r for r in group if current_hash.get(r.job.entry_id) == r.job.content_hash]
            conn.cursor().executemany(
                "INSERT INTO entry_vectors (org_id, entry_id, provider, model, dimension, content_hash, "
                "embedded_at, embedding) VALUES (%s, %s, %s, %s, %s, %s, now(), %s) "
                "ON CONFLICT (org_id, entry_id) DO UPDATE SET "
                "provider = excluded.provider, model = excluded.model, dimension = excluded.dimension, "
                "content_hash = excluded.content_hash, embedded_at = excluded.embedded_at, "
                "embedding = excluded.embedding",
                [
                    (
                        org_id,
                        r.job.entry_id,
                        space.provider,
                        space.model,
                        space.dimension,
                        r.job.content_hash,
                        np.asarray(r.vector, dtype=np.float32),
                    )
                    for r in fresh
                ],
            )
            conn.execute(
                "DELETE FROM embed_outbox WHERE org_id = %s AND job_id = ANY(%s)",
                (org_id, [r.job.job_id for r in group]),
            )
        if fresh:
            self._want_vector_index(org_id, len(fresh))
        return len(fresh)

    def fail_jobs(self, jobs: Sequence[EmbedJob], error: str, retry_at: datetime, *, final: bool = False) -> None:
        for org_id in {job.org_id for job in jobs}:
            with self._writing(org_id) as conn:
                conn.execute(
                    "UPDATE embed_outbox SET attempts = CASE WHEN %s THEN 1000000 ELSE attempts + 1 END, "
                    "last_error = %s, available_at = %s, claimed_until = NULL WHERE org_id = %s AND job_id = ANY(%s)",
                    (final, error[:2000], retry_at, org_id, [job.job_id for job in jobs if job.org_id == org_id]),
                )

    def release_jobs(self, jobs: Sequence[EmbedJob]) -> None:
        for org_id in {job.org_id for job in jobs}:
            with self._writing(org_id) as conn:
                conn.execute(
                    "UPDATE embed_outbox SET claimed_until = NULL WHERE org_id = %s AND job_id = ANY(%s)",
                    (org_id, [job.job_id for job in jobs if job.org_id == org_id]),
                )

    def retry_failed(self, org_id: str | None = None) -> int:
        count = 0
        for org in [org_id] if org_id else self.orgs():
            with self._writing(org) as conn:
                count += conn.execute(
                    "UPDATE embed_outbox SET attempts = 0, available_at = now(), claimed_until = NULL "
                    "WHERE org_id = %s AND (attempts > 0 OR claimed_until IS NOT NULL)",
                    (org,),
                ).rowcount
        return count

    def enqueue_missing(self, org_id: str | None = None) -> int:
        space = self.space()
        if space is None:
            return 0
        count = 0
        for org in [org_id] if org_id else self.orgs():
            with self._writing(org) as conn:
                count += self._enqueue_missing(conn, org, space)
        return count

    def _enqueue_missing(self, conn: psycopg.Connection[Any], org_id: str, space: EmbeddingSpace) -> int:
        if not self._hold_org(conn, org_id):
            return 0
        return conn.execute(
            "INSERT INTO embed_outbox (org_id, entry_id, content_hash) "
            "SELECT e.org_id, e.entry_id, e.content_hash FROM memory_entries e "
            "LEFT JOIN entry_vectors v ON v.org_id = e.org_id AND v.entry_id = e.entry_id "
            "  AND v.provider = %s AND v.model = %s AND v.dimension = %s AND v.content_hash = e.content_hash "
            "WHERE e.org_id = %s AND e.status = 'active' AND v.entry_id IS NULL "
            "ON CONFLICT (org_id, entry_id) DO NOTHING",
            (space.provider, space.model, space.dimension, org_id),
        ).rowcount

    # ----------------------------------------------------------------- HNSW per organization
    #
    # A write never builds an index: building one inside a transaction (all the runtime role could do)
    # holds a SHARE lock on entry_vectors for the whole build, and every org's vector writes wait for it.
    # The write path records that an org wants its index (`_want_vector_index`); the worker's maintenance
    # builds it with CREATE INDEX CONCURRENTLY as the owner role (`build_vector_indexes`), which takes no
    # lock that a write waits for. Until the index exists, recall scans the org's vectors exactly.

    def _want_vector_index(self, org_id: str, written: int) -> None:
        """Record that the org wants its HNSW index, once it holds `hnsw_threshold` vectors and has none.

        After a count short of the threshold, the org is not counted again until this process has written
        the vectors it lacked (the count read up to 20,000 rows after every worker batch: a quarter of the
        worker's time on a growing org); vectors other processes write are counted by them.
        """
        short = self._short_of_index.get(org_id, 0) - written
        if short > 0:
            self._short_of_index[org_id] = short
            return
        self._short_of_index.pop(org_id, None)
        name = _index_name(org_id)
        with self._tx(org_id) as conn:
            settled = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = %s) "
                "OR EXISTS (SELECT 1 FROM orgs WHERE org_id = %s AND vector_index_wanted_at IS NOT NULL)",
                (name, org_id),
            ).fetchone()[0]  # type: ignore[index]
            if settled:
                return
            count = self._count_vectors(conn, org_id)
        if count < self.hnsw_threshold:
            self._short_of_index[org_id] = self.hnsw_threshold - count
            return
        with self._writing(org_id) as conn:
            conn.execute(
                "UPDATE orgs SET vector_index_wanted_at = now() WHERE org_id = %s AND vector_index_wanted_at IS NULL",
                (org_id,),
            )
        log.info("store.hnsw_index_wanted", org_id=org_id, vectors=count, builder="the worker's maintenance")

    def _count_vectors(self, conn: psycopg.Connection[Any], org_id: str) -> int:
        # Counting stops at the threshold: a large org is not counted in full after every write.
        return int(
            conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM entry_vectors WHERE org_id = %s LIMIT %s) sample",
                (org_id, self.hnsw_threshold),
            ).fetchone()[0]  # type: ignore[index]
        )

    def build_vector_indexes(self) -> list[str]:
        with self._tx() as conn:
            wanted = [
                row[0]
                for row in conn.execute(
                    "SELECT org_id FROM orgs WHERE vector_index_wanted_at IS NOT NULL ORDER BY vector_index_wanted_at"
                )
            ]
        if wanted and self._owner_dsn is None:
            for org_id in set(wanted) - self._index_waits_told:
                log.warning(
                    "store.hnsw_index_needs_owner",
                    org_id=org_id,
                    remedy="give the worker GRANDBO_MIGRATE_DATABASE_URL (the owner role) so that it builds the "
                    "index concurrently; until then recall searches the org's vectors exactly",
                )
            self._index_waits_told.update(wanted)
            return []
        return [org_id for org_id in wanted if self._build_concurrently(org_id)]

    def _build_concurrently(self, org_id: str) -> bool:
        """Build the org's index as the owner, outside any transaction, and clear its request; False when
        another worker is building it. An index a killed build left invalid is dropped and built again."""
        if self._owner_dsn is None or not ORG_ID_PATTERN.fullmatch(org_id):
            return False
        name = _index_name(org_id)  # of a checked org id: safe to put in the statement
        with psycopg.connect(self._owner_dsn, autocommit=True) as conn:
            if not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (name,)).fetchone()[0]:  # type: ignore[index]
                return False
            try:
                valid = conn.execute(
                    "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
                    (name,),
                ).fetchone()
                if valid is None or not valid[0]:
                    log.info("store.hnsw_index_building", org_id=org_id, concurrently=True, rebuild=valid is not None)
                    if valid is not None:
                        conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
                    conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (self.hnsw_build_memory,))
                    conn.execute(
                        f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{name}" ON entry_vectors '
                        f"USING hnsw (embedding vector_cosine_ops) "
                        f"WITH (m = {self.hnsw_m}, ef_construction = {self.hnsw_ef_construction}) "
                        f"WHERE org_id = '{org_id}'"
                    )
                    conn.execute("ANALYZE entry_vectors")  # the planner must know the org is large now
            finally:
                conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))
        with self._writing(org_id) as conn:
            conn.execute("UPDATE orgs SET vector_index_wanted_at = NULL WHERE org_id = %s", (org_id,))
        return True

    def ensure_vector_index(self, org_id: str, *, force: bool = False) -> bool:
        """Build the org's HNSW index now if it holds `hnsw_threshold` vectors (any number with `force`);
        return whether it exists. For operators and bulk loads (`Grandbo.build_vector_index`), never a write.

        The index is partial (`WHERE org_id = ...`): small orgs keep exact scans, a large org gets
        approximate search over its own vectors only, and nothing is rebuilt for anyone else. Without the
        owner's URL it is built through the owner's function, inside a transaction: every org's vector
        writes wait until it is done.
        """
        if not ORG_ID_PATTERN.fullmatch(org_id):
            raise NotFoundError(f"Invalid organization id {org_id!r}.", detail={"org_id": org_id})
        name = _index_name(org_id)
        with self._tx(org_id) as conn:
            if conn.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", (name,)).fetchone() is not None:
                return True
            count = self._count_vectors(conn, org_id)
        if count < self.hnsw_threshold and not force:
            return False
        if self._owner_dsn is not None:
            return self._build_concurrently(org_id)
        log.info("store.hnsw_index_building", org_id=org_id, vectors=count, concurrently=False)
        with self._writing(org_id) as conn:
            conn.execute(
                "SELECT grandbo_vector_index(%s, true, %s, %s, %s)",
                (org_id, self.hnsw_m, self.hnsw_ef_construction, self.hnsw_build_memory),
            )
            conn.execute("UPDATE orgs SET vector_index_wanted_at = NULL WHERE org_id = %s", (org_id,))
        return True


class _Snapshot:
    """`ports.FeedSnapshot` inside one transaction. Rows changed after the watermark are left out of every
    read (their seq is above it), so what the index applies matches `marks` exactly."""

    def __init__(self, conn: psycopg.Connection[Any], org_id: str, marks: Marks) -> None:
        self._conn, self._org, self.marks = conn, org_id, marks

    def rows(self, after_seq: int, *, active_only: bool) -> Iterable[IndexRow]:
        status = "AND status = 'active'" if active_only else ""
        with self._conn.cursor() as cursor:
            cursor.execute(
                "SELECT entry_id, status, terms, content_hash FROM memory_entries "
                f"WHERE org_id = %s AND seq > %s AND seq <= %s {status} ORDER BY seq",
                (self._org, after_seq, self.marks.entry_seq),
            )
            for entry_id, status_value, terms, content_hash in cursor:
                yield IndexRow(entry_id, status_value == Status.ACTIVE.value, terms, content_hash)

    def recent(self, after_seq: int, limit: int) -> Iterable[projection.Row]:
        with self._conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s AND seq > %s "
                "AND seq <= %s AND status = 'active' ORDER BY seq DESC LIMIT %s",
                (self._org, after_seq, self.marks.entry_seq, limit),
            )
            for record in cursor:
                yield _row_from_db(record)

    def vectors(self, after_vseq: int) -> Iterable[tuple[str, str, npt.NDArray[np.float32]]]:
        return ()  # pgvector searches them (PostgresStore.searches_vectors)

    def stored(self) -> StoredIndex | None:
        with self._conn.cursor(binary=True) as cursor:  # the image as bytes, not hex text to decode
            found = cursor.execute(
                "SELECT epoch, language, provider, model, dimension, entry_seq, vector_seq, data FROM index_images "
                "WHERE org_id = %s",
                (self._org,),
            ).fetchone()
        return stored_index(found)


def _server_id(conn: psycopg.Connection[Any]) -> int | None:
    """The cluster's system identifier, which two connections share only on the same server (or its
    replicas); None where the role may not read it (then only the database names are compared)."""
    try:
        with conn.transaction():
            row = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row else None
