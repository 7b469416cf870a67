"""The documents' SQL, the same on both backends but for the dialect's differences (`Dialect`).

A backend's documents module makes one `DocumentSQL(ITS_DIALECT)` and runs its statements; it keeps to itself
what is not SQL: its transactions, encoding JSON and times, decoding rows. What differs between the backends only
in its SQL is written once too (`SharedDocuments`): the reads, over the one read each backend runs its own way,
and a write, over the transaction each backend runs its own way (and the way it leaves no copy of a replaced
secret).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from operator import itemgetter
from typing import Any

from pydantic_core import to_json

from grandbo.incarnation import Incarnation
from grandbo.ports import (
    Document,
    DocumentEvent,
    DocumentLog,
    DocumentWrite,
    Matching,
    NewWork,
    Only,
    Position,
    Work,
)
from grandbo.store.base import WRITE_ORDER, check_documents, document_conflict, history_data
from grandbo.store.sql import storage
from grandbo.store.sql.dialect import KEPT_APART, Dialect, chunks
from grandbo.store.sql.tally import Tallying

Paths = Sequence[Sequence[str]]  # paths inside a document's data
EVENT_COLUMNS = "org_id, collection, doc_id, type, data, actor, at"
DOCUMENT_COLUMNS = "org_id, collection, doc_id, ref, data, version, updated_at"


class DocumentSQL:
    """Every statement of the documents' tables, spelled in one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = d = dialect
        p = d.param
        doc = f"org_id = {p} AND collection = {p} AND doc_id = {p}"
        self.versions = (
            f"SELECT doc_id, version FROM documents WHERE org_id = {p} AND collection = {p} AND {{}}{d.lock_row}"
        )
        """The versions of some documents of a collection before they are written, a format of the condition on
        their ids (parameters: org, collection, those of the condition)."""
        self.insert_event = f"INSERT INTO document_events ({EVENT_COLUMNS}) VALUES ({d.marks(7)})"
        self.insert_event_now = f"INSERT INTO document_events ({EVENT_COLUMNS}) VALUES ({d.marks(6)}, {d.now})"
        """An event written now (the time a parameter only where `dialect.now` is one)."""
        self.delete = f"DELETE FROM documents WHERE {doc}"
        self.one = f"AND doc_id = {p}"
        """`select`'s condition for one document (parameter: its id)."""
        self.insert_document = f"INSERT INTO documents ({DOCUMENT_COLUMNS}) VALUES ({d.marks(7)})"
        self.upsert = (
            f"{self.insert_document} ON CONFLICT (org_id, collection, doc_id) DO UPDATE SET "
            "ref = excluded.ref, data = excluded.data, version = excluded.version, updated_at = excluded.updated_at"
        )
        self.insert_first_now = (
            f"INSERT INTO documents ({DOCUMENT_COLUMNS}) VALUES ({d.marks(5)}, 1, {d.now}) "
            "ON CONFLICT (org_id, collection, doc_id) DO UPDATE SET ref = excluded.ref, data = excluded.data, "
            "version = documents.version + 1, updated_at = excluded.updated_at"
        )
        """A new document at version 1, written now (an erasure's audit record), or the next version of the one
        there (the record an erasure of a text wrote first, `running`: `tiers.erasure`)."""
        self.newest = f"SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = {p}"
        # One collection's version: one read of the (org, collection, seq) index. Several are asked for one by
        # one (an IN list or `= ANY(...)` walks every event of those collections).
        self.version_of = f"({self.newest} AND collection = {p})"
        self.epoch = f"(SELECT epoch FROM orgs WHERE org_id = {p})"
        self.count_upto = (
            f"SELECT count(*) FROM (SELECT 1 FROM documents WHERE org_id = {p} AND collection = {p} LIMIT {p}) AS held"
        )
        """A collection's documents counted no further than a number (parameters: org, collection, the number):
        the primary key's index alone."""
        self.changed = (
            f"SELECT doc_id FROM document_events WHERE org_id = {p} AND collection = {p} AND seq > {p} ORDER BY seq"
        )
        self.history = f"SELECT seq, type, data, actor, at FROM document_events WHERE {doc} ORDER BY seq"
        self.log_events = (
            f"SELECT collection, doc_id, type, data, actor, at FROM document_events WHERE org_id = {p} ORDER BY seq"
        )
        self.log_documents = (
            f"SELECT collection, doc_id, ref, data, version, updated_at FROM documents WHERE org_id = {p} "
            "ORDER BY collection, doc_id"
        )
        self.any_held = (
            f"SELECT 1 FROM document_events WHERE org_id = {p} UNION ALL SELECT 1 FROM documents WHERE org_id = {p}"
        )

    def select(self, data: str, where: str, order: str) -> str:
        """One collection's documents (parameters: those of `data`, org, collection, those of `where`)."""
        p = self.dialect.param
        return (
            f"SELECT doc_id, ref, {data} AS data, version, updated_at FROM documents AS d "
            f"WHERE org_id = {p} AND collection = {p} {where} ORDER BY {order}"
        )

    def keyed(self, keys: Sequence[str] | None) -> tuple[str, tuple[str, ...]]:
        """The `data` column as a read of some of its keys (`store.base.picked`), and its parameters; `keys`
        None: the whole of it. Each key goes as a parameter (quoted in a path: our own names, plain words)."""
        if keys is None:
            return "data", ()
        d = self.dialect
        asked = tuple(part for key in keys for part in (key, d.key_path.format(key)))
        pairs = ", ".join(f"{d.key_param}, data -> {d.key_param}" for _ in keys)
        return f"CASE WHEN {d.json_type}(data) = 'object' THEN {d.json_object}({pairs}) ELSE data END", asked

    def oldest(
        self, before: datetime, limit: int, after: tuple[datetime, str] | None
    ) -> tuple[str, tuple[Any, ...], str]:
        """The condition, its parameters and the order of `oldest_documents`: written before `before`, after
        (`after`'s time, doc id), in write order. Spelled so that the index of migration 10 (on `written`) is
        sought from `after` on, not walked from the start."""
        d, written = self.dialect, self.dialect.written
        where, params = f"AND {written} < {d.instant}", tuple[Any, ...]((d.time(before),))
        if after is not None:
            past, values = self._past(written, d.instant, (d.time(after[0]), after[1]), ">")
            where, params = where + past, (*params, *values)
        return where, params, f"{written}, doc_id LIMIT {int(limit)}"

    def newest_page(
        self, limit: int, before: tuple[datetime, str] | None, since: datetime | None, match: Matching
    ) -> tuple[str, tuple[Any, ...], str]:
        """The condition, its parameters and the order of `newest_documents`: each `match` path holding its value,
        written at or after `since`, before (`before`'s time, doc id), the most recently written first. The index
        of migration 10 (on `written`) is walked backwards from `before`; or, matching a value kept in a column
        apart, that column's index of migration 20, the column leading the order (one value: the same order), so
        that Postgres walks it for a match on no value (IS NULL) too rather than sorting what it matches."""
        d, written = self.dialect, self.dialect.written
        where, params = self.matching(match)
        apart = next((f"{KEPT_APART[path]} DESC, " for path in match if path in KEPT_APART), "")
        if since is not None:
            where += f" AND {written} >= {d.instant}"
            params = (*params, d.time(since))
        if before is not None:
            past, values = self._past(written, d.instant, (d.time(before[0]), before[1]), "<")
            where, params = where + past, (*params, *values)
        return where, params, f"{apart}{written} DESC, doc_id DESC LIMIT {int(limit)}"

    def ranged(
        self, low: str | None, high: str | None, limit: int, after: tuple[str, str] | None, descending: bool,
        match: Matching,
    ) -> tuple[str, tuple[Any, ...], str]:  # fmt: skip
        """The condition, its parameters and the order of `ranged_documents`: `ref` between `low` and `high`
        (inclusive), each `match` path holding its value, past `after` (a ref and doc id), in ref order. The index
        of migration 2 (on `ref`) is sought from the range's start, not walked."""
        p = self.dialect.param
        where, params = self.matching(match)
        if low is not None:
            where, params = f"{where} AND ref >= {p}", (*params, low)
        if high is not None:
            where, params = f"{where} AND ref <= {p}", (*params, high)
        if after is not None:
            past, values = self._past("ref", p, after, "<" if descending else ">")
            where, params = where + past, (*params, *values)
        way = " DESC" if descending else ""
        return where, params, f"ref{way}, doc_id{way} LIMIT {int(limit)}"

    def matching(self, match: Matching) -> tuple[str, tuple[Any, ...]]:
        """The condition that each `match` path holds its value (None: none), and its parameters."""
        d = self.dialect
        where = "".join(f" AND {d.text_of(path)} {'IS NULL' if value is None else '= ' + d.param}"
                        for path, value in match.items())  # fmt: skip
        return where, tuple(value for value in match.values() if value is not None)

    def _past(self, column: str, mark: str, position: tuple[Any, str], way: str) -> tuple[str, tuple[Any, ...]]:
        """The condition of a page's rows past `position` (a value of `column`, given as `mark`, and a doc id) in
        the order of (`column`, doc_id), `way` `>` (ascending) or `<`, and its parameters: a row value comparison,
        which seeks the index, where the dialect has one; otherwise spelled out."""
        value, doc_id = position
        if self.dialect.row_values:
            return f" AND ({column}, doc_id) {way} ({mark}, {self.dialect.param})", (value, doc_id)
        spelled = f" AND {column} {way}= {mark} AND ({column} {way} {mark} OR doc_id {way} {self.dialect.param})"
        return spelled, (value, value, doc_id)

    def log_page(
        self, documents: bool, holding: str, after: tuple[Any, ...] | None, limit: int
    ) -> tuple[str, tuple[Any, ...]]:
        """A page of the org's document log (parameters: the org first), its events by sequence or (`documents`) its
        documents by key, past `after` (the last one's sequence, or collection and id), only those whose JSON may hold
        `holding` (`Dialect.folded`; "" every one): what an erasure checks, read a page at a time."""
        d, where, params = self.dialect, "", tuple[Any, ...]()
        if after is not None and documents:
            where, params = self._past("collection", d.param, (after[0], after[1]), ">")
        elif after is not None:
            where, params = f" AND seq > {d.param}", after
        if holding:
            where, params = f"{where} AND {d.folded.format('data')}", (*params, holding.lower())
        columns = ("collection, doc_id, ref, data, version, updated_at" if documents
                   else "seq, collection, doc_id, type, data, actor, at")  # fmt: skip
        order = "collection, doc_id" if documents else "seq"
        table = "documents" if documents else "document_events"
        return (f"SELECT {columns} FROM {table} WHERE org_id = {d.param}{where} ORDER BY {order} LIMIT {int(limit)}",
                params)  # fmt: skip

    def changes_since(self, org_id: str, collection: str, after: int, limit: int | None) -> tuple[str, tuple[Any, ...]]:
        """The ids of the documents of each write of a collection after version `after`, in write order, and its
        parameters; with `limit`, of one more write than that at most (whether there were more is all it tells)."""
        if limit is None:
            return self.changed, (org_id, collection, after)
        return f"{self.changed} LIMIT {self.dialect.param}", (org_id, collection, after, limit + 1)

    def stamp(self, org_id: str, collections: Sequence[str]) -> tuple[str, list[str]]:
        """The org's epoch and each collection's version, in one row."""
        columns = ", ".join([self.epoch, *[self.version_of] * len(collections)])
        return f"SELECT {columns}", [org_id, *[part for collection in collections for part in (org_id, collection)]]


