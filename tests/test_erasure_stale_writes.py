"""A write that read a document before an erasure rewrote it must not put the erased text back (probe 21, F4).

An erasure (purge-text, and a purge's rewrite of the copies documents keep of the entry) rewrote `documents` rows
in place without a new version, so a read-modify-write that read version V before it (a profile patch, a finding
added, an alert redelivered) passed its `expected_version=V` check after it and wrote the erased text back: the
text was back in the profile, the incident and the alert after the erasure had answered. Each test below
interleaves by hand: the tier's own read, then the erasure, then the tier's write, on both backends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from grandbo.errors import StaleWriteError
from grandbo.ingest.alert import Alert
from grandbo.memory import OrgMemory
from grandbo.ports import Document
from grandbo.service import Grandbo
from grandbo.tiers.keys import KEYS
from grandbo.tiers.learning_model import SIGNALS
from tests.fakes import FakeEmbeddings

SECRET = "Zorbax-quell-7731"  # a name typed where it should not have been


def erasing_after_read(
    monkeypatch: pytest.MonkeyPatch, memory: OrgMemory, collection: str, doc_id: str | None, erase: Callable[[], object],
    *, nth: int = 1,
) -> list[Document]:  # fmt: skip
    """The org's documents read `collection`/`doc_id` (None: any of the collection) as stored, then, after the
    `nth` such read, `erase` runs before the reader goes on: the read-modify-write that made the read holds the
    document as it was before the erasure. The reads made up to the erasure are returned (the list fills as the
    reader reads)."""
    documents = memory._documents
    read = documents.get
    before: list[Document] = []

    def get(wanted: str, wanted_id: str) -> Document | None:
        doc = read(wanted, wanted_id)
        if wanted == collection and doc_id in (None, wanted_id) and len(before) < nth and doc is not None:
            before.append(doc)
            if len(before) == nth:
                erase()
        return doc

    monkeypatch.setattr(documents, "get", get)
    return before


def stored_texts(raw: Callable[..., list[tuple[Any, ...]]], org: str) -> list[str]:
    """Every document and history event of the org as stored."""
    held = raw("SELECT data FROM documents WHERE org_id = %s", (org,), org=org)
    held += raw("SELECT data FROM document_events WHERE org_id = %s", (org,), org=org)
    return [value if isinstance(value, str) else json.dumps(value) for (value,) in held]


def test_a_profile_patch_that_read_before_an_erasure_does_not_write_the_erased_text_back(memory, raw, monkeypatch):
    memory.profile.update({"facts": {"escalation": f"call {SECRET} first", "team": "platform"}})
    history = len(memory.profile.history())
    erase = lambda: memory.erasure.purge_text(SECRET, reason="a person's name", actor="alice")  # noqa: E731
    before = erasing_after_read(monkeypatch, memory, "profile", "explicit", erase)

    patched = memory.profile.update({"facts": {"pager": "the on-call rota"}})  # read, erased, written

    assert len(before) == 1 and SECRET in json.dumps(before[0].data)  # it did read the text before the erasure
    assert SECRET not in patched.model_dump_json() and patched.facts["pager"] == "the on-call rota"
    assert patched.facts["escalation"] == "call [purged] first" and patched.facts["team"] == "platform"
    assert not [text for text in stored_texts(raw, "acme") if SECRET in text]
    # The erasure gave the profile a version of its own, but no event: its history logs changes people made.
    assert patched.version == before[0].version + 2 and len(memory.profile.history()) == history + 1


def test_a_guarded_profile_patch_of_a_version_read_before_an_erasure_is_refused(memory):
    read = memory.profile.update({"facts": {"escalation": f"call {SECRET} first"}})
    memory.erasure.purge_text(SECRET, reason="a person's name", actor="alice")
    with pytest.raises(StaleWriteError, match=r"changed meanwhile.*read it again and retry"):
        memory.profile.update({"people": [{"name": SECRET}]}, expected_version=read.version)
    assert SECRET not in memory.profile.get().model_dump_json()


def test_a_finding_added_over_a_read_before_an_erasure_does_not_write_the_erased_text_back(memory, raw, monkeypatch):
    memory.incidents.open(f"{SECRET} pasted a key", incident_id="INC-1")
    memory.incidents.add_finding("INC-1", f"the key {SECRET} pasted was rotated")
    erase = lambda: memory.erasure.purge_text(SECRET, reason="a person's name", actor="alice")  # noqa: E731
    before = erasing_after_read(monkeypatch, memory, "incident", "INC-1", erase)

    added = memory.incidents.add_finding("INC-1", "the rotation finished at 10:40")

    assert len(before) == 1 and SECRET in json.dumps(before[0].data)
    incident = memory.incidents.get("INC-1")
    assert SECRET not in incident.model_dump_json()
    assert incident.title == "[purged] pasted a key" and [f.summary for f in incident.findings] == [
        "the key [purged] pasted was rotated", "the rotation finished at 10:40"]  # fmt: skip
    assert added.id == "f2"
    assert not [text for text in stored_texts(raw, "acme") if SECRET in text]


def test_an_alert_redelivered_over_a_read_before_a_purge_does_not_quote_the_purged_entry_again(memory, raw):
    """The webhook reads a delivery's stored alerts, then stores the redelivery expecting their versions
    (`ingest.flow.receive`: `Alerts.known`, then `Alerts.receive(known=...)`); a purge of an entry the alert's
    kept recall quotes, landing between the two, was undone by the redelivery."""
    memory.remember({"id": "F-LOCK", "kind": "finding", "services": ["ledger"],
                     "title": "payments ledger lock timeout", "body": f"{SECRET} found the lock held by a batch"})  # fmt: skip
    alert = Alert(source="alertmanager", event_id="lock", fingerprint="fp-lock", service="ledger",
                  summary="payments ledger lock timeout")  # fmt: skip
    ((stored, _),) = memory.alerts.receive([alert])
    memory.alerts.record_recall(stored, memory.recall("payments ledger lock timeout", 5), None)
    assert SECRET in memory.alerts.get(stored.id).model_dump_json()  # the test can fail

    known = memory.alerts.known([alert])  # the webhook's read
    memory.purge("F-LOCK", reason="a person's name", actor="alice")
    ((redelivered, new),) = memory.alerts.receive([alert], known=known)  # its write

    assert not new and redelivered.deliveries == 2
    after = memory.alerts.get(stored.id)
    assert after.deliveries == 2 and SECRET not in after.model_dump_json()
    assert [(h.entry.title, h.entry.body) for h in after.recall.hits if h.entry.id == "F-LOCK"] == [("[purged]", "")]
    assert not [text for text in stored_texts(raw, "acme") if SECRET in text]


def test_a_purge_gives_each_document_it_rewrites_a_new_version_and_no_event(memory):
    """What the tests above rest on, and what stays: the rewrite moves the version of the documents it changed
    (a writer that read before it is stale), adds no event to their history (whose events log the changes people
    made, and whose order the edit signals' folds follow), and leaves the documents it did not change alone."""
    memory.remember({"id": "F-LOCK", "kind": "finding", "title": "payments ledger lock timeout",
                     "body": f"{SECRET} found the lock held by a batch"})  # fmt: skip
    quoting, other = (Alert(source="alertmanager", event_id=n, fingerprint=f"fp-{n}", summary=s)
                      for n, s in (("a", "payments ledger lock timeout"), ("b", "disk full on db-3")))  # fmt: skip
    ((first, _), (second, _)) = memory.alerts.receive([quoting, other])
    memory.alerts.record_recall(first, memory.recall("payments ledger lock timeout", 5), None)
    documents = memory._documents
    versions = {doc_id: documents.get("alert", doc_id).version for doc_id in (first.id, second.id)}
    events = {doc_id: len(documents.history("alert", doc_id)) for doc_id in (first.id, second.id)}

    memory.purge("F-LOCK", reason="a person's name", actor="alice")

    assert documents.get("alert", first.id).version == versions[first.id] + 1
    assert documents.get("alert", second.id).version == versions[second.id]
    assert {doc_id: len(documents.history("alert", doc_id)) for doc_id in events} == events


def test_an_edit_signal_settled_over_a_read_before_an_erasure_settles_without_the_erased_text(
    grandbo, settings, raw, monkeypatch
):  # fmt: skip
    """Settling an edit with the LLM's answer reads the signal again after the LLM answered, then writes it
    expecting that version. An erasure between the two was undone by the write (the copy it read held the text);
    with the erasure's new version the write is stale, and the signal is read again and settled (by the rules' answer
    on the erased text: the LLM's was about the text before it), never left awaiting the LLM."""
    with FakeEmbeddings() as llm:
        llm.behaviour.chat_answers = [json.dumps({"category": "tone", "summary": "calmer words"})]
        configured = settings.model_copy(update={"llm_base_url": llm.url, "llm_model": "chat"})
        with Grandbo.open(configured) as opened:  # no background threads: the settle runs within the edit
            memory = opened.org("acme", create=True)
            erase = lambda: memory.erasure.purge_text(SECRET, reason="a person's name", actor="alice")  # noqa: E731
            # Its first read is the LLM's copy, its second the one the write expects the version of.
            before = erasing_after_read(monkeypatch, memory, SIGNALS, None, erase, nth=2)
            signal, _ = memory.learning.record_edit(f"Tell {SECRET} the users waited.",
                                                    f"Tell {SECRET} the clients waited.", content_type="notice",
                                                    author="alice")  # fmt: skip
            assert len(before) == 2 and SECRET in json.dumps(before[1].data)
            assert llm.behaviour.requests  # the LLM was asked
            settled = memory.learning.signal(signal.id)
            assert not settled.awaiting_llm and settled.classified_by == "rules"
            assert SECRET not in settled.model_dump_json() and settled.draft == "Tell [purged] the users waited."
    assert not [text for text in stored_texts(raw, "acme") if SECRET in text]


def test_a_key_revoked_over_a_read_before_an_erasure_keeps_its_name_erased(memory, raw, monkeypatch):
    """A revoke read the key's record, then wrote it revoked without expecting a version: an erasure of its name
    between the two was undone."""
    record, key = memory.keys.create("read", name=f"{SECRET}'s laptop")
    erase = lambda: memory.erasure.purge_text(SECRET, reason="a person's name", actor="alice")  # noqa: E731
    before = erasing_after_read(monkeypatch, memory, KEYS, record.id, erase)

    revoked = memory.keys.revoke(record.id)

    assert len(before) == 1 and SECRET in json.dumps(before[0].data)
    assert not revoked.active and revoked.name == "[purged]'s laptop"
    assert memory.keys.find(record.id).name == "[purged]'s laptop" and memory.keys.verify(key) is None
    assert not [text for text in stored_texts(raw, "acme") if SECRET in text]
