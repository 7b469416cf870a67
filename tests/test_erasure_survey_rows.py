"""A purge of many entries holds one batch's rows of the documents quoting them at a time (review 30): its survey
kept every row quoting any of them, as the database gave it and rewritten, and each row's strings, for the whole
purge (5 batches of 2,000 documents: 114 MiB at its peak, where one batch's rows took 37). The survey keeps each
row's key and the ids it quotes; each batch reads its rows again by their keys just before its write, outside it,
and what was written since; its write re-reads what was written since that read."""

from __future__ import annotations

import tracemalloc

import grandbo.store.postgres.erasure as postgres_erasure
import grandbo.store.sqlite.erasure as sqlite_erasure
from grandbo.ports import DocumentWrite
from grandbo.store.sql import erasing

ENTRIES, BATCH, QUOTES, BODY = 50, 10, 100, 40_000  # five batches; 100 documents, each quoting one entry's 40 KB


def _module(grandbo):  # type: ignore[no-untyped-def]
    return sqlite_erasure if grandbo.settings.database_url is None else postgres_erasure


def _quote(entry_id: str, n: int) -> dict[str, object]:
    """A received alert's kept recall, quoting the entry (`erased.entry_erased`: a memory's shape)."""
    body = f"replica lag on the checkout service, quoted by alert {n} " * (BODY // 55)
    return {"summary": f"alert {n}", "recall": {"hits": [{"entry": {"id": entry_id, "kind": "finding",
                                                                     "title": "replica lag", "body": body}}]}}  # fmt: skip


def _quoting(grandbo, memory, count: int, first: int = 0) -> None:  # type: ignore[no-untyped-def]
    """Alerts a{first}... quoting E{first}... (modulo ENTRIES) in turn."""
    writes = [DocumentWrite("alert", f"a{n}", _quote(f"E{n % ENTRIES}", n), "alert.received")
              for n in range(first, first + count)]  # fmt: skip
    for start in range(0, len(writes), 10):
        grandbo._store.put_documents(memory.org, writes[start : start + 10], "test")


def _entries(memory) -> list[str]:  # type: ignore[no-untyped-def]
    memory.remember_many([{"id": f"E{n}", "title": f"replica lag {n}", "body": "the replica lagged"}
                          for n in range(ENTRIES)])  # fmt: skip
    return [f"E{n}" for n in range(ENTRIES)]


def _bodies_left(memory) -> list[str]:  # type: ignore[no-untyped-def]
    """The documents and history events (their documents' ids) still quoting an entry's body."""
    log = memory._documents.log()
    return [record.doc_id for record in [*log.documents, *log.events] if "quoted by alert" in str(record.data)]


def test_a_purge_of_many_batches_holds_one_batch_s_quoting_rows_at_a_time(grandbo, memory, monkeypatch):
    monkeypatch.setattr(_module(grandbo), "PURGE_BATCH", BATCH)
    ids = _entries(memory)
    _quoting(grandbo, memory, QUOTES)
    one_batch = 2 * (QUOTES // (ENTRIES // BATCH)) * BODY  # a batch's documents and their history events, as JSON
    tracemalloc.start()
    try:
        purged = grandbo._store.purge_many(memory.org, ids, "gdpr", "alice")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert purged == ids
    assert _bodies_left(memory) == []
    print(f"peak {peak / 1e6:.1f} MB, one batch's rows {one_batch / 1e6:.1f} MB")
    # before: 17 MB on SQLite, 9 on Postgres: the survey's rows of all five batches held throughout, and decoded
    assert peak < 3 * one_batch, (peak, one_batch)


def test_a_copy_written_after_a_batch_read_its_rows_is_erased_by_that_batch_s_write(grandbo, memory, monkeypatch):
    monkeypatch.setattr(_module(grandbo), "PURGE_BATCH", BATCH)
    ids = _entries(memory)
    _quoting(grandbo, memory, ENTRIES)
    find, written = erasing.DocumentRewrite.find, list[int]()

    def then_a_copy(self, conn):  # type: ignore[no-untyped-def]
        find(self, conn)
        if not written and memory.get("E39").title == "[purged]":  # the last batch's rows read, before its write
            written.append(1)
            _quoting(grandbo, memory, BATCH, first=QUOTES + ENTRIES - BATCH)  # new: a140-a149, quoting E40-E49
            changed = DocumentWrite("alert", "a40", _quote("E45", 999), "alert.received")  # read as quoting E40
            grandbo._store.put_documents(memory.org, [changed], "test")

    monkeypatch.setattr(erasing.DocumentRewrite, "find", then_a_copy)
    assert grandbo._store.purge_many(memory.org, ids, "gdpr", "alice") == ids
    assert written, "nothing was written between the last batch's read and its write"
    assert _bodies_left(memory) == []
