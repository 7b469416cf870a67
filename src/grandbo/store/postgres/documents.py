"""The Postgres store's documents: small JSON records by collection, with their own append-only log.

Every statement about `documents` and `document_events` is here, erasing text from them included, so the
SQL the two backends share can replace it in one place. A write checks the version it expects under a row
lock (FOR UPDATE), appends its event and upserts the document; reads may pick keys out of the JSON in SQL.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from grandbo.ports import Document, DocumentEvent, DocumentLog, DocumentWrite, NewWork
from grandbo.redaction import erase_text
from grandbo.store.base import WRITE_ORDER, check_documents, document_conflict, not_empty, picked
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.dialect import ERASING, FOR_UPDATE, jsonb, upsert
from grandbo.store.postgres.pending import record_work


class DocumentsMixin(PostgresConnection):
    """Documents and their log, for `PostgresStore`."""

    def put_documents(
        self, org_id: str, writes: Sequence[DocumentWrite], actor: str, work: Sequence[NewWork] = ()
    ) -> list[Document]:
        check_documents(writes)
        out: list[Document] = []
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id)
            record_work(conn, org_id, work)  # the write-behinds it acknowledges, in its transaction
            for write in writes:
                row = conn.execute(
                    f"SELECT version FROM documents WHERE org_id = %s AND collection = %s AND doc_id = %s {FOR_UPDATE}",
                    (org_id, write.collection, write.doc_id),
                ).fetchone()
                found = row[0] if row else None
                if write.expected_version is not None and found != (write.expected_version or None):
                    raise document_conflict(org_id, write, found)
                (now,) = conn.execute(
                    "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, now()) RETURNING at",
                    (org_id, write.collection, write.doc_id, write.event, jsonb(write.data), actor),
                ).fetchone()  # type: ignore[misc]
                if write.data is None:
                    conn.execute(
                        "DELETE FROM documents WHERE org_id = %s AND collection = %s AND doc_id = %s",
                        (org_id, write.collection, write.doc_id),
                    )
                    continue
                version = (found or 0) + 1
                conn.execute(
                    "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s) "
                    + upsert("org_id, collection, doc_id", ("ref", "data", "version", "updated_at")),
                    (org_id, write.collection, write.doc_id, write.ref, jsonb(write.data), version, now),
                )
                out.append(Document(write.collection, write.doc_id, write.ref, write.data, version, now))
        return out

    def get_document(self, org_id: str, collection: str, doc_id: str) -> Document | None:
        found = self._documents(org_id, collection, "AND doc_id = %s", (doc_id,))
        return found[0] if found else None

    def find_documents(
        self,
        org_id: str,
        collection: str,
        refs: Sequence[str] | None = None,
        *,
        by_write: bool = False,
        keys: Sequence[str] | None = None,
    ) -> list[Document]:
        order = f"{WRITE_ORDER}, doc_id" if by_write else "doc_id"
        if refs is None:
            return self._documents(org_id, collection, "", (), order, keys)
        if not refs:
            return []
        return self._documents(org_id, collection, "AND ref = ANY(%s)", (list(refs),), order, keys)

    def oldest_documents(
        self,
        org_id: str,
        collection: str,
        before: datetime,
        limit: int,
        *,
        after: tuple[datetime, str] | None = None,
        keys: Sequence[str] | None = None,
    ) -> list[Document]:
        where, params = "AND updated_at < %s", tuple[Any, ...]((before,))
        if after is not None:
            where, params = f"{where} AND (updated_at, doc_id) > (%s, %s)", (before, *after)
        order = f"updated_at, doc_id LIMIT {int(limit)}"  # migration 10's index, in its order
        return self._documents(org_id, collection, where, params, order, keys)

    def _documents(
        self,
        org_id: str,
        collection: str,
        where: str,
        params: tuple[Any, ...],
        order: str = "doc_id",
        keys: Sequence[str] | None = None,
    ) -> list[Document]:
        data, asked = "data", tuple[str, ...]()
        if keys is not None:
            asked = tuple(part for key in keys for part in (key, key))
            pairs = ", ".join("%s::text, data -> %s::text" for _ in keys)
            data = f"CASE WHEN jsonb_typeof(data) = 'object' THEN jsonb_build_object({pairs}) ELSE data END"

        def read() -> list[Document]:
            with self._tx(org_id) as conn:
                rows = conn.execute(
                    f"SELECT doc_id, ref, {data}, version, updated_at FROM documents AS d "
                    f"WHERE org_id = %s AND collection = %s {where} ORDER BY {order}",
                    (*asked, org_id, collection, *params),
                ).fetchall()
            if keys is None:
                return [Document(collection, *row) for row in rows]
            return [Document(collection, doc_id, ref, picked(held), *rest) for doc_id, ref, held, *rest in rows]

        return self._retrying(read)

    # One collection's version: one read of the (org, collection, seq) index. Several are asked for one by one:
    # `collection = ANY(...)` is planned as a backward walk of the primary key past every newer event.
    _VERSION_OF = "(SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = %s AND collection = %s)"

    def documents_version(self, org_id: str, collections: Sequence[str] | None = None) -> int:
        if collections is not None:
            return max(self.documents_stamp(org_id, collections)[1], default=0)

        def read() -> int:
            with self._tx(org_id) as conn:
                row = conn.execute(
                    "SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = %s", (org_id,)
                ).fetchone()
            return int(row[0]) if row else 0

        return self._retrying(read)

    def documents_stamp(self, org_id: str, collections: Sequence[str]) -> tuple[int | None, list[int]]:
        columns = ", ".join(["(SELECT epoch FROM orgs WHERE org_id = %s)", *[self._VERSION_OF] * len(collections)])
        params = [org_id, *[part for collection in collections for part in (org_id, collection)]]

        def read() -> tuple[int | None, list[int]]:
            with self._tx(org_id) as conn:
                epoch, *versions = conn.execute(f"SELECT {columns}", params).fetchone()  # type: ignore[misc]
            return (int(epoch) if epoch is not None else None), [int(v) for v in versions]

        return self._retrying(read)

    def changed_documents(self, org_id: str, collection: str, after: int) -> tuple[list[Document], list[str]]:
        def read() -> tuple[list[Document], list[str]]:
            with self._tx(org_id) as conn:
                ids = list(
                    dict.fromkeys(  # each once, in the order they were written
                        r[0]
                        for r in conn.execute(
                            "SELECT doc_id FROM document_events WHERE org_id = %s AND collection = %s AND seq > %s "
                            "ORDER BY seq",
                            (org_id, collection, after),
                        )
                    )
                )
                rows = conn.execute(
                    "SELECT doc_id, ref, data, version, updated_at FROM documents "
                    "WHERE org_id = %s AND collection = %s AND doc_id = ANY(%s) ORDER BY doc_id",
                    (org_id, collection, ids),
                ).fetchall()
            found = [Document(collection, *row) for row in rows]
            present = {doc.doc_id for doc in found}
            return found, [doc_id for doc_id in ids if doc_id not in present]

        return self._retrying(read)

    def document_history(self, org_id: str, collection: str, doc_id: str) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            with self._tx(org_id) as conn:
                rows = conn.execute(
                    "SELECT seq, type, data, actor, at FROM document_events "
                    "WHERE org_id = %s AND collection = %s AND doc_id = %s ORDER BY seq",
                    (org_id, collection, doc_id),
                ).fetchall()
            return [{"seq": s, "type": t, "data": d, "actor": a, "at": at.isoformat()} for s, t, d, a, at in rows]

        return self._retrying(read)

    def document_log(self, org_id: str) -> DocumentLog:
        def read() -> DocumentLog:
            with self._tx(org_id) as conn:
                events = conn.execute(
                    "SELECT collection, doc_id, type, data, actor, at FROM document_events WHERE org_id = %s "
                    "ORDER BY seq",
                    (org_id,),
                ).fetchall()
                documents = conn.execute(
                    "SELECT collection, doc_id, ref, data, version, updated_at FROM documents WHERE org_id = %s "
                    "ORDER BY collection, doc_id",
                    (org_id,),
                ).fetchall()
            return DocumentLog([DocumentEvent(*row) for row in events], [Document(*row) for row in documents])

        return self._retrying(read)

    def load_documents(self, org_id: str, log: DocumentLog) -> int:
        check_documents([DocumentWrite(e.collection, e.doc_id, e.data, e.type) for e in log.events])
        check_documents([DocumentWrite(d.collection, d.doc_id, d.data, "load", d.ref) for d in log.documents])
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id)
            if conn.execute(
                "SELECT 1 FROM document_events WHERE org_id = %s UNION ALL SELECT 1 FROM documents WHERE org_id = %s",
                (org_id, org_id),
            ).fetchone():
                raise not_empty(org_id, "documents")
            cursor = conn.cursor()
            cursor.executemany(
                "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(org_id, e.collection, e.doc_id, e.type, jsonb(e.data), e.actor, e.at) for e in log.events],
            )
            cursor.executemany(
                "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(org_id, d.collection, d.doc_id, d.ref, jsonb(d.data), d.version, d.updated_at)
                 for d in log.documents],
            )  # fmt: skip
        return len(log.events)

    def erase_document_text(
        self, org_id: str, pattern: re.Pattern[str], audit: DocumentWrite, actor: str, *, only_if_found: bool = False
    ) -> tuple[int, int]:
        check_documents([audit])
        counts = [0, 0]
        with self._writing(org_id) as conn:
            self._require_org(conn, org_id)
            conn.execute(ERASING, (org_id,))  # migration 3
            for index, (table, key) in enumerate((("documents", "collection, doc_id"), ("document_events", "seq"))):
                rows = conn.execute(f"SELECT {key}, doc_id, data FROM {table} WHERE org_id = %s", (org_id,))
                for record in rows.fetchall():
                    if (erased := erase_text(record[-1], pattern, own_id=record[-2])) != record[-1]:
                        where = " AND ".join(f"{column} = %s" for column in key.split(", "))
                        conn.execute(f"UPDATE {table} SET data = %s WHERE org_id = %s AND {where}",
                                     (jsonb(erased), org_id, *record[:-2]))  # fmt: skip
                        counts[index] += 1
            if only_if_found and counts == [0, 0]:
                return 0, 0
            conn.execute(
                "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
                "VALUES (%s, %s, %s, %s, %s, %s, now())",
                (org_id, audit.collection, audit.doc_id, audit.event, jsonb(audit.data), actor),
            )
            conn.execute(
                "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
                "VALUES (%s, %s, %s, %s, %s, 1, now())",
                (org_id, audit.collection, audit.doc_id, audit.ref, jsonb(audit.data)),
            )
        self._vacuum("documents", "document_events")
        return counts[0], counts[1]
