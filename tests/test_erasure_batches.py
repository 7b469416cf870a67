"""An erasure of a text (`purge-text`) holds neither the org's whole document log in memory nor the store's write lock
once per entry (probe 19): it read every document and event of the org at once (437 MiB more for 150 MB of data,
for a text found nowhere) and purged each entry that held the text in a transaction of its own, with a search of the
documents and an emptied write-ahead log each (45 s for 5,000 entries, another org's writes at 5x their p95). The
documents are read a page at a time, only those whose stored JSON may hold the text (the database's filter, then
the match: the same records are found); the entries are purged a batch a transaction; a crash between batches
leaves a state the same erasure completes; a purge of an entry purged already that finds no copy writes nothing."""

from __future__ import annotations

import json
import tracemalloc

import pytest

import grandbo.store.postgres.erasure as postgres_erasure
import grandbo.store.sqlite.erasure as sqlite_erasure
import grandbo.tiers.erasure as tier_erasure
from grandbo.erased import erasure_pattern, sieves
from grandbo.ports import DocumentWrite
from grandbo.store.postgres.erasure import ErasureMixin
from grandbo.store.sqlite.connection import Connection
from grandbo.tiers.erasure import _holds, _in_json, _probe

NAME = "Jane Roe"


def _module(grandbo):  # type: ignore[no-untyped-def]
    return sqlite_erasure if grandbo.settings.database_url is None else postgres_erasure


def _counted(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[object]:
    calls: list[object] = []
    real = getattr(owner, name)

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[1:2])
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_entries_holding_the_text_are_purged_a_batch_a_transaction(grandbo, memory, monkeypatch):
    module = _module(grandbo)
    monkeypatch.setattr(module, "PURGE_BATCH", 10, raising=False)
    memory.remember_many([{"id": f"E{n}", "title": f"replica lag {n}", "body": f"call {NAME}"} for n in range(45)])
    memory.remember({"id": "CLEAN", "title": "replica lag", "body": "nobody named"})
    writes = _counted(monkeypatch, module, "erase_copies")  # once in each purge's transaction
    emptied = _counted(monkeypatch, Connection, "_emptied_log") if module is sqlite_erasure else []
    report = memory.erasure.purge_text(NAME, reason="gdpr", actor="alice")
    assert sorted(report.entries) == sorted(f"E{n}" for n in range(45))
    assert len(writes) == 5, len(writes)  # before: 45, one transaction per entry
    assert len(emptied) <= 2, emptied  # the purges' checkpoint once, the documents' once; before: 46
    assert all(memory.get(f"E{n}").title == "[purged]" for n in range(45))
    assert all(NAME.lower() not in json.dumps(e.payload).lower() for n in range(45) for e in memory.history(f"E{n}"))
    assert memory.get("CLEAN").body == "nobody named"


def test_an_erasure_cut_short_between_batches_is_completed_by_running_it_again(grandbo, memory, monkeypatch):
    module = _module(grandbo)
    monkeypatch.setattr(module, "PURGE_BATCH", 4, raising=False)
    memory.remember_many([{"id": f"E{n}", "title": f"replica lag {n}", "body": f"call {NAME}"} for n in range(10)])
    memory.incidents.open(f"{NAME} paged", incident_id="INC-1")
    real = dying_at_the_second_batch(monkeypatch, module)
    with pytest.raises(RuntimeError):
        memory.erasure.purge_text(NAME, reason="gdpr", actor="alice")
    purged = [n for n in range(10) if memory.get(f"E{n}").title == "[purged]"]
    assert purged == [0, 1, 2, 3]  # the first batch committed whole, the second not at all
    assert NAME not in memory.incidents.get("INC-1").model_dump_json()  # the documents went first, with the record
    monkeypatch.setattr(module, "erase_copies", real)
    again = memory.erasure.purge_text(NAME, reason="gdpr", actor="alice")
    assert again.entries == [f"E{n}" for n in range(4, 10)] and again.documents == 0
    assert all(memory.get(f"E{n}").title == "[purged]" for n in range(10))
    assert not memory.erasure.purge_text(NAME, reason="gdpr", actor="alice").found


def test_an_erasure_cut_short_between_batches_leaves_a_record_of_the_entries_it_purged(grandbo, memory, monkeypatch):
    """Probe 22a F4: the record was written after the last batch, so a kill between batches left the first batch
    purged under no erasure record (the run again recorded only what was still held)."""
    module = _module(grandbo)
    monkeypatch.setattr(module, "PURGE_BATCH", 4, raising=False)
    memory.remember_many([{"id": f"E{n}", "title": f"replica lag {n}", "body": f"call {NAME}"} for n in range(10)])
    real = dying_at_the_second_batch(monkeypatch, module)
    with pytest.raises(RuntimeError):
        memory.erasure.purge_text(NAME, reason="gdpr", actor="alice")
    (cut,) = [doc.data for doc in memory._documents.find("erasures")]
    assert cut["status"] == "running" and cut["reason"] == "gdpr" and cut["actor"] == "alice"
    assert {"E0", "E1", "E2", "E3"} <= set(cut["entries"])  # the batch it purged, named
    monkeypatch.setattr(module, "erase_copies", real)
    again = memory.erasure.purge_text(NAME, reason="gdpr", actor="alice")
    records = {doc.doc_id: doc.data for doc in memory._documents.find("erasures")}
    assert records[again.erasure_id]["status"] == "done" and records[again.erasure_id]["entries"] == again.entries
    assert {entry for record in records.values() for entry in record["entries"]} == {f"E{n}" for n in range(10)}
    assert NAME.lower() not in json.dumps(records).lower()


