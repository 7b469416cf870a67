"""An erasure's rewrite of one organization's documents and their history, written once for both backends.

A purge (copies of an entry's text in received alerts) and purge-text (a text in every document) rewrite the rows
of `documents` and `document_events` whose data holds what goes. Finding them means reading every row of the org
(purge-text decodes each and runs its pattern over it): on SQLite, inside the write that rewrites them, every
organization's writes waited for it (2.7 s at 250 MB of documents). So the rewrite runs in two passes:

- `DocumentRewrite.find`, in a read of its own before the write: the rows that change, with what each held and what
  it becomes, and the org's last history event then;
- `DocumentRewrite.apply`, inside the backend's erasure: each of those rows read again by its key and written
  (one changed meanwhile is rewritten from what it holds now), then the events written since the read and the
  documents they wrote, those that mention the text, rewritten the same way. Only those are read under the write's
  lock. Each document rewritten moves to its next version (`BUMPED`): a writer that read it before is stale. Each
  erasure counts itself in the org's row (`counted`): work that copies the org's text into entries or a kept
  recall, and read it before, is refused its writes after (`grandbo.unerased`).
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from grandbo.erased import ERASURES, entry_erased
from grandbo.model import utcnow
from grandbo.ports import DocumentWrite, Forgetting
from grandbo.store.sql import storage
from grandbo.store.sql.dialect import Dialect, chunks

if TYPE_CHECKING:
    from grandbo.store.sql.documents import DocumentSQL

PURGE_BATCH = 100
"""Entries purged in one transaction (`Store.purge_many`): a purge-text of a name 5,000 entries held took the write
lock 5,000 times, each a commit, a search of the org's documents for copies and an emptied write-ahead log (45 s,
another org's writes at 5x their p95); a batch holds the lock for tens of milliseconds, and other writes go between."""

KEYED = "collection, doc_id"  # a document's key
BUMPED = ", version = version + 1"
"""What an erasure sets on each document it rewrites besides its data: the next version, with no event of its own.
A read-modify-write that read the document before the erasure (a profile patch, a finding added, an alert
redelivered: each writes expecting the version it read) is then stale and reads it again, where it passed its
check and wrote the erased text back (probe 21, F4). No history event: the history logs what people and senders
changed (its events are rewritten too), and its order is the edit signals' fold order (`tiers.learning`), which
an erasure must not move; so a collection's version (its newest event) does not move either, and readers that keep
a collection's documents watch the erasures' audit records instead (`record_erasure`). Its write time stays:
retention counts from the last delivery or change, not from an erasure."""
ERASABLE = (("documents", KEYED), ("document_events", "seq"))
"""The tables whose `data` an erasure rewrites, each with the key its rows are updated by."""


class Rewritten(NamedTuple):
    """What a rewrite rewrote: how many documents and history events, by how many bytes the history's size
    changed (`storage.size`; less than none when text went), and how many documents it deleted (`forget`)."""

    documents: int
    events: int
    history_bytes: int
    forgotten: int = 0


def record_erasure(conn: Any, sql: DocumentSQL, encode: Callable[[Any], Any], org_id: str, audit: DocumentWrite,
                   actor: str) -> int:  # fmt: skip
    """Write an erasure's audit record, a new document and its first event, now (inside the erasure); return its
    size, for the org's count (`storage`)."""
    data, d = encode(audit.data), sql.dialect
    now = (utcnow().isoformat(),) if d.now == d.param else ()  # the time a parameter where the database has none
    conn.execute(sql.insert_event_now, (org_id, audit.collection, audit.doc_id, audit.event, data, actor, *now))
    conn.execute(sql.insert_first_now, (org_id, audit.collection, audit.doc_id, audit.ref, data, *now))
    return storage.size(audit.data)


COPY_KEYS = ('"body"', '"rank"', '"win_rate"', '"cites"')
"""What a document's stored JSON holds when it holds a copy of an entry's text (`erased.entry_erased`: a memory has a
body, a citation a rank, a runbook suggestion a win rate, a mechanism or a narrative's step cites): a purge of many
entries surveys the org's documents for copies once, reading only the rows that hold one of these (`purge_batches`),
where a search for each batch's ids read every row of the org once a batch, each against the batch's 100 ids (an
erasure of a name 5,000 imported incidents held took 281 s, 2,000 of them 23 s of CPU: probe 30)."""


