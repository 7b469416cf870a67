"""The embedded store's vectors: written stamped with their space and the text they were computed from."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from grandbo.model import EmbeddingSpace, utcnow
from grandbo.store.sqlite.connection import Connection
from grandbo.store.sqlite.dialect import chunks, marks, vector_blob, vector_of


def write_vectors(
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
            (org_id, entry_id, space.provider, space.model, space.dimension, vector_blob(vector), content_hash,
             vseq + number, now, org_id, entry_id, content_hash)
            for number, (org_id, entry_id, content_hash, vector) in enumerate(vectors, start=1)
        ],
    )  # fmt: skip
    return max(0, cursor.rowcount)


class Vectors(Connection):
    def vectors(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        space = self.space()
        if space is None or not entry_ids:
            return {}
        found: dict[str, npt.NDArray[np.float32]] = {}
        with self._reading() as db:
            for chunk in chunks(entry_ids):
                for entry_id, blob in db.execute(
                    "SELECT v.entry_id, v.vector FROM entry_vectors v JOIN memory_entries e USING (org_id, entry_id) "
                    "WHERE v.org_id = ? AND v.provider = ? AND v.model = ? AND v.dimension = ? "
                    f"AND v.content_hash = e.content_hash AND v.entry_id IN ({marks(len(chunk))})",
                    (org_id, space.provider, space.model, space.dimension, *chunk),
                ).fetchall():
                    found[entry_id] = vector_of(blob).copy()
        return found