def dying_at_the_second_batch(monkeypatch, module):  # type: ignore[no-untyped-def]
    """Make `module`'s purge fail at its second batch, as a process dying there would; the real `erase_copies`."""
    real, calls = module.erase_copies, []

    def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the process died")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "erase_copies", failing)
    return real


def _documents(grandbo, memory, count: int, size: int) -> None:  # type: ignore[no-untyped-def]
    blob = "the cache evicted keys under memory pressure " * (size // 46)
    for start in range(0, count, 50):
        writes = [DocumentWrite("alert", f"a{n}", {"summary": f"alert {n}", "recall": [blob]}, "alert.received")
                  for n in range(start, min(count, start + 50))]  # fmt: skip
        grandbo._store.put_documents(memory.org, writes, "test")


@pytest.mark.parametrize("text", ["nowhere-to-be-found", "ıkſ ıKſ"])  # with a run to filter by, and none
def test_an_erasure_of_a_text_found_nowhere_holds_a_page_of_the_documents_at_most(grandbo, memory, monkeypatch, text):
    monkeypatch.setattr(tier_erasure, "LOG_PAGE", 10, raising=False)
    _documents(grandbo, memory, 300, 20_000)  # 6 MB of documents, twice as many with their history
    memory.remember({"title": "replica lag", "body": "nothing"})
    tracemalloc.start()
    try:
        report = memory.erasure.purge_text(text, reason="gdpr", actor="alice")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not report.found
    assert peak < 2_500_000, peak  # before: 34 MB (every document and event decoded at once)


TEXTS = [
    NAME,
    'say "Jane Roe"',
    "C:\\Users\\jroe",
    "Zoë Roe-Müller",
    "ſecret-token-99",
    "JANE\tROE",
    "日本語のテキスト",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_databases_filter_finds_every_record_the_match_finds(grandbo, memory, raw, backend, text):
    """`pages` with the text's probe, then the match, finds exactly the records the match finds in the whole log,
    whatever JSON escapes in the text (quotes, backslashes, a tab) or in a stored row (`\\u....`, as older releases
    wrote some), in any case."""
    variants = [text, text.upper(), text.lower(), f"before {text} after", text.replace("e", "E")]
    writes = [DocumentWrite("note", f"n{n}", {"text": value, "n": n}, "put") for n, value in enumerate(variants)]
    writes += [DocumentWrite("note", "keyed", dict.fromkeys(variants[:2], 1), "put"),
               DocumentWrite("note", "other", {"text": "replica lag, nothing else"}, "put")]  # fmt: skip
    memory._documents.put(writes, "alice")
    if backend == "sqlite":  # a row an older release wrote, every character escaped
        escaped = "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c for c in f"was {text}")
        raw("UPDATE documents SET data = %s WHERE org_id = 'acme' AND doc_id = 'other'", (f'{{"text": "{escaped}"}}',))
    pattern, sieve = erasure_pattern(text), sieves(text)
    log = memory._documents.log()
    expected = {(d.collection, d.doc_id) for d in log.documents if _holds(d.data, pattern)}
    expected_events = sum(1 for e in log.events if _holds(e.data, pattern))
    found, found_events = set(), 0
    for page in memory._documents.pages(_probe(text), 3):
        found |= {(d.collection, d.doc_id) for d in page.documents
                  if (not sieve or _in_json(d.data, pattern)) and _holds(d.data, pattern)}  # fmt: skip
        found_events += sum(
            1 for e in page.events if (not sieve or _in_json(e.data, pattern)) and _holds(e.data, pattern)
        )
    assert found == expected and found_events == expected_events
    assert len(expected) >= 6 and (backend != "sqlite" or ("note", "other") in expected)
    report = memory.erasure.purge_text(text, reason="gdpr", actor="alice")
    assert report.documents == len(expected)
    assert not [d for d in memory._documents.log().documents if _holds(d.data, pattern)]


def test_a_purge_of_an_entry_purged_already_writes_nothing_and_empties_nothing(grandbo, memory, monkeypatch):
    memory.remember({"id": "P1", "title": "leak", "body": f"call {NAME}"})
    memory.purge("P1", reason="gdpr", actor="alice")
    owner, name = (Connection, "_emptied_log") if grandbo.settings.database_url is None else (ErasureMixin, "_vacuum")
    emptied = _counted(monkeypatch, owner, name)
    stamp = memory._documents.stamp(["erasures"])
    again = memory.purge("P1", reason="again", actor="mallory")
    assert again.title == "[purged]" and not emptied  # before: the write-ahead log emptied (VACUUM owed) each time
    assert memory._documents.stamp(["erasures"]) == stamp