def copies_erased(entry_ids: Sequence[str]) -> Callable[[Any, str], Any]:
    """A `DocumentRewrite`'s rewrite erasing the copies of those entries' text (`erased.entry_erased`)."""
    ids = frozenset(entry_ids)
    return lambda data, _: entry_erased(data, ids)


def purge_batches(
    found: Callable[..., DocumentRewrite], find: Callable[[DocumentRewrite], DocumentRewrite],
    entry_ids: Sequence[str], size: int,
) -> Iterator[tuple[list[str], Callable[[], DocumentRewrite]]]:  # fmt: skip
    """`entry_ids` (once each, in order) in batches of `size` (PURGE_BATCH), each with how to find the rewrite of
    their copies in the org's documents: called just before the batch's write, outside it (`found(rewrite, mentioning,
    quoting=...)`: the backend's read of the rows mentioning one of those texts; `find(rewrite)`: its read of a
    rewrite's rows). For one batch, the rows mentioning its ids; for more, the rows that may hold a copy (COPY_KEYS)
    surveyed once, each kept only as its key and the ids it quotes, and for each batch those quoting one of its ids
    read again by their keys (`DocumentRewrite.narrowed`): one batch's rows held at a time, where the survey held
    every batch's for the whole purge (5 batches of 2,000 documents: 114 MiB, one batch's 37)."""
    ids = list(dict.fromkeys(entry_ids))
    batches = list(chunks(ids, size))
    if len(batches) < 2:
        yield from ((batch, functools.partial(found, copies_erased(batch), batch)) for batch in batches)
        return
    survey = found(copies_erased(ids), COPY_KEYS, quoting=ids)

    def batch_found(batch: list[str]) -> DocumentRewrite:
        return find(survey.narrowed(copies_erased(batch), batch))

    yield from ((batch, functools.partial(batch_found, batch)) for batch in batches)


def erase_copies(conn: Any, sql: DocumentSQL, encode: Callable[[Any], Any], copies: DocumentRewrite, org_id: str,
                 entry_ids: list[str], reason: str, actor: str, *, logged: int = 0) -> bool:  # fmt: skip
    """Inside a purge (both backends' `_purge`): rewrite the copies of the entry's text `copies` found (each
    document at its next version, `BUMPED`); when there were any, record that in `ERASURES` (`record_erasure`: the
    rewrite wrote no event, so a reader that keeps the org's documents reads them again when that collection's
    version moves); then charge the
    org what its logs changed by, `logged` being what the purge's own events added (less than none: freed); whether
    it wrote anything (a purge of an entry purged already that found no copy writes nothing)."""
    rewritten = copies.apply(conn)
    recorded = 0
    if rewritten.documents or rewritten.events:
        data = {"reason": reason, "actor": actor, "at": utcnow().isoformat(), "entries": entry_ids,
                "documents": rewritten.documents, "document_events": rewritten.events}  # fmt: skip
        audit = DocumentWrite(ERASURES, f"erasure-{uuid.uuid4().hex[:12]}", data, "erased")
        recorded = record_erasure(conn, sql, encode, org_id, audit, actor)
    if logged or rewritten.documents or rewritten.events:
        storage.charge(conn, sql.dialect, org_id, logged + rewritten.history_bytes + recorded, limit_mb=0)
        counted(conn, sql.dialect, org_id)
    return bool(logged or rewritten.documents or rewritten.events)


def counted(conn: Any, dialect: Dialect, org_id: str) -> None:
    """Count an erasure of the org in its transaction (`orgs.erasures`): work that read the org's text before it
    commits writes nothing after it (`grandbo.unerased`)."""
    conn.execute(f"UPDATE orgs SET erasures = erasures + 1 WHERE org_id = {dialect.param}", (org_id,))


def migration(integer: str) -> tuple[int, str, list[str]]:
    """Migration 27 as each backend's list holds it (`integer`: the backend's column type)."""
    what = "each organization's count of erasures: what work that copies its text is fenced by (`grandbo.unerased`)"
    return 27, what, [f"ALTER TABLE orgs ADD COLUMN erasures {integer} NOT NULL DEFAULT 0"]


Stream = Callable[[Any, str, tuple[Any, ...]], Iterator[tuple[Sequence[Any], int]]]
"""A read's rows on a connection, one at a time, each with its data's size (`DocumentRewrite`)."""


def _stepped(conn: Any, sql: str, params: tuple[Any, ...]) -> Iterator[tuple[Sequence[Any], int]]:
    """A read's rows as a cursor steps through them (SQLite's: one row in memory at a time)."""
    return ((row, 0) for row in conn.execute(sql, params))