PAGE_BYTES = 4_000_000
"""The data a page of the org's document log holds, about (`SharedDocuments.document_pages`): a page ends after the
record that passes it, as well as after its count of records. Counted alone, 500 records of 200 KB were 100 MB a
read, and a text the database cannot filter by (`erased.erasure_probe` "") has every record read (review 19)."""


def page_of(rows: Iterable[tuple[Sequence[Any], int]], limit: int) -> tuple[list[list[Any]], bool]:
    """The rows of a page, each given as read with its data's size, up to `limit` rows or PAGE_BYTES of data, the
    rest left unread; and whether more may follow (the page ended early, or full)."""
    kept: list[list[Any]] = []
    held = 0
    for row, size in rows:
        kept.append(list(row))
        held += size
        if held >= PAGE_BYTES or len(kept) >= limit:
            return kept, True
    return kept, False


# A drop is recorded (`since_dropped`) only of an org holding an API key, active or revoked (a revoked key's document
# stays): no process's key cache (`tiers.key_cache`) holds a key of an org that never had one. Read in the drop's
# transaction, under what a key's write takes, on both backends.
HAS_KEYS = "SELECT 1 FROM documents WHERE org_id = {p} AND collection = 'api_key' LIMIT 1"


@dataclass(frozen=True, slots=True)
class Prepared:
    """A document write with its JSON made before the write's transaction: what its history records, serialized,
    and its data as the backend's column takes it (None: a delete)."""

    write: DocumentWrite
    history: bytes
    data: Any


