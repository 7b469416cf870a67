"""How an append's rows reach the server: in steps, COPYed when large, in pipeline mode.

`Step` holds the rows one step of an append writes (events, entry rows, given vectors, embed jobs, and the
entries that left the active set); `StepWriter` sends them within the append's transaction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import Pipeline

from grandbo.errors import StoreError
from grandbo.model import EmbeddingSpace, Status, utcnow
from grandbo.ports import NewEvent
from grandbo.store import projection
from grandbo.store.postgres.dialect import jsonb_of, params, upsert
from grandbo.store.postgres.rows import ENTRY_COLUMNS, VECTOR_UPSERT, row_to_db


@dataclass(slots=True)
class Step:
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
        payloads: Sequence[bytes],
        seqs: Sequence[int],
        changed: Mapping[str, projection.Row],
        vectors: Mapping[str, npt.NDArray[np.float32]],
        space: EmbeddingSpace | None,
        vseq: int = 0,
    ) -> Step:
        """The step's rows, the events' payloads as the caller encoded them (and charged, `store.sql.storage`); its
        vectors numbered from `vseq` + 1 (the org's vector sequence, taken by the caller under the org's writer
        lock)."""
        active = {entry_id: row for entry_id, row in changed.items() if row["status"] == Status.ACTIVE.value}
        given = [entry_id for entry_id in active if entry_id in vectors]
        if given and space is None:
            raise StoreError("Vectors were given without the embedding space they belong to.", detail={})
        labels = (space.provider, space.model, space.dimension) if space is not None else ()
        now = utcnow()
        return cls(
            events=[
                (org_id, seq, e.entry_id, e.type.value, jsonb_of(payload), e.actor, e.at)
                for seq, e, payload in zip(seqs, events, payloads, strict=True)
            ],
            entries=[row_to_db(row) for row in changed.values()],
            vectors=[
                (
                    org_id,
                    entry_id,
                    *labels,
                    active[entry_id]["content_hash"],
                    now,
                    np.asarray(vectors[entry_id], dtype=np.float32),
                    number,
                )
                for number, entry_id in enumerate(given, vseq + 1)
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
    ENTRY_COLUMNS,
    upsert("org_id, entry_id", ENTRY_COLUMNS.split(", ")[2:]),
)


_VECTORS = _Table(
    "entry_vectors",
    "org_id, entry_id, provider, model, dimension, content_hash, embedded_at, embedding, vseq",
    VECTOR_UPSERT,
)


_OUTBOX = _Table(
    "embed_outbox",
    "org_id, entry_id, content_hash",
    "ON CONFLICT (org_id, entry_id) DO UPDATE SET content_hash = excluded.content_hash, attempts = 0, "
    "last_error = NULL, available_at = now(), claimed_until = NULL, claimed_by = NULL "
    "WHERE embed_outbox.content_hash <> excluded.content_hash",
)


class StepWriter:
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

    def write(self, step: Step) -> None:
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
                marks = params(len(table.columns.split(", ")))
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

    def __enter__(self) -> StepWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.finish()
            return
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:  # the caller's error wins; the transaction rolls back
            with contextlib.suppress(psycopg.Error):
                pipeline.__exit__(kind, error, tb)
