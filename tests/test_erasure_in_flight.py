"""Work in flight that copies an org's text into memory entries or a kept recall must not write a text an erasure
erased after it read it (`grandbo.unerased`).

Entries are not versioned documents: an incident's sync that read a finding before a `purge-text` wrote the
finding's text into a new entry after the erasure had answered (the erasure had searched the entries before the
entry existed), and an alert's triage whose recall was computed before a purge kept the purged memory's text with
the alert after it. Each test lands the erasure at one point of the work, on a thread of its own (as a request of
another process would), by wrapping one read or write of the handle the work goes through, as
`test_erasure_stale_writes.py` does; the work and the erasure themselves run unchanged, on both backends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from grandbo.ingest.alert import Alert
from grandbo.ingest.flow import recall_for
from grandbo.memory import OrgMemory
from grandbo.ports import Document

SECRET = "Zorbax-quell-7731"  # a name typed where it should not have been
WAIT_S = 60  # what a thread of a test waits for the other at most (a failure, not a timing)


def on_thread(work: Callable[[], object]) -> threading.Thread:
    """`work` started on a thread of its own (its error, if any, is raised by `joined`)."""
    thread = threading.Thread(target=lambda: _record(thread, work), daemon=True)
    thread.start()
    return thread


def _record(thread: threading.Thread, work: Callable[[], object]) -> None:
    try:
        work()
    except BaseException as error:  # handed to the test's thread
        thread.error = error  # type: ignore[attr-defined]


def joined(thread: threading.Thread) -> None:
    thread.join(WAIT_S)
    assert not thread.is_alive(), "the erasure did not finish"
    if (error := getattr(thread, "error", None)) is not None:
        raise error


def after_read(
    monkeypatch: pytest.MonkeyPatch, memory: OrgMemory, collection: str, doc_id: str,
    when: Callable[[Document], bool], then: Callable[[], None],
) -> list[Document]:  # fmt: skip
    """The first read of `collection`/`doc_id` through the handle's documents for which `when` holds runs `then`
    before the reader goes on; the document it read is returned in the list."""
    documents = memory._documents
    read = documents.get
    seen: list[Document] = []

    def get(wanted: str, wanted_id: str) -> Document | None:
        doc = read(wanted, wanted_id)
        if (wanted, wanted_id) == (collection, doc_id) and doc is not None and not seen and when(doc):
            seen.append(doc)
            then()
        return doc

    monkeypatch.setattr(documents, "get", get)
    return seen


def held_text(raw: Callable[..., list[tuple[Any, ...]]], org: str) -> list[str]:
    """Every stored form of the org's entries and documents that holds SECRET: rows, events and history."""
    rows = raw("SELECT title, body, tags, meta FROM memory_entries WHERE org_id = %s", (org,), org=org)
    rows += raw("SELECT payload FROM memory_events WHERE org_id = %s", (org,), org=org)
    rows += raw("SELECT data FROM documents WHERE org_id = %s", (org,), org=org)
    rows += raw("SELECT data FROM document_events WHERE org_id = %s", (org,), org=org)
    texts = [" ".join(v if isinstance(v, str) else json.dumps(v) for v in row) for row in rows]
    return [text for text in texts if SECRET.lower() in text.lower()]


def a_corroborated_finding(memory: OrgMemory) -> None:
    memory.incidents.open("payments ledger lock timeout", incident_id="INC-1", services=["ledger"])
    memory.incidents.add_finding("INC-1", f"{SECRET} held the ledger lock from a batch job", status="corroborated",
                                 root_cause=f"the batch job of {SECRET} never released the lock")  # fmt: skip


def closed(doc: Document) -> bool:
    return doc.data.get("status") == "closed"


def erase(memory: OrgMemory) -> Callable[[], object]:
    return lambda: memory.erasure.purge_text(SECRET, reason="a person's name", actor="alice")


def test_a_close_whose_sync_read_a_finding_before_an_erasure_writes_no_entry_with_its_text(memory, raw, monkeypatch):
    """The sync read the closed incident (the finding holding the text), then the erasure ran to its end (no entry
    held the text yet: it erased the incident), then the sync wrote the finding's entry from what it had read."""
    a_corroborated_finding(memory)
    erasures: list[threading.Thread] = []
    seen = after_read(monkeypatch, memory, "incident", "INC-1", closed,
                      lambda: joined(erasures.append(on_thread(erase(memory))) or erasures[0]))  # fmt: skip

    memory.incidents.close("INC-1", resolution="released the lock")

    assert len(seen) == 1 and SECRET in json.dumps(seen[0].data)  # the sync did read the text before the erasure
    assert held_text(raw, "acme") == []
    incident = memory.incidents.get("INC-1")
    assert incident.memory_sync == "done" and SECRET not in incident.model_dump_json()
    (entry,) = [memory.get(entry_id) for entry_id in incident.memory.values()]
    assert entry.title == "payments ledger lock timeout: [purged] held the ledger lock from a batch job"
    assert memory.recall("ledger lock held by a batch job", 5).hits  # the finding is still memory, erased


