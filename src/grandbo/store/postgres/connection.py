"""The Postgres store's connection: the pool, the two roles, and the transaction every method runs in.

`PostgresConnection` is the base of every concern's mixin (`store.py` composes them). It connects as the
runtime role, refuses one that bypasses row-level security or owns anything, checks the schema, and opens
the pool; `_tx` scopes a transaction to one org (SET LOCAL grandbo.org_id), `_writing` turns a connection
lost during a write into a 503 or an unknown outcome, `_retrying` retries a read. `_connect_as` reaches
the same database as another role (the owner's for migrations and index builds, the backup role's).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import structlog
from pgvector.psycopg import register_vector
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool, PoolTimeout

from grandbo.errors import CommitUnknownError, ConfigError, StoreError, StoreUnavailableError
from grandbo.store import fence
from grandbo.store.base import TermsOf, loads_json
from grandbo.store.postgres import reach, refusals
from grandbo.store.postgres.begun import begun, setting
from grandbo.store.postgres.upkeep import Vacuums
from grandbo.urls import mask_url

if TYPE_CHECKING:
    from collections.abc import Sequence

    from grandbo.incarnation import Incarnation
    from grandbo.model import EmbeddingSpace
    from grandbo.store import projection
    from grandbo.store.sql.erasing import DocumentRewrite

log = structlog.get_logger(__name__)


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Each pooled connection: pgvector's types, and jsonb parsed by pydantic-core instead of json.loads."""
    register_vector(conn)
    set_json_loads(loads_json, conn)


T = TypeVar("T")


def redact(url: str) -> str:
    """The URL without its credentials (userinfo password, `password=` and the like), for messages and logs."""
    return mask_url(url)


