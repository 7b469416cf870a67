"""The embedded store's change feed (`ports.IndexFeed`): the watermarks, a consistent snapshot for the index
above the store, and the index images it saves."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

from grandbo.model import EmbeddingSpace, Status, utcnow
from grandbo.ports import IndexRow, Marks, StoredIndex
from grandbo.store import fence, projection
from grandbo.store.base import stored_index
from grandbo.store.sqlite.connection import Connection, Reader
from grandbo.store.sqlite.dialect import BEGIN_WRITE, REPLACE, vector_of
from grandbo.store.sqlite.entries import READ_COLUMNS, row_from_db

_MARKS = (
    "SELECT (SELECT coalesce(max(seq), 0) FROM memory_entries WHERE org_id = ?), "
    "       (SELECT coalesce(max(vseq), 0) FROM entry_vectors WHERE org_id = ?), "
    "       (SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = ?), "
    "       (SELECT epoch FROM orgs WHERE org_id = ?), "
    "       (SELECT value FROM store_meta WHERE key = 'provider'), "
    "       (SELECT value FROM store_meta WHERE key = 'model'), "
    "       (SELECT value FROM store_meta WHERE key = 'dimension'), "
    "       (SELECT language FROM orgs WHERE org_id = ?), "
    "       (SELECT incarnation FROM orgs WHERE org_id = ?), "
    f"      {fence.NEWEST}"
)


def _marks(db: sqlite3.Connection, org_id: str, hold: Callable[[int | None], None]) -> Marks:
    return _marks_of(db.execute(_MARKS, (org_id,) * 6).fetchone(), hold)


def _marks_of(row: Sequence[Any], hold: Callable[[int | None], None]) -> Marks:
    entry_seq, vector_seq, documents_seq, epoch, provider, model, dimension, language, incarnation, newest = row
    hold(newest)  # every recall reads them: a process a newer release left behind answers none
    space = EmbeddingSpace(provider=provider, model=model, dimension=int(dimension)) if provider else None
    return Marks(entry_seq, vector_seq, documents_seq, epoch, space, language, incarnation)


class Feed(Connection):
    def marks(self, org_id: str) -> Marks:
        """The org's watermarks. Every recall asks: on a pooled reader, those it read last are answered again while
        the file's `data_version` has not moved, which it does when any other connection commits (the store's own
        writer, `save_index`'s, another process's: SQLite checks the shared WAL index), and a reader writes nothing
        itself. Inside a transaction (a write, `consistent_read`) they are read."""
        with self._reading() as db:
            if not isinstance(db, Reader) or db.in_transaction:
                return _marks(db, org_id, self._hold)
            version = db.execute("PRAGMA data_version").fetchone()[0]
            if version != db.data_version:
                db.data_version, db.marks = version, {}
            row = db.marks.get(org_id)
            if row is None:
                row = db.marks[org_id] = tuple(db.execute(_MARKS, (org_id,) * 6).fetchone())
            return _marks_of(row, self._hold)

    @contextmanager
    def snapshot(self, org_id: str, *, vectors: bool = True, image: bool = False) -> Iterator[_Snapshot]:
        # On a reader connection of its own, not the store's: in WAL mode it reads one consistent snapshot while
        # the store's connection writes, so the index is built from it without the store's lock and every other
        # organization's reads and writes go on meanwhile.
        with self._pooled_reader() as db:
            db.execute("BEGIN")
            try:
                yield _Snapshot(db, org_id, _marks(db, org_id, self._hold))
            finally:
                db.execute("COMMIT")

    def save_index(self, org_id: str, image: StoredIndex) -> bool:
        # On a connection of its own, not under the store's lock: an image is megabytes (a 60,000-entry org's
        # vectors alone are 92 MB), and writing it under the lock held every other org's reads and writes for about
        # half a second. Other writers wait for the file's write lock meanwhile; readers (WAL) do not.
        at, space = image.marks, image.marks.space
        with self._image_lock:
            if self._image_db is None:
                self._image_db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                # secure_delete: an image replaced holds the words of entries a later purge erases, and its pages
                # freed must not keep them (this Python's SQLite has it on by default; the usual build does not).
                for pragma in (f"synchronous={self._synchronous}", "foreign_keys=ON", "secure_delete=ON",
                               f"busy_timeout={self.busy_timeout_ms}"):  # fmt: skip
                    self._image_db.execute(f"PRAGMA {pragma}")
            db = self._image_db
            db.execute(BEGIN_WRITE)  # the epoch and purges are read inside the write: a purge or drop cannot pass them
            try:
                self._hold(db.execute(f"SELECT {fence.NEWEST}").fetchone()[0])
                saved = db.execute(
                    f"{REPLACE} INTO index_images (org_id, epoch, language, provider, model, dimension, "
                    "entry_seq, vector_seq, data, saved_at) SELECT org_id, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM orgs "
                    f"WHERE org_id = ? AND epoch IS ? AND {projection.NONE_PURGED_SINCE.format(org='?', seq='?')}",
                    (at.epoch, at.language, *(_space_columns(space)), at.entry_seq, at.vector_seq, image.data,
                     utcnow().isoformat(), org_id, at.epoch, org_id, at.entry_seq),
                ).rowcount  # fmt: skip
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        return saved > 0


def _space_columns(space: EmbeddingSpace | None) -> tuple[str | None, str | None, int | None]:
    return (space.provider, space.model, space.dimension) if space else (None, None, None)


class _Snapshot:
    """`ports.FeedSnapshot` inside one read transaction on a reader connection (not under the store's lock)."""

    def __init__(self, db: sqlite3.Connection, org_id: str, marks: Marks) -> None:
        self._db, self._org, self.marks = db, org_id, marks
        self.backlog: int | None = None  # this store searches no vectors: its embed jobs are not counted here

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
            f"SELECT {READ_COLUMNS} FROM memory_entries WHERE org_id = ? AND seq > ? "
            "AND status = 'active' ORDER BY seq DESC LIMIT ?",
            (self._org, after_seq, limit),
        ):
            yield row_from_db(record)

    def stored(self, *, vectors: bool = True) -> StoredIndex | None:  # always whole: this store's index holds them
        # The image's bytes through SQLite's blob reader, which copies them without the GIL: selected as a column,
        # its megabytes of overflow pages were assembled while this thread held it, and every other request of the
        # process waited (py-spy under `grandbo bench tenants`: a fifth of a server's GIL in the random-org phase).
        found = self._db.execute(
            "SELECT rowid, epoch, language, provider, model, dimension, entry_seq, vector_seq FROM index_images i "
            f"WHERE org_id = ? AND {projection.NONE_PURGED_SINCE.format(org='i.org_id', seq='i.entry_seq')} "
            "AND EXISTS (SELECT 1 FROM orgs WHERE org_id = i.org_id)",  # a dropped org's, zeroed in pieces: never
            (self._org,),
        ).fetchone()
        if found is None:
            return None
        with self._db.blobopen("index_images", "data", found[0], readonly=True) as blob:
            data = blob.read()
        return stored_index((*found[1:], data))

    def vectors(self, after_vseq: int) -> Iterable[tuple[str, str, npt.NDArray[np.float32]]]:
        space = self.marks.space
        if space is None:
            return
        for entry_id, content_hash, blob in self._db.execute(
            "SELECT entry_id, content_hash, vector FROM entry_vectors WHERE org_id = ? AND vseq > ? "
            "AND provider = ? AND model = ? AND dimension = ? ORDER BY vseq",
            (self._org, after_vseq, space.provider, space.model, space.dimension),
        ):
            yield entry_id, content_hash, vector_of(blob)
