"""The Postgres store's schema: numbered migrations run as the owner role, and what the runtime role is granted.

The statements are `migrations.py`'s (numbered, never edited once released); this module applies them, one
transaction each under an advisory lock, so concurrent migrators take turns; re-derives stored terms when a
migration asks for it (`REDERIVE_TERMS`), lowers changes' services (`LOWER_CHANGE_SERVICES`) and normalizes
service names (`NORMALIZE_SERVICE_NAMES`); grants the runtime role rows, sequences and the owner's functions, and
nothing that alters a table. At connect, `_check_schema` refuses a schema behind or ahead of this release.
`MIGRATIONS` is read from `migrations` at each call, so a test can stand in a release with fewer or more."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import structlog
from psycopg import sql

from grandbo.errors import MigrationError
from grandbo.model import EmbeddingSpace
from grandbo.store import fence
from grandbo.store.base import REDERIVE_TERMS, TERMS_DERIVED_VECTORS
from grandbo.store.postgres import migrations
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.dialect import DOCUMENTS, NEW_EPOCH, SET_ORG
from grandbo.store.postgres.policies import OUTBOX_DEPTH_POLICY, PENDING_COUNT_POLICY
from grandbo.store.postgres.service_names import normalize_service_names
from grandbo.store.postgres.unembeddable import requeue_entries
from grandbo.store.sql.entries import FILL_INCIDENT_KEYS, fill_incident_keys, incident_keys_read, incident_keys_write
from grandbo.store.sql.service_names import NORMALIZE_SERVICE_NAMES
from grandbo.store.sql.services import LOWER_CHANGE_SERVICES, lower_change_services, read_services, write_service

log = structlog.get_logger(__name__)

_MIGRATION_LOCK = 0x6772616E64626F  # "grandbo": serializes migrators across processes


class SchemaMixin(PostgresConnection):
    """Migrations, grants and the schema check of `PostgresStore`."""

    def _check_schema(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse a schema that is missing, behind this release, or ahead of it (the runtime role never
        migrates: it may not)."""
        known = {v for v, _, _ in migrations.MIGRATIONS}
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
        self.schema_known = max(known)

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
            for version, name, statements in migrations.MIGRATIONS:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS schema_migrations "
                        "(version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)"
                    )
                    applied = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
                    unknown = applied - {v for v, _, _ in migrations.MIGRATIONS}
                    if unknown:
                        raise MigrationError(
                            f"The database at {self.url} has schema versions {sorted(unknown)} this Grandbo does "
                            "not know; it was migrated by a newer release. Upgrade Grandbo.",
                            detail={"unknown_versions": sorted(unknown)},
                        )
                    if version in applied:
                        continue
                    # Until it commits: no process's transaction spans it. Bounded: every request queues behind it.
                    conn.execute(f"SET LOCAL lock_timeout = {int(fence.MIGRATION_WAIT_MS)}")
                    try:
                        conn.execute(fence.MIGRATION_FENCE)
                    except psycopg.errors.LockNotAvailable as error:
                        raise fence.held_up(version, name) from error
                    conn.execute("SET LOCAL lock_timeout = DEFAULT")
                    try:
                        for statement in statements:
                            if statement == REDERIVE_TERMS:
                                self._rederive_terms(conn)
                            elif statement == LOWER_CHANGE_SERVICES:
                                _lower_change_services(conn)
                            elif statement == FILL_INCIDENT_KEYS:
                                _fill_incident_keys(conn)
                            elif statement == NORMALIZE_SERVICE_NAMES:
                                normalize_service_names(conn, self._terms_of, self._enqueue_missing)
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
            conn.execute(SET_ORG, (org_id,))
            updated = self._rederive_org(conn, org_id, language)
            if space is not None and space.provider == TERMS_DERIVED_VECTORS:
                conn.cursor().executemany(
                    "DELETE FROM entry_vectors WHERE org_id = %s AND entry_id = %s AND provider = %s",
                    [(org_id, entry_id, TERMS_DERIVED_VECTORS) for entry_id in updated],
                )
                requeue_entries(conn, org_id, updated)
            if space is not None and updated:
                queued += self._enqueue_missing(conn, org_id, space)
            changed += len(updated)
        conn.execute("SELECT set_config('grandbo.org_id', '', true)")
        conn.execute(NEW_EPOCH)
        log.info("store.terms_rederived", entries_changed=changed, embed_jobs=queued)

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
        if conn.info.server_version >= 170000:  # VACUUM after an erasure (`upkeep`); MAINTAIN alters nothing
            for table in ("memory_events", "memory_entries", "entry_vectors", "embed_outbox", "documents",
                          "document_events", "index_images"):  # fmt: skip
                conn.execute(sql.SQL("GRANT MAINTAIN ON {} TO {}").format(sql.Identifier(table), who))
        # The outbox count reads through a policy of the owner's (migration 11). After the schema changed hands
        # (REASSIGN OWNED: a single-role store moved to two roles) it named the old owner, which may now be the
        # runtime role, or was dropped with it (DROP OWNED): it follows the owner that grants.
        _follow_owner(conn, "embed_outbox", "embed_outbox_depth", OUTBOX_DEPTH_POLICY)
        _follow_owner(conn, "pending_work", "pending_work_count", PENDING_COUNT_POLICY)  # migration 14
        for function in (
            "grandbo_embedding_column(integer, boolean)",
            "grandbo_vector_index(text, boolean, integer, integer, text)",
            "grandbo_outbox_depth()",
            "grandbo_pending_work(integer)",
            "grandbo_pending_holders()",  # migration 29
            "grandbo_outbox_holders()",  # migration 31
            "grandbo_outbox_counts(integer)",
        ):
            conn.execute(sql.SQL(f"GRANT EXECUTE ON FUNCTION {function} TO {{}}").format(who))

    def schema_versions(self) -> list[int]:
        with self._tx() as conn:
            return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def _org_by_org(conn: psycopg.Connection[Any], step: Callable[[psycopg.Connection[Any], str], int]) -> int:
    """A migration step run for each org in turn, the transaction set to it (row-level security holds the migrator
    too); what the steps counted."""
    done = 0
    for (org_id,) in conn.execute("SELECT org_id FROM orgs ORDER BY org_id").fetchall():
        conn.execute(SET_ORG, (org_id,))
        done += step(conn, org_id)
    conn.execute("SELECT set_config('grandbo.org_id', '', true)")
    return done


