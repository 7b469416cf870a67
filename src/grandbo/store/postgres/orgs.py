"""The Postgres store's organizations and its embedding space.

An org's row in `orgs` is its writer lock: `_require_org` takes it (FOR NO KEY UPDATE), so one org's writers
take turns and its sequence numbers commit in order; `_hold_org` keeps it from being dropped (FOR KEY SHARE);
`drop_org` takes it FOR UPDATE, so it waits for writes in flight and deletes what they wrote. The embedding
space (provider, model, dimension) is store-wide, in `store_meta`; switching it re-queues every org's entries.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
import structlog

from grandbo import unerased
from grandbo.errors import NotFoundError
from grandbo.incarnation import Incarnation
from grandbo.model import EmbeddingSpace, utcnow
from grandbo.store.base import DROPPED, DROPS_KEPT_S, ORG_TABLES
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.dialect import (
    ERASING,
    FOR_KEY_SHARE,
    FOR_NO_KEY_UPDATE,
    FOR_UPDATE,
    NEW_EPOCH,
    SET_ORG,
    upsert,
)
from grandbo.store.sql.documents import HAS_KEYS

log = structlog.get_logger(__name__)
# The record of an org's drop (`since_dropped`), stamped by the database's clock (store-wide).
_RECORD_DROP = f"INSERT INTO store_meta (key, value) VALUES (%s, clock_timestamp()::text) {upsert('key', ['value'])}"


class OrgsMixin(PostgresConnection):
    """Organizations, their language, and the store's embedding space, for `PostgresStore`."""

    def initialize(self, space: EmbeddingSpace) -> None:
        with self._writing(None) as conn:
            conn.execute("LOCK TABLE store_meta IN EXCLUSIVE MODE")
            self._set_space(conn, space)
            conn.execute("SELECT grandbo_embedding_column(%s, false)", (space.dimension,))

    def _set_space(self, conn: psycopg.Connection[Any], space: EmbeddingSpace) -> None:
        conn.cursor().executemany(
            f"INSERT INTO store_meta (key, value) VALUES (%s, %s) {upsert('key', ['value'])}",
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
                conn.execute(NEW_EPOCH)
        total = 0
        for org_id in self.orgs():
            with self._writing(org_id) as conn:
                if current is None or current.dimension != space.dimension or every_entry:
                    # Under the org's writer lock, taken first as its writers take it: the delete's count of the
                    # org's corpus (migration 34's trigger) takes it after the vectors' rows otherwise.
                    self._lock_org(conn, org_id)
                    conn.execute("DELETE FROM entry_vectors WHERE org_id = %s", (org_id,))
                total += self._enqueue_missing(conn, org_id, space)
        return total

    def ensure_org(self, org_id: str) -> bool:
        with self._writing(org_id) as conn:
            made = conn.execute("INSERT INTO orgs (org_id) VALUES (%s) ON CONFLICT DO NOTHING", (org_id,))
            return made.rowcount == 1

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
        self._forget_old_drops()
        with self._writing(org_id) as conn:
            # The org's row first, exclusively: a write in flight holds it (`_require_org`, `_hold_org`), so the
            # deletes below wait for it to commit and then delete what it wrote; a write that comes later waits
            # here and then finds no org (NotFoundError). Deleting the row last, without this, let a write that
            # held it commit its rows after the deletes had passed them: a same-named org created next saw them.
            conn.execute(f"SELECT 1 FROM orgs WHERE org_id = %s {FOR_UPDATE}", (org_id,))
            # Whether it holds keys, read under that lock (a key's write holds it too): one made at any moment before
            # the drop is seen, and none after it. Read before the lock, one made in between was seen only by a
            # second read, and the drop was then recorded only after its commit: a create that waited for the drop
            # read no record of it, and did not wait out the key caches.
            keyed = conn.execute(HAS_KEYS.format(p="%s"), (org_id,)).fetchone() is not None
            # The logs refuse DELETE unless the transaction says it erases this org (migration 3).
            conn.execute(ERASING, (org_id,))
            for table in ORG_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE org_id = %s", (org_id,))
            if self._owner_dsn is None:  # only the owner's function can drop it: in this transaction, as before
                conn.execute("SELECT grandbo_vector_index(%s, false, 0, 0, '')", (org_id,))
            if keyed:  # last, store-wide: committed with the deletes, stamped as near their commit as it can be
                conn.execute(SET_ORG, ("",))
                conn.execute(_RECORD_DROP, (DROPPED + org_id,))
        if self._owner_dsn is not None:
            self._drop_vector_index(org_id)

    def _forget_old_drops(self) -> None:
        """Delete the records of drops DROPS_KEPT_S old (in a transaction of its own: two drops at once lock none of
        the same rows of `store_meta`)."""
        with self._writing(None) as conn:
            conn.execute("DELETE FROM store_meta WHERE key LIKE %s AND value::timestamptz < clock_timestamp() - "
                         "make_interval(secs => %s)", (DROPPED + "%", DROPS_KEPT_S))  # fmt: skip

    def since_dropped(self, org_id: str) -> float | None:
        def read() -> float | None:
            with self._tx() as conn:
                found = conn.execute(
                    "SELECT extract(epoch FROM clock_timestamp() - value::timestamptz) FROM store_meta WHERE key = %s",
                    (DROPPED + org_id,),
                ).fetchone()
            return float(found[0]) if found is not None else None

        return self._retrying(read)

    def _require_org(
        self, conn: psycopg.Connection[Any], org_id: str, incarnation: Incarnation | None = None
    ) -> str | None:
        """Lock the org's row and return its declared language. Writers of one org take turns (so its sequence
        numbers commit in order, which the in-process lexical index relies on, and a write never derives its
        terms in a language being replaced), readers never wait. The org's `incarnation` is checked under the
        lock (OrgDroppedError: the handle's org was dropped, `grandbo.incarnation`), and so are its erasures
        (ErasedMeanwhileError: the running work read before one, `grandbo.unerased`)."""
        # NO KEY UPDATE: writers of the org wait for each other and for a drop (FOR UPDATE), not for `_hold_org`.
        found = conn.execute(
            f"SELECT language, incarnation, erasures FROM orgs WHERE org_id = %s {FOR_NO_KEY_UPDATE}", (org_id,)
        ).fetchone()
        if incarnation is not None:
            incarnation.check(int(found[1]) if found is not None else None)
            if found is not None:
                unerased.check(org_id, int(found[2]))
        if found is None:
            raise NotFoundError(
                f"No organization {org_id!r} in this store. Create it first.", detail={"org_id": org_id}
            )
        return str(found[0]) if found[0] is not None else None

    @staticmethod
    def _lock_org(conn: psycopg.Connection[Any], org_id: str) -> bool:
        """Take the org's writer lock, as `_require_org` does; False when there is no such org (any more)."""
        return (
            conn.execute(f"SELECT 1 FROM orgs WHERE org_id = %s {FOR_NO_KEY_UPDATE}", (org_id,)).fetchone() is not None
        )

    @staticmethod
    def _vector_seq(conn: psycopg.Connection[Any], org_id: str) -> int:
        """The org's last vector sequence number (`_take_vector_seqs`)."""
        found = conn.execute("SELECT vector_seq FROM orgs WHERE org_id = %s", (org_id,)).fetchone()
        return int(found[0]) if found else 0

    @staticmethod
    def _take_vector_seqs(conn: psycopg.Connection[Any], org_id: str, count: int) -> int:
        """Take the org's next `count` vector sequence numbers and return the one before them. The caller holds the
        org's writer lock, taken before any row lock of its entries: so the numbers commit in order (the feed's
        watermark, migration 16), and a write that takes them never waits on an entry's row while holding it."""
        (last,) = conn.execute(
            "UPDATE orgs SET vector_seq = vector_seq + %s WHERE org_id = %s RETURNING vector_seq", (count, org_id)
        ).fetchone()  # type: ignore[misc]
        return int(last) - count

    @staticmethod
    def _hold_org(conn: psycopg.Connection[Any], org_id: str) -> bool:
        """Keep the org from being dropped until this transaction ends (a share lock of its row, which only a
        drop waits for); False when there is no such org (any more)."""
        return conn.execute(f"SELECT 1 FROM orgs WHERE org_id = %s {FOR_KEY_SHARE}", (org_id,)).fetchone() is not None

    def language(self, org_id: str) -> str | None:
        def read() -> str | None:
            with self._tx(org_id) as conn:
                found = conn.execute("SELECT language FROM orgs WHERE org_id = %s", (org_id,)).fetchone()
            if found is None:
                raise NotFoundError(f"No organization {org_id!r} in this store.", detail={"org_id": org_id})
            return str(found[0]) if found[0] is not None else None

        return self._retrying(read)

    def incarnation(self, org_id: str) -> int | None:
        def read() -> int | None:
            with self._tx(org_id) as conn:
                found = conn.execute("SELECT incarnation FROM orgs WHERE org_id = %s", (org_id,)).fetchone()
            return int(found[0]) if found is not None else None

        return self._retrying(read)

    def erasures(self, org_id: str) -> int:
        def read() -> int:
            with self._tx(org_id) as conn:
                found = conn.execute("SELECT erasures FROM orgs WHERE org_id = %s", (org_id,)).fetchone()
            return int(found[0]) if found is not None else 0

        return self._retrying(read)

    def stored_bytes(self, org_id: str) -> int:
        def read() -> int:
            with self._tx(org_id) as conn:
                found = conn.execute("SELECT stored_bytes FROM orgs WHERE org_id = %s", (org_id,)).fetchone()
            return int(found[0]) if found else 0

        return self._retrying(read)

    def set_language(self, org_id: str, language: str | None, incarnation: Incarnation | None = None) -> int:
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id, incarnation)  # the org's writers wait until the new terms commit
            conn.execute(
                "WITH next AS (SELECT nextval('grandbo_epoch') AS epoch) "
                "UPDATE orgs SET language = %s, epoch = next.epoch FROM next WHERE org_id = %s",
                (language, org_id),
            )
            changed = len(self._rederive_org(conn, org_id, language))
        log.info("store.language_set", org_id=org_id, language=language or "auto", entries_changed=changed)
        return changed