@dataclass(frozen=True)
class _Row:
    table: str
    key: str
    keys: tuple[Any, ...]
    collection: str  # of the document the row is (of)
    own_id: str  # the id of the document the row is (of)
    held: Any  # its data as the database gave it
    erased: Any  # decoded and rewritten
    grown: int  # by how many bytes the rewrite changed a history event's size (`storage.size`; 0 for a document)
    forgets: tuple[tuple[str, str], ...] = ()  # the documents deleted with its rewrite (`forget`)


class _Quoting(NamedTuple):
    """A row a purge's survey found holding a copy (`DocumentRewrite.narrowed`): only its table, its key's values and
    the purged entries' ids it holds as whole JSON strings, not its data."""

    table: str
    keys: tuple[Any, ...]
    quoted: frozenset[str]


class DocumentRewrite:
    """One erasure's rewrite of an org's documents and history (see the module): `rewrite(data, its document's id)`
    where that changes it; `forget(collection, data, rewritten)`: the documents (collection, id) deleted with their
    history where a row is rewritten (what would let the text be found again from them: a rejected rule's digest,
    `tiers.erasure`); `mentioning`: only rows whose data holds one of those texts; `holding`: only rows whose
    data may hold that text in any ASCII case (`Dialect.folded`); `sieve`: see `_changed`; `quoting`: a purge's
    survey, which keeps each row that changes only as its key and which of these ids it quotes (`narrowed`). The
    backend decodes and encodes `data` its own way, and `stream`s a read's rows (with their data's size) its own way:
    SQLite's cursor steps row by row, psycopg's plain one holds the whole result (`postgres.documents.streamed`)."""

    def __init__(
        self, dialect: Dialect, org_id: str, rewrite: Callable[[Any, str], Any], *, decode: Callable[[Any], Any],
        encode: Callable[[Any], Any], mentioning: Sequence[str] = (), sieve: re.Pattern[str] | None = None,
        holding: str = "", stream: Stream | None = None, forget: Forgetting | None = None,
        quoting: Collection[str] = (),
    ) -> None:  # fmt: skip
        self._stream, self._forget = stream or _stepped, forget
        self._d, self._org, self._rewrite, self._holding = dialect, org_id, rewrite, holding.lower()
        self._decode, self._encode, self._mentioning, self._sieve = decode, encode, list(mentioning), sieve
        self._found: list[_Row] | None = None
        self._quoting, self._quotes = frozenset(quoting), list[_Quoting]()  # a survey's rows (`quoting`)
        self._picked: list[_Quoting] | None = None  # a narrowed rewrite's rows, read by their keys (`narrowed`)
        self._seq = 0  # the org's last history event when the rows were found
        self._since = 0  # a narrowed rewrite's: the survey's `_seq`, after which it reads what was written

    def find(self, conn: Any) -> None:
        """Find the rows that change and what each becomes, on `conn` (a read, before the erasure's write): every row
        of the org (mentioning the text); a narrowed rewrite's by their keys, and what was written since its survey."""
        p = self._d.param
        (self._seq,) = conn.execute(f"SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = {p}",
                                    (self._org,)).fetchone()  # fmt: skip
        self._found, self._quotes = [], []
        if self._picked is not None:
            self._found = self._read_again(conn)
            return
        for table, key in ERASABLE:
            for *keys, collection, own_id, held in (tuple(r) for r, _ in self._stream(conn, *self._rows(table, key))):
                if table == "document_events" and keys[0] > self._seq:
                    continue  # written after the mark (a read that is not one snapshot, Postgres's): `apply`'s
                if self._quoting:
                    self._quotes += self._quoted(table, tuple(keys), own_id, held)
                else:
                    self._found += self._changed(table, key, tuple(keys), collection, own_id, held)

    def narrowed(self, rewrite: Callable[[Any, str], Any], mentioning: Sequence[str]) -> DocumentRewrite:
        """A rewrite of this survey's rows (`quoting`) as `rewrite` changes them, without a read: those that held one
        of `mentioning` as a whole JSON string (a batch of a purge, `purge_batches`). Its `find` reads them again by
        their keys, and what was written since the survey that mentions one; its `apply`, as any rewrite's, reads
        again each of its rows and what was written since its `find`, so a copy written between the batches is
        erased."""
        assert self._found is not None, "find() first, in a read of its own"
        narrow = DocumentRewrite(self._d, self._org, rewrite, decode=self._decode, encode=self._encode,
                                 mentioning=mentioning, stream=self._stream, forget=self._forget)  # fmt: skip
        wanted = set(mentioning)
        narrow._since, narrow._picked = self._seq, [row for row in self._quotes if not wanted.isdisjoint(row.quoted)]
        return narrow

    def apply(self, conn: Any) -> Rewritten:
        """Write the rewrites on `conn`, inside the backend's erasure of the org: what `find` found, each row read
        again by its key, then what was written since; then the documents `forget` names deleted, with their history.
        Once: it lets go of the rows it found (a purge's batches hold one batch's at a time)."""
        assert self._found is not None, "find() first, in a read of its own"
        found, self._found, rows = self._found, None, list[_Row]()
        for row in found:
            now = self._now(conn, row.table, row.key, row.keys)
            if now is not None:  # a document deleted since has nothing left to rewrite
                rows += [row] if now == row.held else self._changed(row.table, row.key, row.keys, row.collection,
                                                                    row.own_id, now)  # fmt: skip
        rows += self._written(conn, self._seq, None, {row.keys for row in rows if row.table == "documents"})
        counts = {"documents": 0, "document_events": 0}
        for row in rows:
            conn.execute(self.update(row.table, row.key), (self._encode(row.erased), self._org, *row.keys))
            counts[row.table] += 1
        forgotten, freed = self._forgotten(conn, {key: None for row in rows for key in row.forgets})
        history_bytes = sum(row.grown for row in rows) - freed
        return Rewritten(counts["documents"], counts["document_events"], history_bytes, forgotten)

    def _forgotten(self, conn: Any, keys: Iterable[tuple[str, str]]) -> tuple[int, int]:
        """Delete those documents and every event of their history (no event says so: the history would name them);
        how many documents there were, and the bytes of history freed (`storage.size`)."""
        deleted = freed = 0
        for collection, doc_id in keys:
            p = self._d.param
            where = f"org_id = {p} AND collection = {p} AND doc_id = {p}"
            events = conn.execute(f"SELECT data FROM document_events WHERE {where}", (self._org, collection, doc_id))
            freed += sum(storage.size(self._decode(data)) for (data,) in map(tuple, events.fetchall()))
            conn.execute(f"DELETE FROM document_events WHERE {where}", (self._org, collection, doc_id))
            deleted += conn.execute(f"DELETE FROM documents WHERE {where}", (self._org, collection, doc_id)).rowcount
        return deleted, freed

    def _now(self, conn: Any, table: str, key: str, keys: tuple[Any, ...]) -> Any:
        """One row's data as it is now, or None when it is gone."""
        found = conn.execute(f"SELECT data FROM {table} WHERE {self._keyed(key)}", (self._org, *keys)).fetchone()
        return None if found is None else found[0]

    def update(self, table: str, key: str) -> str:
        """The statement rewriting one row's data (parameters: the data, the org, the key's values). A document
        gets the next version (`BUMPED`); a history event keeps its sequence number."""
        bumped = BUMPED if table == "documents" else ""
        return f"UPDATE {table} SET data = {self._d.param}{bumped} WHERE {self._keyed(key)}"

    def _keyed(self, key: str) -> str:
        """One row of the org by its key (parameters: the org, the key's values)."""
        p = self._d.param
        return " AND ".join([f"org_id = {p}", *(f"{column} = {p}" for column in key.split(", "))])

    def _changed(
        self, table: str, key: str, keys: tuple[Any, ...], collection: str, own_id: str, held: Any
    ) -> list[_Row]:
        """The row, with what it becomes, when the rewrite changes it; else nothing. A row given as JSON text that
        the `sieve` finds nothing in, and that escapes no character as `\\u....`, holds none of the text: it is not
        decoded (`erased.sieves`: most of a purge-text's pass, at 250 MB of documents)."""
        if self._sieve is not None and isinstance(held, str) and "\\u" not in held and not self._sieve.search(held):
            return []
        data = self._decode(held)
        if (erased := self._rewrite(data, own_id)) == data:
            return []
        grown = storage.size(erased) - storage.size(data) if table == "document_events" else 0  # the logs' count
        forgets = tuple(self._forget(collection, data, erased)) if self._forget is not None else ()
        return [_Row(table, key, keys, collection, own_id, held, erased, grown, forgets)]

    def _mentions(self) -> tuple[str, tuple[str, ...]]:
        where, asked = "", tuple(self._mentioning)
        if self._mentioning:
            where = " AND (" + " OR ".join([self._d.mentions.format("data")] * len(self._mentioning)) + ")"
        if self._holding:
            where, asked = f"{where} AND {self._d.folded.format('data')}", (*asked, self._holding)
        return where, asked

    def _rows(self, table: str, key: str) -> tuple[str, tuple[Any, ...]]:
        """Every row of the org in `table` (those mentioning the text): its key, its document's collection and id,
        its data."""
        where, asked = self._mentions()
        sql = f"SELECT {key}, collection, doc_id AS own_id, data FROM {table} WHERE org_id = {self._d.param}{where}"
        return sql, (self._org, *asked)

    def _written(self, conn: Any, after: int, upto: int | None, known: set[tuple[Any, ...]]) -> list[_Row]:
        """The history events written after the org's event `after` (up to `upto`), and the documents they wrote but
        those `known` (keys), that mention the text (`_mentions`; a document that does not holds nothing to rewrite:
        an alert storm during a long purge wrote thousands, each read and decoded under the write's lock), each with
        what it becomes."""
        p = self._d.param
        where, asked = self._mentions()
        since, bounds = f"org_id = {p} AND seq > {p}", (self._org, after, *([] if upto is None else [upto]))
        if upto is not None:
            since += f" AND seq <= {p}"
        events = f"SELECT seq, collection, doc_id AS own_id, data FROM document_events WHERE {since}{where}"
        rows: list[_Row] = []
        for seq, collection, own_id, held in map(tuple, conn.execute(events, (*bounds, *asked))):
            rows += self._changed("document_events", "seq", (seq,), collection, own_id, held)
        written = conn.execute(f"SELECT DISTINCT collection, doc_id FROM document_events WHERE {since}", bounds)
        keys = [key for key in map(tuple, written.fetchall()) if key not in known]
        for sql, params in self._by_keys("documents", KEYED, keys, where, asked):
            for _, _, collection, doc_id, held in map(tuple, conn.execute(sql, params)):
                rows += self._changed("documents", KEYED, (collection, doc_id), collection, doc_id, held)
        return rows

    def _quoted(self, table: str, keys: tuple[Any, ...], own_id: str, held: Any) -> list[_Quoting]:
        """A survey's row (`quoting`) when the rewrite changes it: its key and the ids it quotes, not its data."""
        data = self._decode(held)
        if self._rewrite(data, own_id) == data:
            return []
        return [_Quoting(table, keys, self._quoting.intersection(_strings(data)))]

    def _read_again(self, conn: Any) -> list[_Row]:
        """A narrowed rewrite's rows (`narrowed`) read by their keys, then what was written since its survey up to
        this read's mark (`_written`), each with what it becomes."""
        assert self._picked is not None
        found: list[_Row] = []
        for table, key in ERASABLE:
            for sql, params in self._by_keys(table, key, [row.keys for row in self._picked if row.table == table]):
                for *keys, collection, own_id, held in (tuple(r) for r, _ in self._stream(conn, sql, params)):
                    found += self._changed(table, key, tuple(keys), collection, own_id, held)
        documents = {row.keys for row in self._picked if row.table == "documents"}
        return found + self._written(conn, self._since, self._seq, documents)

    def _by_keys(
        self, table: str, key: str, keys: list[tuple[Any, ...]], where: str = "", asked: tuple[Any, ...] = ()
    ) -> Iterator[tuple[str, tuple[Any, ...]]]:
        """Reads of those rows of `table` by their keys' values, a chunk of them a statement (`_rows`'s columns);
        `where` (`_mentions`, its parameters `asked`): only those whose data mentions the text."""
        p = self._d.param
        select = f"SELECT {key}, collection, doc_id AS own_id, data FROM {table} WHERE org_id = {p}"
        *firsts, column = key.split(", ")
        groups: dict[tuple[Any, ...], list[Any]] = {}  # the values of the key's last column, by the others'
        for *others, last in keys:
            groups.setdefault(tuple(others), []).append(last)
        for first, lasts in groups.items():
            fixed = "".join(f" AND {name} = {p}" for name in firsts)
            for chunk in chunks(lasts):
                of, values = self._d.any_of(column, chunk)
                yield f"{select}{fixed} AND {of}{where}", (self._org, *first, *values, *asked)


def _strings(value: Any) -> Iterator[str]:
    """Every string a JSON value holds, its keys' too."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