class SharedDocuments(Tallying):
    """What both backends' documents do alike (`store.base.DocumentStore`), spelled by the backend's `SQL`: the
    reads, run by its `_documents`, and a write: checked, its old secret left nowhere (`_replacing_secret`), its
    version checked, run by its `_put_documents`."""

    SQL: DocumentSQL
    storage_limit_mb: int
    _keep_reserve: Callable[[], None]  # the backend's: a write that adds is refused on a disk under its reserve
    _read_rows: Callable[[str, Sequence[tuple[str, tuple[Any, ...]]]], list[list[Any]]]  # the backend's: statements of
    # the org run in one read transaction, each one's rows

    def put_documents(
        self, org_id: str, writes: Sequence[DocumentWrite], actor: str, work: Sequence[NewWork] = (),
        incarnation: Incarnation | None = None, done: Sequence[Work] = (),
    ) -> list[Document]:  # fmt: skip
        check_documents(writes)
        # Their JSON made before the write's transaction: a delivery of 500 alerts spent a third of the time it held
        # the SQLite store's write lock, which every other org's writes wait for, serializing it.
        prepared = [
            Prepared(write, to_json(history_data(write)), None if write.data is None else self._encoded(write.data))
            for write in writes
        ]
        if not any(write.secret for write in writes):
            return self._put_documents(org_id, prepared, actor, work, incarnation, done)
        with self._replacing_secret():  # the old secret must not stay in the store's files
            return self._put_documents(org_id, prepared, actor, work, incarnation, done)

    @staticmethod
    def _encoded(data: dict[str, Any]) -> Any:
        """A document's data as the backend's column takes it (JSON text, or jsonb of serialized JSON)."""
        raise NotImplementedError

    def _put_documents(
        self, org_id: str, prepared: Sequence[Prepared], actor: str, work: Sequence[NewWork],
        incarnation: Incarnation | None, done: Sequence[Work],
    ) -> list[Document]:  # fmt: skip
        """`put_documents` in the backend's write transaction (the org's `incarnation` checked first): the leased
        work `done` deleted (WorkDoneError when another runner did it), `work` recorded, then the writes (`_put`)."""
        raise NotImplementedError

    def _replacing_secret(self) -> AbstractContextManager[None]:
        """Around a write that replaces a secret: after it, no copy of the old one is left where the backend keeps
        old data (the SQLite file's free pages and write-ahead log, Postgres's dead row versions)."""
        raise NotImplementedError

    def _documents(
        self, org_id: str, collection: str, where: str, args: tuple[Any, ...], order: str = "doc_id", keys: Only = None
    ) -> list[Document]:
        """One collection's documents on the condition `where` (and its `args`), in `order`; `keys` as for
        `find_documents`. Each backend runs it in its own transaction and decodes the rows."""
        raise NotImplementedError

    def _versions(self, db: Any, org_id: str, writes: Sequence[DocumentWrite]) -> dict[tuple[str, str], int]:
        """The stored version of each document `writes` are about to write, by (collection, doc id), read on `db`
        (the backend's connection, in the write's transaction) under the dialect's row locks: one read for each
        CHUNK of a collection's ids."""
        wanted: dict[str, dict[str, None]] = {}
        for write in writes:
            wanted.setdefault(write.collection, {})[write.doc_id] = None
        found: dict[tuple[str, str], int] = {}
        for collection, ids in wanted.items():
            for chunk in chunks(list(ids)):
                among, values = self.SQL.dialect.any_of("doc_id", chunk)
                for doc_id, version in db.execute(self.SQL.versions.format(among), (org_id, collection, *values)):
                    found[collection, doc_id] = version
        return found

    def _put(
        self, db: Any, org_id: str, prepared: Sequence[Prepared], logged: Callable[[Sequence[Prepared]], datetime]
    ) -> list[Document]:
        """`put_documents`' writes on `db`, inside the backend's write transaction after it took the org's writer
        lock: what their history records charged to the org (`storage.charge`), then every write's version
        checked against those stored (`_versions`; a write that expects another is refused, ConflictError,
        before anything is written), their events logged (`logged`, which returns the time they were written at),
        then each document deleted, or upserted at the next version; the statements of a kind in a row are run
        together (`executemany`)."""
        # Deletes and essential writes (a key revoked) are counted, never refused: an org at its limit can still
        # take back what leaked and clear what it no longer needs.
        writes = [item.write for item in prepared]
        refusable = any(w.data is not None and not w.essential for w in writes)
        limit = self.storage_limit_mb if refusable else 0
        if refusable:
            self._keep_reserve()
        storage.charge(db, self.SQL.dialect, org_id, sum(len(item.history) for item in prepared), limit)
        versions: dict[tuple[str, str], int | None] = dict(self._versions(db, org_id, writes))
        planned: list[tuple[str, tuple[Any, ...]]] = []
        placed: list[tuple[DocumentWrite, dict[str, Any], int]] = []
        for item in prepared:
            write, key = item.write, (item.write.collection, item.write.doc_id)
            found = versions.get(key)  # a document written twice in one call: its first write's version
            if write.expected_version is not None and found != (write.expected_version or None):
                raise document_conflict(org_id, write, found)
            data = write.data
            if data is None:
                versions[key] = None
                planned.append((self.SQL.delete, (org_id, write.collection, write.doc_id)))
                continue
            versions[key] = version = (found or 0) + 1
            planned.append((self.SQL.upsert, (org_id, write.collection, write.doc_id, write.ref, item.data, version)))
            placed.append((write, data, version))
        at = logged(prepared)
        when = self.SQL.dialect.time(at)
        cursor = db.cursor()
        for statement, run in groupby(planned, key=itemgetter(0)):
            if statement is self.SQL.upsert:
                cursor.executemany(statement, [(*values, when) for _, values in run])
            else:
                cursor.executemany(statement, [values for _, values in run])
        return [Document(w.collection, w.doc_id, w.ref, data, version, at) for w, data, version in placed]

    def _log_rows(
        self, org_id: str, sql: str, params: tuple[Any, ...], data: int, at: int, limit: int
    ) -> tuple[list[list[Any]], bool]:
        """The rows of one `DocumentSQL.log_page`, read in a read of its own as far as `page_of` takes them (a few MB
        of data: the rest is never fetched), each one's column `data` decoded and `at` a datetime (the backend's
        decoding); and whether more may follow."""
        raise NotImplementedError

    def document_pages(self, org_id: str, holding: str, limit: int) -> Iterator[DocumentLog]:
        """`ports.OrgDocuments.pages`: the org's document log `limit` records or PAGE_BYTES of their data a read,
        whichever comes first (each page a read of its own: bounded memory), its events by sequence, then its
        documents by key, only those whose stored JSON may hold `holding` in any ASCII case (a filter, not a match:
        `erased.erasure_probe`; "" every record)."""
        for documents, data, at in ((False, 4, 6), (True, 3, 5)):
            after: tuple[Any, ...] | None = None
            more = True
            while more:
                page = self.SQL.log_page(documents, holding, after, limit)
                rows, more = self._log_rows(org_id, *page, data, at, limit)
                if not rows:
                    break
                if documents:
                    yield DocumentLog([], [Document(*row) for row in rows])
                else:
                    yield DocumentLog([DocumentEvent(*row[1:]) for row in rows], [])
                after = tuple(rows[-1][:2]) if documents else (rows[-1][0],)

    def get_document(self, org_id: str, collection: str, doc_id: str) -> Document | None:
        found = self._documents(org_id, collection, self.SQL.one, (doc_id,))
        return found[0] if found else None

    def find_documents(
        self, org_id: str, collection: str, refs: Only = None, *, ids: Only = None, by_write: bool = False,
        keys: Only = None, after: int | None = None,
    ) -> list[Document]:  # fmt: skip
        by_id = self.SQL.dialect.sort_apart.format("doc_id") if refs is not None and ids is None else "doc_id"
        order = f"{WRITE_ORDER}, doc_id" if by_write else by_id  # some refs: sought in their index, then sorted
        where, params = "", tuple[Any, ...]()
        for column, among in (("ref", refs), ("doc_id", ids)):  # doc_id: sought in the primary key, each once
            if among is None:
                continue
            if not among:
                return []
            condition, values = self.SQL.dialect.any_of(column, among)
            where, params = f"{where} AND {condition}", (*params, *values)
        if after is not None:  # the writes since, on the (org, collection, seq) index: not each document's newest
            where, params = f"{where} AND doc_id IN ({self.SQL.changed})", (*params, org_id, collection, after)
        return self._documents(org_id, collection, where, params, order, keys)

    def oldest_documents(
        self, org_id: str, collection: str, before: datetime, limit: int, *, after: Position = None, keys: Only = None
    ) -> list[Document]:
        where, params, order = self.SQL.oldest(before, limit, after)
        return self._documents(org_id, collection, where, params, order, keys)

    def newest_documents(
        self, org_id: str, collection: str, limit: int, *, before: Position = None, since: datetime | None = None,
        refs: Only = None, match: Matching | None = None, keys: Only = None,
    ) -> list[Document]:  # fmt: skip
        if refs is not None and not refs:
            return []
        where, params, order = self.SQL.newest_page(limit, before, since, match or {})
        if refs is not None:
            among, values = self.SQL.dialect.any_of("ref", refs)
            where, params = f"AND {among} {where}", (*values, *params)
        return self._documents(org_id, collection, where, params, order, keys)

    def ranged_documents(
        self, org_id: str, collection: str, low: str | None, high: str | None, limit: int, *,
        after: tuple[str, str] | None = None, descending: bool = False, match: Matching | None = None,
        keys: Only = None,
    ) -> list[Document]:  # fmt: skip
        where, params, order = self.SQL.ranged(low, high, limit, after, descending, match or {})
        return self._documents(org_id, collection, f"AND ref IS NOT NULL {where}", params, order, keys)
