"""An erasure reads the org's documents by bytes as well as by count: a text with no run the database can filter by
(a Cyrillic name, "kiss kiss": `erased.erasure_probe` is "") has every record read, and 500 records of 200 KB
were 100 MB a read (review 19 #4). The check (`tiers.erasure._refuse`) reads pages that stop after a few MB of
data, and the rewrite (`store.sql.erasing.DocumentRewrite.find`) streams the rows, on Postgres from a server-side
cursor a few MB a fetch (psycopg held the whole result in libpq's memory, which tracemalloc does not see: the
process's peak resident size is measured too, on Postgres)."""

from __future__ import annotations

import re
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import grandbo.store.postgres.documents as postgres_documents
import grandbo.store.postgres.erasure as postgres_erasure
import grandbo.store.sql.documents as sql_documents
import grandbo.store.sqlite.erasure as sqlite_erasure
from grandbo.erased import erasure_probe
from grandbo.ports import DocumentWrite
from grandbo.retrieval.search import OrgSearch
from tests.test_erasure_batches import dying_at_the_second_batch

# 15 MB of documents, twice that with their history: a read of them all at once (the page of 500 records before)
# peaks near 30 MB, twice the bound below; a read a few MB at a time peaks under 10 MB however many there are.
COUNT, SIZE = 75, 200_000
STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def _documents(grandbo, memory) -> None:  # type: ignore[no-untyped-def]
    blob = "the cache evicted keys under memory pressure " * (SIZE // 46)
    for start in range(0, COUNT, 10):
        writes = [DocumentWrite("alert", f"a{n}", {"summary": f"alert {n}", "recall": [blob]}, "alert.received")
                  for n in range(start, min(COUNT, start + 10))]  # fmt: skip
        grandbo._store.put_documents(memory.org, writes, "test")


def _kib(field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", STATUS.read_text(), re.M)
    return int(found.group(1)) if found else 0


def _peaks(run: Callable[[], Any]) -> tuple[Any, int, int | None]:
    """What `run` returned, the peak of Python's allocations during it, and the process's resident size's peak
    above where it started (None where Linux cannot reset the peak)."""
    try:
        CLEAR_REFS.write_text("5")  # VmHWM := VmRSS
        start: int | None = _kib("VmRSS")
    except OSError:
        start = None
    tracemalloc.start()
    try:
        result = run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak, None if start is None else (_kib("VmHWM") - start) * 1024


@pytest.mark.parametrize("text", ["Жанна Рой", "kiss kiss"])
def test_an_erasure_of_a_text_without_a_run_holds_a_few_mb_of_the_documents_at_most(grandbo, memory, backend, text):
    assert erasure_probe(text) == ""  # every record read
    _documents(grandbo, memory)
    report, peak, resident = _peaks(lambda: memory.erasure.purge_text(text, reason="gdpr", actor="alice"))
    assert not report.found
    print(f"peak {peak / 1e6:.1f} MB, resident {resident and resident / 1e6} MB")
    assert peak < 15_000_000, peak  # before: 30 MB (a page of 500 records, every one read)
    if backend == "postgres":  # SQLite's reads map the file (mmap_size): its pages are resident, not held
        assert resident is None or resident < 12_000_000, resident  # before: 19 MB (libpq held the whole result)


def test_a_later_batch_failing_still_tells_the_index_of_those_purged(grandbo, memory, monkeypatch):
    module = postgres_erasure if grandbo.settings.database_url else sqlite_erasure
    monkeypatch.setattr(module, "PURGE_BATCH", 4)
    memory.remember_many([{"id": f"E{n}", "title": f"replica lag {n}", "body": "call Jane Roe"} for n in range(10)])
    told: list[int] = []
    dying_at_the_second_batch(monkeypatch, module)
    monkeypatch.setattr(OrgSearch, "purged", lambda self: told.append(1))
    with pytest.raises(RuntimeError):
        memory.erasure.purge_text("Jane Roe", reason="gdpr", actor="alice")
    assert [n for n in range(10) if memory.get(f"E{n}").title == "[purged]"] == [0, 1, 2, 3]
    assert told == [1]  # before: none, the first batch's purge untold


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the embedded store's batches wait for other writers
def test_the_embedded_store_gives_other_writers_a_turn_between_batches_only(grandbo, memory, backend, monkeypatch):
    monkeypatch.setattr(sqlite_erasure, "PURGE_BATCH", 4)
    memory.remember_many([{"id": f"E{n}", "title": f"replica lag {n}", "body": "call Jane Roe"} for n in range(10)])
    slept: list[float] = []
    monkeypatch.setattr(sqlite_erasure, "time", SimpleNamespace(sleep=slept.append, monotonic=time.monotonic))
    report = memory.erasure.purge_text("Jane Roe", reason="gdpr", actor="alice")
    assert len(report.entries) == 10
    assert len(slept) == 2, slept  # three batches; before: a sleep after the last one too


def test_pages_cut_by_bytes_read_every_record_once_in_order(grandbo, memory, monkeypatch):
    memory._documents.put([DocumentWrite("note", f"n{n:02}", {"text": "x" * (n * 50)}, "put") for n in range(12)],
                          "alice")  # fmt: skip
    memory._documents.put([DocumentWrite("note", "n03", {"text": "again"}, "put")], "alice")
    whole = memory._documents.log()
    monkeypatch.setattr(sql_documents, "PAGE_BYTES", 120)  # a page ends after a record or two
    pages = list(memory._documents.pages("", 500))
    assert len(pages) > 10
    assert [e.data for p in pages for e in p.events] == [e.data for e in whole.events]
    assert [(d.doc_id, d.data) for p in pages for d in p.documents] == [(d.doc_id, d.data) for d in whole.documents]
    monkeypatch.setattr(postgres_documents, "FETCH_BYTES", 1)  # Postgres's fetches: a row each
    assert [e.data for p in memory._documents.pages("", 500) for e in p.events] == [e.data for e in whole.events]
