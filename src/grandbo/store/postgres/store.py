"""The production store: Postgres with pgvector.

Every method names its organization and runs in a transaction that first sets `grandbo.org_id`;
row-level security (FORCEd, so the owning role is held to it too) is the second wall behind the
explicit `WHERE org_id = ...`. The vector arm runs in SQL (pgvector, exact or HNSW); the lexical arm
runs in process, in the search index above the store, over the rows this store's change feed hands up.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import structlog

from grandbo.errors import (
    ConfigError,
    StoreError,
)
from grandbo.store.base import (
    other_backend_backup,
    refuse_newer_backup,
)
from grandbo.store.postgres import backup as pg_backup
from grandbo.store.postgres import migrations
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.documents import DocumentsMixin
from grandbo.store.postgres.entries import EntriesMixin
from grandbo.store.postgres.erasure import ErasureMixin
from grandbo.store.postgres.feed import FeedMixin
from grandbo.store.postgres.hnsw import VectorIndexMixin
from grandbo.store.postgres.orgs import OrgsMixin
from grandbo.store.postgres.outbox import OutboxMixin
from grandbo.store.postgres.schema import SchemaMixin
from grandbo.store.postgres.vectors import VectorsMixin

log = structlog.get_logger(__name__)


class PostgresStore(
    ErasureMixin,
    OutboxMixin,
    DocumentsMixin,
    VectorIndexMixin,
    VectorsMixin,
    FeedMixin,
    EntriesMixin,
    OrgsMixin,
    SchemaMixin,
    PostgresConnection,
):
    """Every organization's memory in one Postgres database with pgvector."""

    searches_vectors = True  # pgvector answers the vector arm (`vector_search`)

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
        refuse_newer_backup(source, pg_backup.schema_versions(source, self._pg_bin_dir), migrations.MIGRATIONS)
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
