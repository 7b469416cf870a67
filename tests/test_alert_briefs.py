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
    memory.remember_many([NewEntry(id="F-1", title=said, body="failover fixed it", kind="finding",
                                   services=["redis-sessions"], meta={"runbook_id": "RB-1"}),
                          NewEntry(id="RB-1", title=f"Runbook: {said}", body="raise maxmemory", kind="runbook",
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