def _lower_change_services(conn: psycopg.Connection[Any]) -> None:
    """Migration step LOWER_CHANGE_SERVICES (store/sql/services.py), org by org."""
    log.info("store.change_services_lowered", changes=_org_by_org(conn, _lower_org))


def _lower_org(conn: psycopg.Connection[Any], org_id: str) -> int:
    read = read_services(DOCUMENTS)
    write = write_service(DOCUMENTS, "jsonb_set(data, '{service}', to_jsonb(%s::text))")
    return lower_change_services(
        lambda after: conn.execute(read, (org_id, after)).fetchall(),
        lambda due: conn.cursor().executemany(write, [(service, org_id, doc_id) for service, doc_id in due]),
    )


def _fill_incident_keys(conn: psycopg.Connection[Any]) -> None:
    """Migration step FILL_INCIDENT_KEYS (store/sql/entries.py), org by org."""
    log.info("store.incident_keys_filled", entries=_org_by_org(conn, _fill_org))


def _fill_org(conn: psycopg.Connection[Any], org_id: str) -> int:
    read, write = incident_keys_read("%s"), incident_keys_write("%s")
    return fill_incident_keys(
        lambda after: conn.execute(read, (org_id, after)).fetchall(),
        lambda due: conn.cursor().executemany(write, [(key, org_id, entry_id) for key, entry_id in due]),
        lambda value: value,  # jsonb comes parsed
    )


def _follow_owner(conn: psycopg.Connection[Any], table: str, policy: str, create: str) -> None:
    """Point the counting policy `policy` of `table` at the role that grants (the owner): dropped and made again
    by `create` when it names another role."""
    current = conn.execute(
        "SELECT roles = ARRAY[current_user]::name[] FROM pg_policies WHERE schemaname = current_schema() "
        "AND tablename = %s AND policyname = %s",
        (table, policy),
    ).fetchone()
    if current != (True,):
        conn.execute(sql.SQL("DROP POLICY IF EXISTS {} ON {}").format(sql.Identifier(policy), sql.Identifier(table)))
        conn.execute(create)