def test_a_finding_entry_written_while_an_erasure_ran_is_erased_before_the_erasure_answers(memory, raw, monkeypatch):
    """The erasure searched the entries (none held the text), then the sync wrote the finding's entry from the
    incident it had read, then the erasure rewrote the documents and answered."""
    a_corroborated_finding(memory)
    scanned, written = threading.Event(), threading.Event()
    entries = memory._entries
    purge_many, append = entries.purge_many, entries.append
    erasures: list[threading.Thread] = []

    def purge_many_after_the_write(*args: Any, **kwargs: Any) -> list[str]:  # the erasure's thread
        if not scanned.is_set():
            scanned.set()
            assert written.wait(WAIT_S)
        return purge_many(*args, **kwargs)

    def append_then_let_go(*args: Any, **kwargs: Any) -> Any:  # the sync's thread
        stored = append(*args, **kwargs)
        if erasures and not written.is_set():
            written.set()
        return stored

    monkeypatch.setattr(entries, "purge_many", purge_many_after_the_write)
    monkeypatch.setattr(entries, "append", append_then_let_go)
    seen = after_read(monkeypatch, memory, "incident", "INC-1", closed,
                      lambda: erasures.append(on_thread(erase(memory))) or scanned.wait(WAIT_S) or None)  # fmt: skip

    memory.incidents.close("INC-1", resolution="released the lock")
    joined(erasures[0])

    assert len(seen) == 1 and written.is_set()  # the entry was written between the search and the rewrite
    assert held_text(raw, "acme") == []
    memory.incidents.sync("INC-1")  # a sync after the erasure leaves the purged finding out of memory
    assert held_text(raw, "acme") == []


@pytest.mark.parametrize("purge", ["entry", "text"])
def test_a_triage_whose_recall_read_a_memory_before_its_purge_keeps_no_copy_of_it(memory, raw, monkeypatch, purge):
    """The triage recalled (the memory's text in its answer), the purge ran, then the triage kept its answer with
    the alert: the purge had found no copy to erase yet."""
    memory.remember({"id": "F-LOCK", "kind": "finding", "services": ["ledger"],
                     "title": "payments ledger lock timeout", "body": f"{SECRET} found the lock held by a batch"})  # fmt: skip
    alert = Alert(source="alertmanager", event_id="lock", fingerprint="fp-lock", service="ledger",
                  summary="payments ledger lock timeout")  # fmt: skip
    ((stored, _),) = memory.alerts.receive([alert])
    if purge == "entry":
        erasure: Callable[[], object] = lambda: memory.purge("F-LOCK", reason="a person's name", actor="alice")  # noqa: E731
    else:
        erasure = erase(memory)
    triaged = threading.Event()
    erasures: list[threading.Thread] = []

    def then() -> None:
        erasures.append(on_thread(erasure))
        joined(erasures[0])

    seen = after_read(monkeypatch, memory, "alert", stored.id, lambda _: triaged.is_set(), then)
    recall = memory.triage.run

    def recalled(*args: Any, **kwargs: Any) -> Any:
        answer = recall(*args, **kwargs)
        triaged.set()
        return answer

    monkeypatch.setattr(memory.triage, "run", recalled)

    kept = recall_for(memory, stored)

    assert len(seen) == 1 and erasures  # the purge came between the recall and the write of its answer
    assert SECRET not in kept.model_dump_json() and SECRET not in memory.alerts.get(stored.id).model_dump_json()
    assert held_text(raw, "acme") == []


def test_an_incident_opened_from_alerts_read_before_an_erasure_does_not_carry_their_text(memory, raw, monkeypatch):
    """Opening an incident from an alert group read the group's alerts (a summary holding the text), the erasure ran,
    then the incident was created from what was read: a new document, with no version to be stale against."""
    alert = Alert(source="alertmanager", event_id="lock", fingerprint="fp-lock", service="ledger",
                  summary=f"ledger lock held by {SECRET}")  # fmt: skip
    ((stored, _),) = memory.alerts.receive([alert])
    assert stored.group_id is not None
    erasures: list[threading.Thread] = []

    def then() -> None:
        erasures.append(on_thread(erase(memory)))
        joined(erasures[0])

    seen = after_read(monkeypatch, memory, "alert", stored.id, lambda doc: SECRET in json.dumps(doc.data), then)

    incident = memory.alert_groups.open_incident(stored.group_id, actor="alice")

    assert len(seen) == 1 and erasures  # the alert was read with the text, then erased
    assert SECRET not in incident.model_dump_json() and incident.title.startswith("ledger lock held by [purged]")
    assert held_text(raw, "acme") == []
