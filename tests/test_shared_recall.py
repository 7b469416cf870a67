"""A webhook delivery's alerts that ask recall the same question share one recall (`retrieval.shared`), and each
alert keeps the answer a recall of its own gives; a large delivery's 202 comes back before any of its alerts is
triaged (the request stores and queues; the alert-triage pool recalls)."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from grandbo.config import Settings
from grandbo.ingest.alert import Alert
from grandbo.memory import OrgMemory
from grandbo.model import Arm, RecallResult, utcnow
from grandbo.retrieval import rerank
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.retrieval.rerank import steady_until
from grandbo.retrieval.shared import SharedRecalls
from grandbo.service import Grandbo
from grandbo.tiers.alerts import StoredAlert
from tests.conftest import reset_postgres
from tests.serving import serving

TOPIC = "redis-sessions evicting keys under memory pressure, session reads time out"
MEMORIES = [
    {"id": "M-1", "title": "redis-sessions evicting keys", "body": "maxmemory reached; raised maxmemory and "
     "moved the session TTL down", "services": ["redis-sessions"], "kind": "post-mortem"},
    {"id": "M-2", "title": "checkout-api timeouts on session reads", "body": "redis-sessions slow under eviction",
     "services": ["checkout-api"], "kind": "post-mortem"},
    {"id": "M-3", "title": "payments-db replication lag", "body": "disk full on the primary",
     "services": ["payments-db"], "kind": "post-mortem"},
]  # fmt: skip
LATE = {"id": "M-5", "title": "redis-sessions evicting keys under memory pressure", "body": "session reads time out",
        "services": ["redis-sessions"], "kind": "post-mortem"}  # fmt: skip


def _answer(result: RecallResult) -> tuple[Any, ...]:
    """What a recall answers, without how long it took."""
    return ([(hit.entry.id, hit.score, hit.label) for hit in result.hits], result.seen_before, result.evidence,
            result.calibration, result.notes)  # fmt: skip


def test_recalls_share_one_answer_until_what_it_rests_on_changes(memory: OrgMemory):
    memory.remember_many(MEMORIES)
    shared = SharedRecalls()

    def ask(**given: Any) -> RecallResult:
        return memory.recall(TOPIC, 10, **{"services": ["redis-sessions"], "severity": "sev2", **given})

    first = ask(shared=shared)
    assert ask(shared=shared) is first  # the same question over the same index: the first answer
    assert _answer(ask()) == _answer(first)  # which is the answer of its own
    alert = Alert(source="alertmanager", event_id="e1", fingerprint="f1", service="redis-sessions", summary=TOPIC)
    memory.alerts.receive([alert])  # an alert stored moves the org's documents, not what recall reads
    assert ask(shared=shared) is first
    memory.remember({"id": "M-4", "title": "redis-sessions evicting keys again", "body": "session reads time out "
                     "under memory pressure", "services": ["redis-sessions"], "kind": "post-mortem"})  # fmt: skip
    after_memory = ask(shared=shared)
    assert after_memory is not first and "M-4" in [hit.entry.id for hit in after_memory.hits]
    assert _answer(after_memory) == _answer(ask())
    memory.catalog.import_text("services:\n  - name: redis-sessions\n    depends_on: [payments-db]\n")
    after_catalog = ask(shared=shared)  # the re-ranker's topology moved: asked again
    assert after_catalog is not after_memory and _answer(after_catalog) == _answer(ask())
    assert ask(shared=shared, services=["checkout-api"]) is not after_catalog  # another question is asked
    assert ask(shared=shared, severity="sev4") is not after_catalog
    assert (shared.asked, shared.reused) == (7, 2)


def _alerts(prefix: str, summaries: list[str], each: int) -> bytes:
    alerts = [{"status": "firing", "labels": {"alertname": "RedisEvictions", "service": "redis-sessions",
                                              "severity": "critical", "instance": f"{prefix}-{n}-{copy}"},
               "annotations": {"summary": summary}, "startsAt": "2026-11-30T10:00:00.000Z",
               "fingerprint": f"{prefix}{n:04x}{copy:04x}"}
              for copy in range(each) for n, summary in enumerate(summaries)]  # fmt: skip
    return json.dumps({"version": "4", "groupKey": "{}:{}", "status": "firing", "receiver": "grandbo",
                       "alerts": alerts}).encode()  # fmt: skip


def _own_answer(memory: OrgMemory, stored: StoredAlert) -> RecallResult:
    """The recall a triage of `stored` alone asks (the alert's service, then its group's)."""
    group = memory.alert_groups.find(stored.group_id) if stored.group_id else None
    services = list(dict.fromkeys([stored.alert.service or "", *(group.services if group else [])]))
    return memory.recall(stored.query, 10, services=[s for s in services if s], severity=stored.alert.severity)


def test_a_deliverys_alike_alerts_share_recalls_and_each_keeps_the_answer_of_its_own(tmp_path):
    settings = Settings(home=tmp_path / "home")
    Grandbo.init(settings, embedding="deterministic").close()
    summaries = [TOPIC, "redis-sessions evicting keys, maxmemory reached on the primary", "session reads slow"]
    gate = threading.Event()
    with Grandbo.open(settings, write_behind=True) as grandbo, serving(grandbo) as served:
        memory = grandbo.org("acme", create=True)
        memory.remember_many(MEMORIES)
        pool = grandbo.pools.alerts
        assert pool is not None
        with served.client(memory.keys.create("write")[1]) as client:
            seats = memory.reserve_alerts(1)  # the org's one running thread of the pool, held until the gate opens
            assert seats is not None
            with seats:
                seats.submit(lambda: gate.wait(60) and None)
            large = client.post("/v1/webhooks/alertmanager", content=_alerts("a", summaries, 8))
            received = {stored.id: stored.state for stored in memory.alerts.recent(100)}
            pending = memory.stats().write_behinds
            gate.set()
            assert pool.idle(120)
            small = client.post("/v1/webhooks/alertmanager", content=_alerts("b", summaries[:2], 3))
        every = memory.alerts.recent(100)
        stored = [s for s in every if s.alert.fingerprint.startswith("a")]
        smalls = [s for s in every if s.alert.fingerprint.startswith("b")]
        own = {s.id: _answer(_own_answer(memory, s)) for s in [*stored, *smalls]}
    assert large.status_code == 202 and large.json()["new"] == 24
    # The 202 came back with every alert stored and none triaged: no recall ran in the request.
    assert len(received) == 24 and set(received.values()) == {"received"} and pending == 24
    assert small.status_code == 202 and {a["state"] for a in small.json()["alerts"]} == {"recalled"}
    assert {s.state for s in stored} == {"recalled"} and len(stored) == 24
    for alert in [*stored, *smalls]:
        assert alert.recall is not None and _answer(alert.recall) == own[alert.id]
    # Alike alerts share one recall: one answer (and its timings) per question asked, not one per alert; a small
    # delivery's, triaged before its answer, too.
    assert len({s.recall.timings.model_dump_json() for s in stored if s.recall}) == 3
    assert len(smalls) == 6 and len({s.recall.timings.model_dump_json() for s in smalls if s.recall}) == 2


def _age_notes(result: RecallResult) -> list[str]:
    return [hit.why.rerank.age.note for hit in result.hits if hit.why.rerank is not None]


def test_an_alike_recall_after_an_age_it_rests_on_changed_gets_the_answer_of_its_own_time(memory: OrgMemory):
    """The re-ranking weighs each memory's age at the question's time: a kept answer serves a later alike alert only
    while no age it rests on has changed since; after, its candidates are re-ranked at the later alert's time. Before, the later alert got the first one's answer, ages and all (up
    to a minute later in a storm); here a memory's age turns from 0 to 1 day (as a hit's note rounds it) between
    two alike recalls a few seconds apart."""
    occurred = utcnow() - timedelta(hours=12) + timedelta(seconds=3)
    turns = occurred + timedelta(hours=12)  # its age reaches half a day in 3 s
    memory.remember({**MEMORIES[0], "occurred_at": occurred})
    shared = SharedRecalls()
    first = memory.recall(TOPIC, 5, shared=shared)
    if utcnow() >= turns:  # the machine took the 3 s: nothing to compare across
        pytest.skip("the first recall came after the memory's age turned")
    assert memory.recall(TOPIC, 5, shared=shared) is first and _age_notes(first) == ["0 days old"]
    while utcnow() < turns + timedelta(milliseconds=10):
        time.sleep(0.05)
    later = memory.recall(TOPIC, 5, shared=shared)  # the same candidates, re-ranked at its own time
    assert later is not first and _age_notes(later) == ["1 days old"]
    assert _answer(later) == _answer(memory.recall(TOPIC, 5))
    assert (shared.asked, shared.reused, shared.rescored) == (3, 1, 1)


def test_a_re_ranking_holds_until_the_first_age_it_rests_on_changes():
    now = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    policy = DEFAULT_POLICY.rerank  # the penalty starts at 180 days and is whole 3 years later

    def until(*ages: timedelta) -> datetime:
        return steady_until([now - age for age in ages], now, policy)

    assert until() == rerank.FOREVER
    assert until(timedelta(hours=1)) == now + timedelta(hours=11)  # its next half day
    assert until(timedelta(days=179, hours=20)) == now + timedelta(hours=4)  # the penalty starts first... and so
    assert until(timedelta(days=3, hours=7), timedelta(days=9, hours=11)) == now + timedelta(hours=1)
    assert until(timedelta(days=200)) == now  # inside the penalty's growth: it changes by the second
    assert until(timedelta(days=180 + 3 * 365 + 1, hours=2)) == now + timedelta(hours=10)  # whole: its days only
    assert until(timedelta(days=2)) == now  # exactly on a half day: the note's rounding turns now
    assert until(-timedelta(minutes=5)) == now + timedelta(minutes=5)  # not yet occurred


@pytest.mark.postgres
def test_an_alike_recall_after_a_vector_pgvector_searches_is_not_the_answer_of_before(pg_database, tmp_path):
    """An org past the HNSW threshold has its vectors searched by pgvector, not by the index in this process, so a
    vector written between two alike alerts' recalls moves no mark of that index. Before review 21's fix the second
    recall got the first one's answer, without the memory the new vector finds; now such recalls are not shared."""
    reset_postgres(pg_database)
    settings = Settings(home=tmp_path / "home", database_url=pg_database, hnsw_threshold=3)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember_many(MEMORIES)  # 3 vectors: past the threshold, searched by pgvector
        with Grandbo.open(settings, background=True, embed_here=False) as server:  # a server: workers embed
            late = server.org("acme").remember(LATE)  # stored now, its vector written later
        shared = SharedRecalls()

        def ask(arm: Arm, **given: Any) -> RecallResult:  # an alike alert's recall, as its triage asks it
            return memory.recall(TOPIC, 10, arm=arm, services=["redis-sessions"], severity="sev2", **given)

        first, first_reranked = ask(Arm.VECTOR, shared=shared), ask(Arm.RERANKED, shared=shared)
        assert grandbo._keeper.fresh("acme").space is None  # the index holds no vectors: pgvector searches them
        assert late.id not in [hit.entry.id for hit in first.hits]  # not embedded yet
        assert grandbo.worker().drain().embedded == 1  # the worker writes its vector between the two alerts
        second, second_reranked = ask(Arm.VECTOR, shared=shared), ask(Arm.RERANKED, shared=shared)
        own, own_reranked = ask(Arm.VECTOR), ask(Arm.RERANKED)
    assert late.id in [hit.entry.id for hit in second.hits] and _answer(second) == _answer(own)
    # The triage's own arm: the late memory was found by its words before; now by its vector too.
    assert second_reranked is not first_reranked and _answer(second_reranked) == _answer(own_reranked)
    assert _answer(first_reranked) != _answer(own_reranked)
