"""The Postgres store's vector arm: pgvector answers it in SQL, and the reads beside it.

`vector_search` is a plain ORDER BY distance LIMIT, so the org's HNSW index (hnsw.py) serves it when there
is one and an exact scan does when there is not; the floor and the tie-break by entry id are applied outside,
and only vectors of the store's recorded space answer. `corpus_stats` counts what is readable and what waits.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg

from grandbo.errors import StoreUnavailableError
from grandbo.model import CorpusStats, EmbeddingSpace
from grandbo.ports import UNEMBEDDABLE, VECTOR_TIE_DIGITS, VectorHit
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.dialect import COSINE_DISTANCE
from grandbo.store.sql import corpus_counts
from grandbo.store.sql.unembeddable import COUNT as COUNT_UNEMBEDDABLE


class VectorsMixin(PostgresConnection):
    """The vector arm and the vector reads, for `PostgresStore`."""

    def any_vector(self, org_id: str, space: EmbeddingSpace) -> bool:
        def read() -> bool:
            with self._tx(org_id, join=True) as conn:
                row = conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM entry_vectors v JOIN memory_entries e USING (org_id, entry_id) "
                    "WHERE v.org_id = %s AND v.provider = %s AND v.model = %s AND e.status = 'active')",
                    (org_id, space.provider, space.model),
                ).fetchone()
            return bool(row[0]) if row else False

        return self._retrying(read)

    def vector_search(
        self, org_id: str, space: EmbeddingSpace, vector: npt.NDArray[np.float32], limit: int, min_similarity: float
    ) -> list[VectorHit]:
        return self._retrying(partial(self._nearest, org_id, space, vector, limit, min_similarity))

    def lend_search(self, org_id: str) -> _LentSearch:
        """A pooled connection the calling thread takes now (waiting for one as any read does) for one search of the
        org on any thread: a helper thread that runs it waits for no connection (`OrgSearch.ahead`)."""
        return _LentSearch(self, org_id)

    def _nearest(
        self, org_id: str, space: EmbeddingSpace, vector: npt.NDArray[np.float32], limit: int, min_similarity: float,
        lent: psycopg.Connection[Any] | None = None,
    ) -> list[VectorHit]:  # fmt: skip
        query = np.asarray(vector, dtype=np.float32)
        ef_search = str(max(self.ef_search, limit))
        with self._tx(
            org_id, join=True, lent=lent, hnsw__ef_search=ef_search, hnsw__iterative_scan="relaxed_order"
        ) as conn:
            # A plain ORDER BY ... LIMIT lets an HNSW index serve the scan; the floor is applied outside.
            # The inner query takes a few extra rows so that ties at the last place are broken by
            # entry id, like the embedded store does. The store's recorded space is checked in the
            # same statement: vectors of another space never answer.
            rows = conn.execute(
                "SELECT entry_id, distance FROM ("
                f"  SELECT entry_id, embedding {COSINE_DISTANCE} %(q)s AS distance FROM entry_vectors"
                "  WHERE org_id = %(org)s AND provider = %(provider)s AND model = %(model)s"
                f"  ORDER BY embedding {COSINE_DISTANCE} %(q)s LIMIT %(inner)s"
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

    def explain_vector_search(self, org_id: str, vector: npt.NDArray[np.float32], limit: int = 25) -> str:
        """The query plan of the vector arm for this org (to check which index serves it)."""
        space = self.space()
        assert space is not None
        with self._tx(org_id) as conn:
            rows = conn.execute(
                f"EXPLAIN SELECT entry_id, embedding {COSINE_DISTANCE} %(q)s AS distance FROM entry_vectors "
                "WHERE org_id = %(org)s AND provider = %(provider)s AND model = %(model)s "
                f"ORDER BY embedding {COSINE_DISTANCE} %(q)s LIMIT %(limit)s",
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

    def unembeddable_jobs(self, org_id: str) -> int:
        def read() -> int:
            with self._tx(org_id) as conn:
                row = conn.execute(COUNT_UNEMBEDDABLE.format(p="%s"), (org_id,)).fetchone()
            return int(row[0]) if row else 0

        return self._retrying(read)

    def corpus_stats(self, org_id: str, max_attempts: int) -> CorpusStats:
        space = self.space()

        def read() -> CorpusStats:
            with self._tx(org_id) as conn:
                found = conn.execute(corpus_counts.READ.format(p="%s"), (org_id,)).fetchone()
                total = int(found[0]) if found else 0
                readable, stale = corpus_counts.readable_and_stale(
                    conn.execute(corpus_counts.READ_VECTORS.format(p="%s"), (org_id,)).fetchall(), space
                )
                pending, failed, unembeddable = conn.execute(
                    "SELECT count(*) FILTER (WHERE attempts < %(max)s), "
                    "count(*) FILTER (WHERE attempts >= %(max)s AND attempts <> %(u)s), "
                    "count(*) FILTER (WHERE attempts = %(u)s) FROM embed_outbox WHERE org_id = %(org)s",
                    {"max": max_attempts, "u": UNEMBEDDABLE, "org": org_id},
                ).fetchone()  # type: ignore[misc]
            return CorpusStats(
                org_id=org_id,
                total=total,
                readable=readable,
                unreadable=total - readable,
                pending=pending,
                failed=failed,
                unembeddable=unembeddable,
                stale=stale,
                space=space,
            )

        return self._retrying(read)


class _LentSearch:
    """`ports.LentSearch`: the connection is given back by the first of `search` and `close`, on whichever thread
    calls it; a later call finds none (`search` answers None: the caller searches by `vector_search`)."""

    def __init__(self, store: VectorsMixin, org_id: str) -> None:
        self._store, self._org = store, org_id
        self._lent = contextlib.ExitStack()
        self._conn: psycopg.Connection[Any] | None = self._lent.enter_context(store._reach.lend(store._pool))
        self._taken = threading.Lock()

    def _take(self) -> psycopg.Connection[Any] | None:
        with self._taken:
            conn, self._conn = self._conn, None
        return conn

    def search(
        self, space: EmbeddingSpace, vector: npt.NDArray[np.float32], limit: int, min_similarity: float
    ) -> list[VectorHit] | None:
        """The hits, on the lent connection, given back; None where it was lost (broken: searched again on another,
        by `vector_search`, which retries) or given back already. An error of the statement itself on a connection
        that still works (a cancel, a timeout) is raised as a 503 `store_unavailable`: searched again, it would fail
        again."""
        if (conn := self._take()) is None:
            return None
        with self._lent:
            try:
                return self._store._nearest(self._org, space, vector, limit, min_similarity, conn)
            except psycopg.OperationalError as error:
                if conn.broken or conn.closed:
                    return None
                said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise StoreUnavailableError(  # as a warm recall's search ends (`_retrying`): a 503, not a 500
                    f"Postgres at {self._store.url} ended the recall's vector search ({said}). Retry shortly.",
                    detail={"url": self._store.url},
                ) from error

    def close(self) -> None:
        """The connection given back unsearched (the view searches in process, the recall failed), unless it was."""
        if self._take() is not None:
            self._lent.close()
