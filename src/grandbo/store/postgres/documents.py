"""The Postgres store's documents: small JSON records by collection, with their own append-only log.

The SQL is the one both backends run (`store/sql/documents.py`), spelled in this backend's dialect; erasing text
from documents is here too. A write checks the version it expects under a row lock (FOR UPDATE), appends its
event and upserts the document; reads may pick keys out of the JSON in SQL.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from pydantic_core import to_json

from grandbo.erased import erase_text
from grandbo.incarnation import Incarnation
from grandbo.ports import Document, DocumentEvent, DocumentLog, DocumentWrite, Forgetting, NewWork, Only, Work
from grandbo.store.base import check_documents, not_empty, picked
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.dialect import DOCUMENTS, ERASING, jsonb, jsonb_of
from grandbo.store.postgres.pending import complete_work_in, record_work
from grandbo.store.sql import storage
from grandbo.store.sql.documents import DocumentSQL, Prepared, SharedDocuments, page_of
from grandbo.store.sql.erasing import DocumentRewrite, counted, record_erasure

SQL = DocumentSQL(DOCUMENTS)
FETCH_BYTES = 2_000_000
"""The data an erasure's read fetches from its server-side cursor at once, about (`streamed`)."""
FETCH_ROWS = 50
"""The most rows one fetch takes: after small rows, a fetch of large ones holds this many at most."""


