"""A purge of many entries searches the organization's documents for copies of their text once, not once a batch
(probe 30): each batch of 100 read every row of the org's documents and history against its 100 ids, so an erasure
of a name that 5,000 imported incidents held took 281 s on a loaded machine (2,000 of them: 23 s of CPU, 1,000: 6 s;
on Postgres 22 s for 500 and 112 s for 1,000), the time growing with the square of the entries. The rows that may
hold a copy are read once; each batch rewrites those holding its ids, and what was written since the read."""

from __future__ import annotations

import json

import grandbo.store.postgres.erasure as postgres_erasure
import grandbo.store.sqlite.erasure as sqlite_erasure
from grandbo.ingest import flow
from grandbo.store.sql import erasing

NAME = "Priya Raman-Okafor"
ENTRIES = 25  # three batches of 10


def _batches_of_ten(grandbo, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    module = sqlite_erasure if grandbo.settings.database_url is None else postgres_erasure
    monkeypatch.setattr(module, "PURGE_BATCH", 10)


def _findings(memory) -> None:  # type: ignore[no-untyped-def]
    memory.remember_many([
        {"id": f"F-{n}", "kind": "finding", "services": ["redis-sessions"], "title": f"Evictions paged {NAME} {n}",
         "body": f"Mechanism: maxmemory reached, keys evicted; {NAME} raised maxmemory by hand ({n})."}
        for n in range(ENTRIES)
    ], strict=True)  # fmt: skip


def _alert(memory, fingerprint: str) -> str:  # type: ignore[no-untyped-def]
    delivery = {"version": "4", "status": "firing", "alerts": [{"status": "firing", "fingerprint": fingerprint,
                "labels": {"alertname": "RedisEvictions", "service": "redis-sessions"},
                "annotations": {"summary": "redis-sessions evicting keys, maxmemory reached"},
                "startsAt": "2026-12-01T10:00:00Z"}]}  # fmt: skip
    ((stored, _),) = flow.receive(memory, "alertmanager", json.dumps(delivery).encode(), {})
    assert NAME in memory.alerts.get(stored.id).model_dump_json()  # its recall quotes the findings
    return str(stored.id)


def _documents_holding(raw, text: str) -> list[str]:  # type: ignore[no-untyped-def]
    rows = raw("SELECT doc_id, data FROM documents WHERE org_id = %s", ("acme",), org="acme")
    rows += raw("SELECT doc_id, data FROM document_events WHERE org_id = %s", ("acme",), org="acme")
    return [doc_id for doc_id, data in rows if text in (data if isinstance(data, str) else json.dumps(data))]


def test_a_purge_of_many_batches_searches_the_documents_for_copies_once(grandbo, memory, raw, monkeypatch):
    _batches_of_ten(grandbo, monkeypatch)
    _findings(memory)
    _alert(memory, "ev-1")
    searches: list[str] = []
    rows = erasing.DocumentRewrite._rows

    def counted(self, table, key):  # type: ignore[no-untyped-def]
        searches.append(table)  # a read of the org's rows (mentioning the text); a batch reads its own by their keys
        return rows(self, table, key)

    monkeypatch.setattr(erasing.DocumentRewrite, "_rows", counted)
    report = memory.erasure.purge_text(NAME, reason="a person's name", actor="alice")
    assert sorted(report.entries) == sorted(f"F-{n}" for n in range(ENTRIES))
    # one for the copies of all three batches, one for the text in the documents; before: one a batch, then that one
    assert searches.count("documents") == 2, searches
    assert _documents_holding(raw, NAME) == []


def test_a_copy_written_between_the_batches_of_a_purge_is_erased_too(grandbo, memory, raw, monkeypatch):
    _batches_of_ten(grandbo, monkeypatch)
    _findings(memory)
    first = _alert(memory, "ev-1")
    written: list[str] = []
    narrowed = erasing.DocumentRewrite.narrowed

    def then_an_alert(self, rewrite, mentioning):  # type: ignore[no-untyped-def]
        # once the first batch is purged (its findings are no longer recalled), before the second
        if not written and memory.get("F-0").title == "[purged]":
            written.append(_alert(memory, "ev-2"))  # after the copies were searched for, quoting later batches'
        return narrowed(self, rewrite, mentioning)

    monkeypatch.setattr(erasing.DocumentRewrite, "narrowed", then_an_alert)
    memory.erasure.purge_text(NAME, reason="a person's name", actor="alice")
    assert written, "no alert was received between the batches"
    assert _documents_holding(raw, NAME) == []
    for alert_id in (first, *written):
        kept = memory.alerts.get(alert_id)
        assert NAME not in kept.model_dump_json() and kept.recall.hits
        assert all(hit.entry.title == "[purged]" for hit in kept.recall.hits if hit.entry.id.startswith("F-"))
