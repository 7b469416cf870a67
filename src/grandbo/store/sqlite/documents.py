"""The embedded store's documents: the tiers' working state, each write an event. The SQL is the one both
backends run (`store/sql/documents.py`), spelled in this backend's dialect."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from datetime import datetime
from typing import Any

from pydantic_core import to_json

from grandbo.incarnation import Incarnation
from grandbo.model import utcnow
from grandbo.ports import Document, DocumentEvent, DocumentLog, DocumentWrite, NewWork, Only, Work
from grandbo.store.base import check_documents, loads_json, not_empty, picked
from grandbo.store.sql import storage
from grandbo.store.sql.documents import DocumentSQL, Prepared, SharedDocuments, page_of
from grandbo.store.sqlite.connection import Connection
from grandbo.store.sqlite.dialect import DOCUMENTS, chunks, json_text
from grandbo.store.sqlite.pending import complete_work_in, record_work

SQL = DocumentSQL(DOCUMENTS)


def _data(text: str, keys: Sequence[str] | None) -> Any:
    return loads_json(text) if keys is None else picked(loads_json(text))


class Documents(SharedDocuments, Connection):
    SQL = SQL

    def _replacing_secret(self) -> AbstractContextManager[None]:
        return self._leaving_no_copy("secret replaced")

    @staticmethod
    def _encoded(data: dict[str, Any]) -> str:
        return json_text(data)

    def _put_documents(
        self, org_id: str, prepared: Sequence[Prepared], actor: str, work: Sequence[NewWork],
        incarnation: Incarnation | None, done: Sequence[Work],
    ) -> list[Document]:  # fmt: skip
        at = utcnow()
        with self._write(org_id) as db:
            self._require_org(db, org_id, incarnation)
            complete_work_in(db, org_id, done)  # the leased work it completes: first, refused when done
            record_work(db, org_id, work)  # the write-behinds it acknowledges, in its transaction

            def logged(events: Sequence[Prepared]) -> datetime:  # every write of the call at one time
                when = at.isoformat()
                db.executemany(SQL.insert_event_now, [
                    (org_id, e.write.collection, e.write.doc_id, e.write.event, e.history.decode(), actor, when)
                    for e in events
                ])  # fmt: skip
                return at

            return self._put(db, org_id, prepared, logged)

    def _documents(
        self, org_id: str, collection: str, where: str, args: tuple[Any, ...], order: str = "doc_id", keys: Only = None
    ) -> list[Document]:
        data, asked = SQL.keyed(keys)
        with self._reading() as db:
            rows = db.execute(SQL.select(data, where, order), (*asked, org_id, collection, *args)).fetchall()
        return [
            Document(collection, r["doc_id"], r["ref"], _data(r["data"], keys), r["version"],
                     datetime.fromisoformat(r["updated_at"]))
            for r in rows
        ]  # fmt: skip

    def _read_rows(self, org_id: str, statements: Sequence[tuple[str, tuple[Any, ...]]]) -> list[list[Any]]:
        with self._read() as db:  # one snapshot; a reader's own transaction, no writer waits
            return [db.execute(sql, params).fetchall() for sql, params in statements]

    @staticmethod
    def _document(collection: str, row: Sequence[Any]) -> Document:
        doc_id, ref, data, version, updated_at = row
        return Document(collection, doc_id, ref, loads_json(data), version, datetime.fromisoformat(updated_at))

    def reading_documents(self, org_id: str) -> AbstractContextManager[None]:
        """Nothing: each read is a statement on a reader connection in this process, with no transaction, pooled
        connection or round trip of its own to save."""
        return nullcontext()

    def documents_version(self, org_id: str, collections: Sequence[str] | None = None) -> int:
        if collections is not None:
            return max(self.documents_stamp(org_id, collections)[1], default=0)
        with self._reading() as db:
            (version,) = db.execute(SQL.newest, (org_id,)).fetchone()
        return int(version)

    def documents_stamp(self, org_id: str, collections: Sequence[str]) -> tuple[int | None, list[int]]:
        query, params = SQL.stamp(org_id, collections)
        with self._reading() as db:
            epoch, *versions = db.execute(query, params).fetchone()
        return (int(epoch) if epoch is not None else None), [int(v) for v in versions]

    def count_documents(self, org_id: str, collection: str, most: int) -> int:
        with self._reading() as db:
            (count,) = db.execute(SQL.count_upto, (org_id, collection, most)).fetchone()
        return int(count)

    def changed_documents(
        self, org_id: str, collection: str, after: int, limit: int | None = None
    ) -> tuple[list[Document], list[str]] | None:
        with self._read() as db:
            writes = [r[0] for r in db.execute(*SQL.changes_since(org_id, collection, after, limit))]
            if limit is not None and len(writes) > limit:
                return None
            ids = list(dict.fromkeys(writes))  # each once, in the order they were written (the newest come last)
            found = []
            for chunk in chunks(ids):
                where, params = DOCUMENTS.any_of("doc_id", chunk)
                found += self._documents(org_id, collection, f"AND {where}", params)
        present = {doc.doc_id for doc in found}
        return found, [doc_id for doc_id in ids if doc_id not in present]

    def document_history(self, org_id: str, collection: str, doc_id: str) -> list[dict[str, Any]]:
        with self._reading() as db:
            rows = db.execute(SQL.history, (org_id, collection, doc_id)).fetchall()
        return [{"seq": r["seq"], "type": r["type"], "data": loads_json(r["data"]), "actor": r["actor"],
                 "at": r["at"]} for r in rows]  # fmt: skip

    def document_log(self, org_id: str) -> DocumentLog:
        with self._read() as db:
            events = db.execute(SQL.log_events, (org_id,)).fetchall()
            documents = db.execute(SQL.log_documents, (org_id,)).fetchall()
        return DocumentLog(
            [DocumentEvent(r["collection"], r["doc_id"], r["type"], loads_json(r["data"]), r["actor"],
                           datetime.fromisoformat(r["at"])) for r in events],
            [Document(r["collection"], r["doc_id"], r["ref"], loads_json(r["data"]), r["version"],
                      datetime.fromisoformat(r["updated_at"])) for r in documents],
        )  # fmt: skip

    def _log_rows(
        self, org_id: str, sql: str, params: tuple[Any, ...], data: int, at: int, limit: int
    ) -> tuple[list[list[Any]], bool]:
        with self._read() as db, closing(db.execute(sql, (org_id, *params))) as cursor:
            rows, more = page_of(((row, len(row[data])) for row in cursor), limit)  # stepped row by row
        for row in rows:
            row[data], row[at] = loads_json(row[data]), datetime.fromisoformat(row[at])
        return rows, more

    def load_documents(self, org_id: str, log: DocumentLog, incarnation: Incarnation | None = None) -> int:
        check_documents([DocumentWrite(e.collection, e.doc_id, e.data, e.type) for e in log.events])
        check_documents([DocumentWrite(d.collection, d.doc_id, d.data, "load", d.ref) for d in log.documents])
        histories = [to_json(event.data) for event in log.events]
        with self._write(org_id) as db:
            self._require_org(db, org_id, incarnation)
            if db.execute(SQL.any_held, (org_id, org_id)).fetchone():
                raise not_empty(org_id, "documents")
            storage.charge(db, DOCUMENTS, org_id, sum(map(len, histories)), self.storage_limit_mb)
            db.executemany(
                SQL.insert_event,
                [(org_id, e.collection, e.doc_id, e.type, history.decode(), e.actor, e.at.isoformat())
                 for e, history in zip(log.events, histories, strict=True)],
            )  # fmt: skip
            db.executemany(
                SQL.insert_document,
                [(org_id, d.collection, d.doc_id, d.ref, json_text(d.data), d.version, d.updated_at.isoformat())
                 for d in log.documents],
            )  # fmt: skip
        return len(log.events)
