"""The Postgres store's change feed (`ports.IndexFeed`) and the saved images of the in-process search index.

The search index above the store reads the rows changed since its watermark from a snapshot: one transaction
in which every read stops at the marks taken first. An index image is saved only while the org's epoch is the
one it was built at, so an image that still holds a purged entry's words is never written after the purge.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg.rows import dict_row

from grandbo.errors import NotFoundError
from grandbo.model import EmbeddingSpace, Status
from grandbo.ports import IndexRow, Marks, StoredIndex
from grandbo.store import projection
from grandbo.store.base import stored_index
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.dialect import upsert
from grandbo.store.postgres.hnsw import index_name
from grandbo.store.postgres.rows import ENTRY_COLUMNS, row_from_db


class FeedMixin(PostgresConnection):
    """The change feed and index images, for `PostgresStore`."""

    # The org's HNSW index is looked up by name (`to_regclass`: NULL where there is none), one catalog probe.
    _MARK_COLUMNS = (
        "(SELECT coalesce(max(seq), 0) FROM memory_entries WHERE org_id = %(org)s), "
        "(SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = %(org)s), "
        "o.epoch, o.language, coalesce(o.vector_seq, 0), "
        "o.vector_index_wanted_at IS NOT NULL OR to_regclass(%(hnsw)s) IS NOT NULL, "
        "(SELECT value FROM store_meta WHERE key = 'provider'), (SELECT value FROM store_meta WHERE key = 'model'), "
        "(SELECT value FROM store_meta WHERE key = 'dimension'), o.incarnation"
    )
    _ORG = " FROM (SELECT 1) one LEFT JOIN orgs o ON o.org_id = %(org)s"
    _MARKS = "SELECT " + _MARK_COLUMNS + _ORG

    def marks(self, org_id: str) -> Marks:
        """The org's watermarks. Writers of one org hold its `orgs` row lock, so its sequence numbers (its
        entries', and its vector writes' in `orgs.vector_seq`) become visible in order and the highest one is a
        safe watermark.

        The space is the store's while the org's vectors are few enough to search in process: the index above
        holds them and computes the vector arm. An org that has its HNSW index, or has asked for it (it holds
        `hnsw_threshold` vectors: `_want_vector_index`), is searched here (`vector_search`): its marks carry no
        space and the index holds no vectors. Until that index exists pgvector scans exactly, as the index
        does, so the switch changes no answer; it happens once (an index is dropped only with its org)."""

        def read() -> Marks:
            with self._tx(org_id) as conn:
                return self._marks(conn, org_id)

        return self._retrying(read)

    # The marks and the org's image head in one statement (a first recall read them in two), and its embed jobs as
    # `embed_backlog` counts them: the recall that loads the image without vectors has the store search them, and
    # weighs that count for its verdict (`OrgSearch.waiting`), which made a statement of its own.
    _MARKS_AND_IMAGE = (
        "SELECT i.epoch, i.language, i.provider, i.model, i.dimension, i.entry_seq, i.vector_seq, i.data, "
        + _MARK_COLUMNS
        + ", (SELECT count(*) FROM embed_outbox WHERE org_id = %(org)s)"
        + _ORG
        + " LEFT JOIN index_images i ON i.org_id = %(org)s"
    )

    def _marks(self, conn: psycopg.Connection[Any], org_id: str) -> Marks:
        return self._read_marks(conn.execute(self._MARKS, {"org": org_id, "hnsw": index_name(org_id)}).fetchone())

    @staticmethod
    def _read_marks(found: Any) -> Marks:
        entry_seq, documents_seq, epoch, language, vector_seq, native, provider, model, dimension, incarnation = found
        in_process = provider is not None and not native
        space = EmbeddingSpace(provider=provider, model=model, dimension=int(dimension)) if in_process else None
        return Marks(entry_seq, vector_seq, documents_seq, epoch, space, language, incarnation)

    @contextmanager
    def snapshot(self, org_id: str, *, vectors: bool = True, image: bool = False) -> Iterator[_Snapshot]:
        # One REPEATABLE READ transaction: its rows and vectors are those of the marks' snapshot. Bounding each
        # read by the marks is not enough across the two: a row changed after the marks is left to the next
        # refresh, while its vector, numbered within them, is passed over for want of it and never read again.
        # Today no event changes an active entry's row but to retire it (a correction supersedes it under a new
        # id), so nothing is lost either way; an event that did would lose vectors without this. Rows alone are
        # bounded by the marks (READ COMMITTED): a first recall's snapshot is one round trip shorter.
        # Without vectors, in this thread's reads together of the org if open (a first recall's, its facts read next).
        with self.consistent_read(org_id) if vectors else nullcontext(), self._tx(org_id, join=True) as conn:
            if not image:
                yield _Snapshot(conn, org_id, self._marks(conn, org_id))
                return
            with conn.cursor(binary=True) as cursor:  # the image as bytes, not hex text to decode
                found = cursor.execute(self._MARKS_AND_IMAGE, {"org": org_id, "hnsw": index_name(org_id)}).fetchone()
            assert found is not None  # one row, with or without the org and its image
            head = tuple(found[:8]) if found[0] is not None else None
            yield _Snapshot(conn, org_id, self._read_marks(found[8:18]), [head], found[18])

    def save_index(self, org_id: str, image: StoredIndex) -> bool:
        at, space = image.marks, image.marks.space
        # The image's vectors in a column of their own (migration 18): a first recall reads `data` alone.
        split = image.vectors_at if image.vectors_at is not None else len(image.data)
        provider, model, dimension = (space.provider, space.model, space.dimension) if space else (None, None, None)
        with self._writing(org_id) as conn:
            # The org's writer lock first, as a purge takes it: a save of an index made before a purge then sees it
            # (`NONE_PURGED_SINCE`), where it would otherwise insert its image, with the purged entry's words, after
            # the purge deleted the old one.
            try:
                self._require_org(conn, org_id)
            except NotFoundError:
                return False  # dropped meanwhile: nothing to save
            return conn.execute(
                "INSERT INTO index_images (org_id, epoch, language, provider, model, dimension, entry_seq, "
                "vector_seq, data, vectors, saved_at) SELECT org_id, %(epoch)s, %(language)s, %(provider)s, "
                "%(model)s, %(dimension)s, %(entry_seq)s, %(vector_seq)s, %(data)s, %(vectors)s, now() FROM orgs "
                "WHERE org_id = %(org)s AND epoch IS NOT DISTINCT FROM %(epoch)s AND "
                + projection.NONE_PURGED_SINCE.format(org="%(org)s", seq="%(entry_seq)s")
                + " "
                + upsert("org_id", ("epoch", "language", "provider", "model", "dimension", "entry_seq", "vector_seq",
                                    "data", "vectors", "saved_at")),
                {"org": org_id, "epoch": at.epoch, "language": at.language, "provider": provider, "model": model,
                 "dimension": dimension, "entry_seq": at.entry_seq, "vector_seq": at.vector_seq,
                 "data": image.data[:split], "vectors": image.data[split:] if split < len(image.data) else None},
            ).rowcount > 0  # fmt: skip


class _Snapshot:
    """`ports.FeedSnapshot` inside one REPEATABLE READ transaction: every read sees the state the marks were taken
    in (each is bounded by them too), so what the index applies matches `marks` exactly."""

    def __init__(
        self, conn: psycopg.Connection[Any], org_id: str, marks: Marks,
        head: list[tuple[Any, ...] | None] | None = None, backlog: int | None = None,
    ) -> None:  # fmt: skip
        # `head`: the image's row without its vectors (or None: no image), read with the marks (`FeedMixin.snapshot`'s
        # `image`); None when it was not. `backlog`: the org's embed jobs, counted with them (None: not counted).
        self._conn, self._org, self.marks, self._head, self.backlog = conn, org_id, marks, head, backlog

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
                f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s AND seq > %s "
                "AND seq <= %s AND status = 'active' ORDER BY seq DESC LIMIT %s",
                (self._org, after_seq, self.marks.entry_seq, limit),
            )
            for record in cursor:
                yield row_from_db(record)

    def vectors(self, after_vseq: int) -> Iterable[tuple[str, str, npt.NDArray[np.float32]]]:
        space = self.marks.space
        if space is None:
            return
        with self._conn.cursor(binary=True) as cursor:  # each vector as pgvector's binary form, not text to parse
            cursor.execute(
                "SELECT entry_id, content_hash, embedding FROM entry_vectors WHERE org_id = %s AND vseq > %s "
                "AND vseq <= %s AND provider = %s AND model = %s AND dimension = %s ORDER BY vseq",
                (self._org, after_vseq, self.marks.vector_seq, space.provider, space.model, space.dimension),
            )
            for entry_id, content_hash, vector in cursor:
                yield entry_id, content_hash, vector.to_numpy()

    def stored(self, *, vectors: bool = True) -> StoredIndex | None:
        # Without the vectors, the image's head alone: its vectors are most of its bytes (3.6 MB against 0.68 at
        # 2,000 entries of 384 dimensions), and reading them made the org's first recall in a process 4 ms slower.
        # They are kept in a column of their own (the head read as a slice of one value took 0.25 ms more), read
        # by a query of its own (both columns in one result took twice as long as the two queries).
        with self._conn.cursor(binary=True) as cursor:  # the image as bytes, not hex text to decode
            if self._head is not None:
                (found,) = self._head
            else:
                found = cursor.execute(
                    "SELECT epoch, language, provider, model, dimension, entry_seq, vector_seq, data "
                    "FROM index_images WHERE org_id = %s",
                    (self._org,),
                ).fetchone()
            if found is None or not vectors:
                return stored_index(found)
            (tail,) = cursor.execute("SELECT vectors FROM index_images WHERE org_id = %s", (self._org,)).fetchone()  # type: ignore[misc]
        if tail is None:  # an image without vectors, or saved whole before migration 18
            return stored_index(found)
        *described, head = found
        return stored_index((*described, bytes(head) + bytes(tail), len(head)))
