"""The Postgres store's HNSW index per organization.

The index is partial (`WHERE org_id = ...`): small orgs keep exact scans, a large org gets approximate search
over its own vectors only, and nothing is rebuilt for anyone else.

A write never builds an index: building one inside a transaction (all the runtime role could do) holds a
SHARE lock on entry_vectors for the whole build, and every org's vector writes wait for it. The write path
records that an org wants its index (`_want_vector_index`); the worker's maintenance builds it with CREATE
INDEX CONCURRENTLY as the owner role (`build_vector_indexes`), which takes no lock that a write waits for.
Until the index exists, recall scans the org's vectors exactly.
"""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
import structlog

from grandbo.errors import NotFoundError
from grandbo.model import ORG_ID_PATTERN
from grandbo.store.postgres import reach
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.dialect import COSINE_OPS

log = structlog.get_logger(__name__)


def index_name(org_id: str) -> str:
    """The name of the org's partial HNSW index: a hash of the id, so any id makes a safe, short name."""
    return "entry_vectors_hnsw_" + hashlib.sha256(org_id.encode()).hexdigest()[:16]


class VectorIndexMixin(PostgresConnection):
    """Each large org's HNSW index: wanted, built, dropped, for `PostgresStore`."""

    def _want_vector_index(self, org_id: str, vector_seq: int) -> None:
        """Record that the org wants its HNSW index, once it holds `hnsw_threshold` vectors and has none;
        `vector_seq` is the org's vector sequence number after the write that calls (`_take_vector_seqs`).

        A process counts an org's vectors the first time it writes some (migration 16 numbered the vectors an org
        held then from 1: its numbers are no bound), and after a count short of the threshold counts again once
        the org's numbers have moved past the vectors it lacked: every vector written, by any process, takes one.
        The numbers are shared: a countdown of the vectors this process wrote left an org two workers embedded at
        22,000 vectors without its index (probe 18), and counting after every batch read up to 20,000 rows (a
        quarter of a worker's time on a growing org).
        """
        seen, again = self._count_again_at.get(org_id, (0, 0))
        if vector_seq < seen:  # numbers only grow: a smaller one is an org dropped and made again under the name
            again = 0
        if vector_seq < again:
            return
        name = index_name(org_id)
        with reach.reads_lost(self.url), self._tx(org_id) as conn:  # a lost connection is a 503, not the driver's
            settled = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = %s) "
                "OR EXISTS (SELECT 1 FROM orgs WHERE org_id = %s AND vector_index_wanted_at IS NOT NULL)",
                (name, org_id),
            ).fetchone()[0]  # type: ignore[index]
            if settled:  # asked for, or built: looked at again after as many writes as the threshold
                self._count_again_at[org_id] = (vector_seq, vector_seq + self.hnsw_threshold)
                return
            count = self._count_vectors(conn, org_id)
        if count < self.hnsw_threshold:
            self._count_again_at[org_id] = (vector_seq, vector_seq + self.hnsw_threshold - count)
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

    def maintain(self) -> list[str]:
        return self.build_vector_indexes()

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
        name = index_name(org_id)  # of a checked org id: safe to put in the statement
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
                        f"USING hnsw (embedding {COSINE_OPS}) "
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
        name = index_name(org_id)
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
            # The org's writer lock first, as its writers take it before they write vectors: the build's SHARE
            # lock on entry_vectors and then the org's row, against a vector write holding the row, deadlocked.
            self._lock_org(conn, org_id)
            conn.execute(
                "SELECT grandbo_vector_index(%s, true, %s, %s, %s)",
                (org_id, self.hnsw_m, self.hnsw_ef_construction, self.hnsw_build_memory),
            )
            conn.execute("UPDATE orgs SET vector_index_wanted_at = NULL WHERE org_id = %s", (org_id,))
        return True

    def _drop_vector_index(self, org_id: str) -> None:
        """Drop a dropped org's HNSW index concurrently, after the drop committed, as the worker builds one: a
        plain DROP INDEX in the drop's transaction waited for the shared table's ACCESS EXCLUSIVE lock behind
        any build under way, and every org's vector reads and writes queued behind it (or, during the org's own
        build, the two deadlocked). While any build runs it gives up after 2 s and leaves the index, which
        matches no row (it is partial, by org; an org created again under the name uses it)."""
        if not ORG_ID_PATTERN.fullmatch(org_id):
            return
        name = index_name(org_id)  # of a checked org id: safe to put in the statement
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
