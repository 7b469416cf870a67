"""`GET /v1/alerts` reads each listed alert without its recall (probe 20a F3): it read and validated every alert's
whole document (~28 KB: the recall and plan kept with it) to answer briefs of a few hundred bytes, and four read keys
listing 500 alerts took another org's recall p95 from 25 ms to 1 s. An alert keeps its recall in brief beside it
(`alert_text.RECALLED`); the list reads that and the plan, and answers what the whole alerts answered."""

from __future__ import annotations

import json

from grandbo.ingest import flow
from grandbo.model import NewEntry
from grandbo.ports import DocumentWrite
from grandbo.tiers.alert_text import RECALLED
from grandbo.tiers.alerts import ALERTS
from tests.serving import serving
from tests.test_webhooks import ALERTMANAGER


def _stored(grandbo):  # type: ignore[no-untyped-def]
    memory = grandbo.org("acme", create=True)
    said = "Redis evicting keys under maxmemory on redis-sessions: evicted_keys rate above 5000/s for 5 minutes"
    memory.remember_many([NewEntry(id="F-1", title=f"{said} hunter2", body="failover fixed it", kind="finding",
                                   services=["redis-sessions"], meta={"runbook_id": "RB-1"}),
                          NewEntry(id="RB-1", title=f"Runbook: {said} hunter2", body="raise maxmemory", kind="runbook",
                                   services=["redis-sessions"])])  # fmt: skip
    flow.receive(memory, "alertmanager", json.dumps(ALERTMANAGER).encode(), {})  # stored and triaged
    return memory


def _whole_briefs(memory):  # type: ignore[no-untyped-def]
    """The briefs as the list made them before: every alert read whole, its plan's runbooks the ledger's now."""
    found, _ = memory.alerts.page(50)
    return [(s.model_copy(update={"plan": memory.triage.current(s.plan)}) if s.plan else s).brief().model_dump(mode="json")
            for s in found]  # fmt: skip


def test_the_list_answers_what_whole_alerts_answer_without_reading_a_recall(grandbo, monkeypatch):
    memory = _stored(grandbo)
    assert any(s.recall and s.recall.hits for s in memory.alerts.page(50)[0]), "no alert was recalled: proves nothing"
    memory.ledger.record("RB-1", "succeeded")  # after the triage: the list shows the ledger's record now
    expected = _whole_briefs(memory)
    assert any(brief["top_runbook"] and brief["top_runbook"]["attempts"] == 1 for brief in expected), expected
    read: list[dict] = []
    newest = type(memory.alerts.documents).newest

    def recorded(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        docs = newest(self, *args, **kwargs)
        read.extend(doc.data for doc in docs if doc.collection == ALERTS)
        return docs

    monkeypatch.setattr(type(memory.alerts.documents), "newest", recorded)
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        listed = client.get("/v1/alerts").json()["items"]
    assert listed == expected
    assert read and all("recall" not in data and RECALLED in data for data in read)


def test_an_alert_kept_before_briefs_were_is_read_whole_and_listed_alike(grandbo):
    memory = _stored(grandbo)
    docs = memory.alerts.documents.find(ALERTS)
    memory.alerts.documents.put(  # as an earlier release wrote them: no brief beside the recall
        [DocumentWrite(ALERTS, doc.doc_id, {k: v for k, v in doc.data.items() if k != RECALLED}, "test.older",
                       expected_version=doc.version) for doc in docs], "test")  # fmt: skip
    assert all(RECALLED not in doc.data for doc in memory.alerts.documents.find(ALERTS))
    expected = _whole_briefs(memory)  # after the write: the list is by write time
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        assert client.get("/v1/alerts").json()["items"] == expected


def test_a_purged_memory_s_title_is_kept_by_no_alert_and_listed_as_purged(grandbo):
    """Review 20: the brief kept beside an alert held its top match's title, a shape the purge does not look for: a
    purged memory's title stayed in the alert, its history and the list. The brief keeps the id; the list reads the
    title of the memory as it is now."""
    memory = _stored(grandbo)
    before = _whole_briefs(memory)
    assert {brief["top_match"]["id"] for brief in before if brief["top_match"]} <= {"F-1", "RB-1"}, before
    for entry_id in ("F-1", "RB-1"):  # both titles hold the secret
        memory.purge(entry_id, reason="a secret in the title", actor="test")
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        listed = client.get("/v1/alerts").json()["items"]
    matched = [brief["top_match"] for brief in listed if brief["top_match"]]
    assert matched and all(match["title"] == "[purged]" for match in matched)
    assert listed == _whole_briefs(memory)  # as the purged recall kept whole says
    for doc in memory.alerts.documents.find(ALERTS):
        texts = [json.dumps(doc.data), *(json.dumps(e) for e in memory.alerts.documents.history(ALERTS, doc.doc_id))]
        assert not any("hunter2" in text for text in texts)