def streamed(
    conn: psycopg.Connection[Any], sql: str, params: Sequence[Any], data: int = -1
) -> Generator[tuple[Any, int], None, None]:
    """The rows of `sql` on `conn` (in its transaction), each with the size in bytes its column `data` was sent in,
    from a server-side cursor a few rows a fetch: a plain read has psycopg hold the whole result in libpq's memory,
    and an erasure's read of a text the database cannot filter by is every row of the org (437 MiB for 150 MB of
    documents, review 19). A fetch takes as many rows as FETCH_BYTES holds of the last fetch's largest: one first,
    then at most twice as many as the last, and FETCH_ROWS at most. A caller that stops early leaves the rest
    unfetched (close the generator inside the transaction)."""
    with conn.cursor(name=f"grandbo_read_{uuid.uuid4().hex[:16]}") as cursor:
        cursor.execute(sql, params)
        size = 1
        while rows := cursor.fetchmany(size):
            result = cursor.pgresult
            assert result is not None
            column = data % result.nfields
            lengths = [len(result.get_value(n, column) or b"") for n in range(result.ntuples)]  # as sent
            yield from zip(rows, lengths, strict=True)
            size = max(1, min(2 * size, FETCH_ROWS, FETCH_BYTES // max(1, *lengths)))


class DocumentsMixin(SharedDocuments, PostgresConnection):
    """Documents and their log, for `PostgresStore`."""

    SQL = SQL

    @staticmethod
    def _encoded(data: dict[str, Any]) -> Jsonb:
        return jsonb_of(to_json(data))

    def _put_documents(
        self, org_id: str, prepared: Sequence[Prepared], actor: str, work: Sequence[NewWork],
        incarnation: Incarnation | None, done: Sequence[Work],
    ) -> list[Document]:  # fmt: skip
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id, incarnation)
            complete_work_in(conn, org_id, done)  # the leased work it completes: first, refused when done
            record_work(conn, org_id, work)  # the write-behinds it acknowledges, in its transaction

            def logged(events: Sequence[Prepared]) -> datetime:  # the transaction's time, as Postgres has it
                conn.cursor().executemany(SQL.insert_event_now, [
                    (org_id, e.write.collection, e.write.doc_id, e.write.event, jsonb_of(e.history), actor)
                    for e in events
                ])  # fmt: skip
                (at,) = conn.execute("SELECT now()").fetchone()  # type: ignore[misc]  # every event's `at`
                return at  # type: ignore[no-any-return]

            return self._put(conn, org_id, prepared, logged)

    @contextmanager
    def _replacing_secret(self) -> Iterator[None]:
        yield
        self._vacuum("documents")  # the old secret's row version, once the write committed

    def _documents(
        self, org_id: str, collection: str, where: str, args: tuple[Any, ...], order: str = "doc_id", keys: Only = None
    ) -> list[Document]:
        data, asked = SQL.keyed(keys)

        def read() -> list[Document]:
            with self._tx(org_id, join=True) as conn:
                rows = conn.execute(SQL.select(data, where, order), (*asked, org_id, collection, *args)).fetchall()
            if keys is None:
                return [Document(collection, *row) for row in rows]
            return [Document(collection, doc_id, ref, picked(held), *rest) for doc_id, ref, held, *rest in rows]

        return self._retrying(read)

    def _read_rows(self, org_id: str, statements: Sequence[tuple[str, tuple[Any, ...]]]) -> list[list[Any]]:
        def read() -> list[list[Any]]:
            with self._tx(org_id, join=True) as conn:
                if len(statements) == 1:
                    return [conn.execute(*statements[0]).fetchall()]
                # Sent in one simple query, their parameters bound here as literals: one round trip, not one each
                # (a first recall's count of its runbooks' outcomes and the odd ones among them, `OrgDocuments.tally`).
                with psycopg.ClientCursor(conn) as cursor:
                    cursor.execute("; ".join(sql for sql, _ in statements), [p for _, ps in statements for p in ps])
                    rows = [cursor.fetchall()]
                    while cursor.nextset():
                        rows.append(cursor.fetchall())
                return rows

        return self._retrying(read)

    @staticmethod
    def _document(collection: str, row: Sequence[Any]) -> Document:
        return Document(collection, *row)

    def reading_documents(self, org_id: str) -> AbstractContextManager[None]:
        return self._reading_together(org_id)

    def documents_version(self, org_id: str, collections: Sequence[str] | None = None) -> int:
        if collections is not None:
            return max(self.documents_stamp(org_id, collections)[1], default=0)

        def read() -> int:
            with self._tx(org_id, join=True) as conn:
                row = conn.execute(SQL.newest, (org_id,)).fetchone()
            return int(row[0]) if row else 0

        return self._retrying(read)

    def documents_stamp(self, org_id: str, collections: Sequence[str]) -> tuple[int | None, list[int]]:
        query, params = SQL.stamp(org_id, collections)

        def read() -> tuple[int | None, list[int]]:
            with self._tx(org_id, join=True) as conn:
                epoch, *versions = conn.execute(query, params).fetchone()  # type: ignore[misc]
            return (int(epoch) if epoch is not None else None), [int(v) for v in versions]

        return self._retrying(read)

    def count_documents(self, org_id: str, collection: str, most: int) -> int:
        def read() -> int:
            with self._tx(org_id, join=True) as conn:
                row = conn.execute(SQL.count_upto, (org_id, collection, most)).fetchone()
            return int(row[0]) if row else 0

        return self._retrying(read)

    def changed_documents(
        self, org_id: str, collection: str, after: int, limit: int | None = None
    ) -> tuple[list[Document], list[str]] | None:
        def read() -> tuple[list[Document], list[str]] | None:
            with self._tx(org_id, join=True) as conn:
                writes = [r[0] for r in conn.execute(*SQL.changes_since(org_id, collection, after, limit))]
                if limit is not None and len(writes) > limit:
                    return None
                ids = list(dict.fromkeys(writes))  # each once, in the order they were written
                rows = conn.execute(
                    SQL.select("data", "AND doc_id = ANY(%s)", "doc_id"), (org_id, collection, ids)
                ).fetchall()
            found = [Document(collection, *row) for row in rows]
            present = {doc.doc_id for doc in found}
            return found, [doc_id for doc_id in ids if doc_id not in present]

        return self._retrying(read)

    def document_history(self, org_id: str, collection: str, doc_id: str) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            with self._tx(org_id, join=True) as conn:
                rows = conn.execute(SQL.history, (org_id, collection, doc_id)).fetchall()
            return [{"seq": s, "type": t, "data": d, "actor": a, "at": at.isoformat()} for s, t, d, a, at in rows]

        return self._retrying(read)

    def document_log(self, org_id: str) -> DocumentLog:
        def read() -> DocumentLog:
            with self._tx(org_id) as conn:
                events = conn.execute(SQL.log_events, (org_id,)).fetchall()
                documents = conn.execute(SQL.log_documents, (org_id,)).fetchall()
            return DocumentLog([DocumentEvent(*row) for row in events], [Document(*row) for row in documents])

        return self._retrying(read)

    def _log_rows(
        self, org_id: str, sql: str, params: tuple[Any, ...], data: int, at: int, limit: int
    ) -> tuple[list[list[Any]], bool]:
        def read() -> tuple[list[list[Any]], bool]:
            with self._tx(org_id) as conn, closing(streamed(conn, sql, (org_id, *params), data)) as rows:
                return page_of(rows, limit)

        return self._retrying(read)

    def load_documents(self, org_id: str, log: DocumentLog, incarnation: Incarnation | None = None) -> int:
        check_documents([DocumentWrite(e.collection, e.doc_id, e.data, e.type) for e in log.events])
        check_documents([DocumentWrite(d.collection, d.doc_id, d.data, "load", d.ref) for d in log.documents])
        histories = [to_json(event.data) for event in log.events]
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id, incarnation)
            if conn.execute(SQL.any_held, (org_id, org_id)).fetchone():
                raise not_empty(org_id, "documents")
            storage.charge(conn, DOCUMENTS, org_id, sum(map(len, histories)), self.storage_limit_mb)
            cursor = conn.cursor()
            cursor.executemany(
                SQL.insert_event,
                [(org_id, e.collection, e.doc_id, e.type, jsonb_of(history), e.actor, e.at)
                 for e, history in zip(log.events, histories, strict=True)],
            )  # fmt: skip
            cursor.executemany(
                SQL.insert_document,
                [(org_id, d.collection, d.doc_id, d.ref, jsonb(d.data), d.version, d.updated_at)
                 for d in log.documents],
            )  # fmt: skip
        return len(log.events)

    def _found(
        self, org_id: str, rewrite: Callable[[Any, str], Any], mentioning: Sequence[str] = (), holding: str = "",
        forget: Forgetting | None = None, quoting: Sequence[str] = (),
    ) -> DocumentRewrite:  # fmt: skip
        """An erasure's rewrite of the org's documents, the rows it changes found (`_find`)."""
        return self._find(org_id, DocumentRewrite(DOCUMENTS, org_id, rewrite, decode=lambda d: d, encode=jsonb,
                                                  mentioning=mentioning, holding=holding, stream=streamed,
                                                  forget=forget, quoting=quoting))  # fmt: skip

    def _find(self, org_id: str, found: DocumentRewrite) -> DocumentRewrite:
        """`found` with the rows it changes found in a read of their own, before the write takes the org's writer
        lock (`store.sql.erasing`): the org's writes go on meanwhile. The rows are read from a server-side cursor
        (`streamed`), never the whole result at once."""

        def read() -> DocumentRewrite:
            with self._tx(org_id) as conn:
                found.find(conn)
            return found

        return self._retrying(read)

    def erase_document_text(
        self, org_id: str, pattern: re.Pattern[str], audit: DocumentWrite, actor: str, *, only_if_found: bool = False,
        sieve: bool = False, holding: str = "",  # sieve: no use here, psycopg hands each row decoded
        incarnation: Incarnation | None = None, forget: Forgetting | None = None, work: Sequence[NewWork] = (),
    ) -> tuple[int, int]:  # fmt: skip
        check_documents([audit])
        found = self._found(org_id, lambda data, own_id: erase_text(data, pattern, own_id=own_id), holding=holding,
                            forget=forget)  # fmt: skip
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id, incarnation)
            conn.execute(ERASING, (org_id,))  # migration 3
            rewritten = found.apply(conn)
            if only_if_found and not (rewritten.documents or rewritten.events):
                return 0, 0
            recorded = record_erasure(conn, SQL, jsonb, org_id, audit, actor)
            record_work(conn, org_id, work)  # what finishes the erasure, should this process not (`tiers.erasure`)
            storage.charge(conn, DOCUMENTS, org_id, rewritten.history_bytes + recorded, limit_mb=0)
            counted(conn, DOCUMENTS, org_id)
        self._vacuum("documents", "document_events")
        return rewritten.documents + rewritten.forgotten, rewritten.events