class PostgresConnection:
    """The connection every concern of the Postgres store works through (see the module's docstring)."""

    storage_limit_mb = 0  # the most an org stores (`store.sql.storage`; `open_store` sets it)
    disk_reserve_mb = 0  # the embedded store's only: Postgres keeps its own disk
    schema_known: int | None = None  # this release's newest migration, once the schema is checked (`fence`)

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
        self.vacuums = Vacuums(url, connect_timeout)  # maintenance erasures owe, off the request path (`upkeep`)
        self._reach = reach.Reach(self.url, connect_timeout)  # an unreachable server is a 503 at once (`reach`)
        self._pinned = threading.local()  # the connection of this thread's `consistent_read`, if any
        self._terms_of = terms_of
        self.hnsw_threshold = hnsw_threshold
        # Whether a write with vectors checks whether the org wants its HNSW index (built by the worker). A bulk
        # load that builds it afterwards turns this off: the check counts up to `hnsw_threshold` vectors.
        self.auto_index = True
        self._claim_after: str | None = None  # the embed claim's round-robin cursor (`store.queue`)
        self._index_waits_told: set[str] = set()  # orgs whose index waits for the owner's URL, logged once
        # By org: its vector number at its last count short of the index's threshold, and the number at which its
        # vectors are counted again (`_want_vector_index`)
        self._count_again_at: dict[str, tuple[int, int]] = {}
        self.ef_search = ef_search
        self.hnsw_build_memory = hnsw_build_memory
        self.hnsw_m = int(hnsw_m)
        self.hnsw_ef_construction = int(hnsw_ef_construction)
        try:
            with refusals.connect(url, self.url, connect_timeout=int(connect_timeout)) as conn:
                self._check_role(conn)
                who = conn.execute("SELECT current_user, current_database()").fetchone()
                runtime_role, self._database = str(who[0]), str(who[1])  # type: ignore[index]
                self._server = _server_id(conn)
        except psycopg.OperationalError as error:  # a wrong password is not an outage (`refusals`)
            raise refusals.refusal(self.url, error) or StoreUnavailableError(
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

    def _keep_reserve(self) -> None:
        """Nothing: Postgres's disk is its server's, which refuses a write itself when full (the embedded store
        keeps GRANDBO_DISK_RESERVE_MB, `store.sqlite.full`)."""

    def _open_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self._dsn,
            min_size=1,
            max_size=self._pool_size,
            kwargs={
                "prepare_threshold": None,
                "options": "-c plan_cache_mode=force_custom_plan",
                **reach.connect_options(self._connect_timeout),
            },
            configure=self._reach.configure(_configure),
            check=reach.check,  # a round trip only where the server said something (closed it)
            reconnect_timeout=self._connect_timeout,  # no minutes of back-off: the next request tries again
            reconnect_failed=self._reach.failed,  # then requests are answered 503 store_unavailable (`reach`)
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

    @contextmanager
    def _tx(
        self, org_id: str | None = None, *, join: bool = False, lent: psycopg.Connection[Any] | None = None,
        **local: str,
    ) -> Iterator[psycopg.Connection[Any]]:  # fmt: skip
        """A transaction, scoped to one org (SET LOCAL grandbo.org_id) when `org_id` is given; `local`
        holds more transaction-local settings (dots spelled as double underscores). `join`: a read that may run in
        this thread's read transaction of the org (`_reading_together`), when one is open and nothing else is set.
        `lent`: on this connection, taken from the pool already (`VectorsMixin.lend_search`)."""
        settings = {"grandbo.org_id": org_id or "", **{k.replace("__", "."): v for k, v in local.items()}}
        if lent is not None:  # idle, as the pool lent it: BEGIN sent with the settings (`begun`)
            with begun(lent, settings, self.schema_known) as conn:
                yield conn
            return
        pinned: psycopg.Connection[Any] | None = getattr(self._pinned, "conn", None)
        together: _Together | None = getattr(self._pinned, "together", None)
        if join and pinned is None and together is not None and together.org_id == org_id:
            with together.joined(lambda: self._begun(settings | {"transaction_read_only": "on"}), settings) as conn:
                yield conn
            return
        with contextlib.nullcontext(pinned) if pinned else self._reach.lend(self._pool) as conn, conn.transaction():
            self._set_up(conn, settings)
            yield conn

    def _set_up(self, conn: psycopg.Connection[Any], settings: dict[str, str]) -> None:
        """A transaction's first statement (`begun.setting`): its settings, and the schema fence."""
        fence.hold(conn.execute(*setting(settings)).fetchone()[-1], self.schema_known)  # type: ignore[index]

    @contextmanager
    def _begun(self, settings: dict[str, str]) -> Iterator[psycopg.Connection[Any]]:
        # BEGIN sent with the settings (`begun`): a read transaction of an org's reads together, one round trip less.
        with self._reach.lend(self._pool) as conn, begun(conn, settings, self.schema_known):
            yield conn

    @contextmanager
    def _reading_together(self, org_id: str) -> Iterator[None]:
        """Within (on this thread): the reads of `org_id` that may join (`_tx(join=True)`) run in one READ ONLY
        transaction, opened by the first of them, with one setting of the org and one check of the schema fence
        for them all, not a transaction, a pooled connection and four round trips each. Each read still sees
        what was committed before it (READ COMMITTED, as on its own). A read that fails ends the transaction: the
        next opens another (a lost connection is retried on a fresh one, as on its own). Inside a
        `consistent_read` or another such block: that one's."""
        if getattr(self._pinned, "conn", None) is not None or getattr(self._pinned, "together", None) is not None:
            yield
            return
        together = self._pinned.together = _Together(org_id)
        try:
            yield
        finally:
            self._pinned.together = None
            together.close(self.url)

    @contextmanager
    def consistent_read(self, org_id: str) -> Iterator[None]:
        # One REPEATABLE READ, READ ONLY transaction pinned to this thread: every `_tx` within is a savepoint of
        # it, so every read sees the snapshot its first statement took.
        if getattr(self._pinned, "conn", None) is not None:
            yield
            return
        if (together := getattr(self._pinned, "together", None)) is not None:
            together.close(self.url)  # its reads have their rows: one connection held, not two (opened again lazily)
        with reach.reads_lost(self.url), self._reach.lend(self._pool) as conn, conn.transaction():
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

    def _update_each_org(self, org_id: str | None, statement: str, *params: Any) -> int:
        """Run `statement` (its first parameter the org) in one write transaction per organization: `org_id`'s,
        or each of the store's in turn; return how many rows it changed."""
        count = 0
        for org in [org_id] if org_id else self.orgs():
            with self._writing(org) as conn:
                count += conn.execute(statement, (org, *params)).rowcount
        return count

    def _owner_connection(self) -> psycopg.Connection[Any]:
        """A connection as the owner role of GRANDBO_MIGRATE_DATABASE_URL, to this store's database only."""
        role = "the role that owns Grandbo's schema"
        return self._connect_as(str(self._owner_dsn), "the owner role", "GRANDBO_MIGRATE_DATABASE_URL", role)

    def _connect_as(self, dsn: str, role: str, setting: str, what: str) -> psycopg.Connection[Any]:
        """A connection as `role` (the URL of `setting`, which names `what`), to this store's database only:
        a backup, restore, migration or grant through it must not land in another database."""
        shown = redact(dsn)
        try:
            conn = refusals.connect(dsn, shown, setting, connect_timeout=int(self._connect_timeout))
        except psycopg.OperationalError as error:
            raise refusals.refusal(shown, error, setting) or StoreUnavailableError(
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

    def close(self) -> None:
        self.vacuums.wait(30)  # what erasures still owe, before the process goes
        self._pool.close()

    if TYPE_CHECKING:  # provided by the concern mixins `PostgresStore` composes, called across them

        def migrate(self, runtime_role: str | None = None) -> list[int]: ...  # schema.py
        def _check_schema(self, conn: psycopg.Connection[Any]) -> None: ...  # schema.py
        def orgs(self) -> list[str]: ...  # orgs.py
        def space(self) -> EmbeddingSpace | None: ...  # orgs.py
        def _require_org(
            self, conn: psycopg.Connection[Any], org_id: str, incarnation: Incarnation | None = None
        ) -> str | None: ...  # orgs.py
        def _found(
            self, org_id: str, rewrite: Callable[[Any, str], Any], mentioning: Sequence[str] = (), holding: str = "",
            *, quoting: Sequence[str] = (),
        ) -> DocumentRewrite: ...  # documents.py  # fmt: skip
        def _find(self, org_id: str, found: DocumentRewrite) -> DocumentRewrite: ...  # documents.py
        @staticmethod
        def _hold_org(conn: psycopg.Connection[Any], org_id: str) -> bool: ...  # orgs.py
        @staticmethod
        def _lock_org(conn: psycopg.Connection[Any], org_id: str) -> bool: ...  # orgs.py
        @staticmethod
        def _vector_seq(conn: psycopg.Connection[Any], org_id: str) -> int: ...  # orgs.py
        @staticmethod
        def _take_vector_seqs(conn: psycopg.Connection[Any], org_id: str, count: int) -> int: ...  # orgs.py
        def _rows(
            self, conn: psycopg.Connection[Any], org_id: str, entry_ids: Sequence[str]
        ) -> dict[str, projection.Row]: ...  # entries.py
        def _rederive_org(
            self, conn: psycopg.Connection[Any], org_id: str, language: str | None
        ) -> list[str]: ...  # entries.py
        def _enqueue_missing(
            self, conn: psycopg.Connection[Any], org_id: str, space: EmbeddingSpace
        ) -> int: ...  # outbox.py
        def _want_vector_index(self, org_id: str, vector_seq: int) -> None: ...  # hnsw.py
        def _drop_vector_index(self, org_id: str) -> None: ...  # hnsw.py
        def _vacuum(self, *tables: str) -> None: ...  # erasure.py


class _Together:
    """This thread's read transaction of one org (`PostgresConnection._reading_together`), opened lazily."""

    def __init__(self, org_id: str) -> None:
        self.org_id = org_id
        self._open: contextlib.AbstractContextManager[psycopg.Connection[Any]] | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._settings: dict[str, str] = {}  # those set in the open transaction

    @contextmanager
    def joined(
        self, begin: Callable[[], contextlib.AbstractContextManager[psycopg.Connection[Any]]], settings: dict[str, str]
    ) -> Iterator[psycopg.Connection[Any]]:
        """The transaction (begun by `begin`, which sets `settings`, when none is open yet), with `settings` set in
        it: those it lacks are set for the rest of it (only the vector search's, read by no other statement)."""
        if self._conn is None:
            opening = begin()
            self._conn = opening.__enter__()  # raises with nothing held (its own blocks unwound)
            self._open, self._settings = opening, dict(settings)
        try:
            lacking = {name: value for name, value in settings.items() if self._settings.get(name) != value}
            if lacking:
                calls = ", ".join("set_config(%s, %s, true)" for _ in lacking)
                self._conn.execute(f"SELECT {calls}", [part for pair in lacking.items() for part in pair])
                self._settings |= lacking
            yield self._conn
        except BaseException as error:
            self._end(error)  # rolled back: a statement that failed leaves the transaction unusable
            raise

    def close(self, url: str) -> None:
        """Commit (read only: nothing to keep). A connection lost meanwhile costs nothing: every read had its rows."""
        try:
            self._end(None)
        except psycopg.OperationalError as error:
            log.warning("store.read_end_lost", url=url, error=str(error).splitlines()[0])

    def _end(self, error: BaseException | None) -> None:
        opening, self._open, self._conn = self._open, None, None
        if opening is None:
            return
        if error is None:
            opening.__exit__(None, None, None)
            return
        with contextlib.suppress(psycopg.Error):  # the read's own error is the one to tell
            opening.__exit__(type(error), error, error.__traceback__)


def _server_id(conn: psycopg.Connection[Any]) -> int | None:
    """The cluster's system identifier, which two connections share only on the same server (or its
    replicas); None where the role may not read it (then only the database names are compared)."""
    try:
        with conn.transaction():
            row = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row else None
