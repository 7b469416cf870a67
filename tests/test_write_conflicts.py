"""Concurrent writes that do not conflict in meaning are never refused: a duplicate delivery, a new finding, the
same close again. Each is read again and applied again inside Grandbo (`tiers.retry`), and what a request stored
is never left half done (an alert's triage is recorded with its first storing). Outcomes are counted, both
backends."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from grandbo.errors import GrandboError
from grandbo.ingest import flow
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo
from tests.console_browser import alertmanager
from tests.serving import serving
from tests.test_webhooks import GRAFANA, OPSGENIE

WRITERS = 8


def at_once(calls: list[Callable[[], Any]]) -> Counter[str]:
    """Run the calls on as many threads at once; count what each ended with (ok, or the error's type)."""

    def outcome(call: Callable[[], Any]) -> str:
        try:
            call()
        except GrandboError as error:
            return error.code
        return "ok"

    with ThreadPoolExecutor(len(calls)) as pool:
        return Counter(pool.map(outcome, calls))


def test_identical_deliveries_at_once_are_all_taken_and_the_alert_is_triaged(memory: OrgMemory) -> None:
    memory.remember({"title": "redis-sessions evicting keys under maxmemory", "body": "allkeys-lru evictions"})
    for round_ in range(16):  # the race lost an alert's triage about one round in three (Postgres)
        fingerprint = f"fp{round_}"
        body = json.dumps(alertmanager("redis-sessions evicting keys", "redis-sessions", fingerprint)).encode()
        answers: list[list[tuple[Any, bool]]] = []
        outcomes = at_once([lambda: answers.append(flow.receive(memory, "alertmanager", body, {}))] * WRITERS)
        assert outcomes == Counter(ok=WRITERS)
        assert sorted(new for answer in answers for _, new in answer) == [False] * (WRITERS - 1) + [True]
        (stored,) = [s for s in memory.alerts.recent(50) if s.alert.labels.get("alertname") == fingerprint]
        assert stored.deliveries == WRITERS
        assert stored.state == "recalled" and stored.plan is not None
    assert memory.stats().write_behinds == 0  # every triage done, none left waiting


def test_distinct_findings_at_once_are_all_kept(memory: OrgMemory) -> None:
    memory.incidents.open("Checkout errors", incident_id="I1")
    adds = [lambda n=n: memory.incidents.add_finding("I1", f"finding {n}") for n in range(WRITERS)]
    assert at_once(adds) == Counter(ok=WRITERS)
    findings = memory.incidents.get("I1").findings
    assert sorted(f.summary for f in findings) == sorted(f"finding {n}" for n in range(WRITERS))
    assert len({f.id for f in findings}) == WRITERS


def test_the_same_close_at_once_and_again_is_never_refused(memory: OrgMemory) -> None:
    memory.incidents.open("Checkout errors", incident_id="I1")
    memory.incidents.add_finding("I1", "pool exhausted", status="corroborated", root_cause="retry storm")
    assert at_once([lambda: memory.incidents.close("I1")] * WRITERS) == Counter(ok=WRITERS)
    for _ in range(3):  # a close retried after its answer: idempotent
        assert memory.incidents.close("I1").status.value == "closed"
    closed = memory.incidents.get("I1")
    assert closed.memory_sync == "done" and list(closed.memory) == ["f1"]
    assert memory.stats().write_behinds == 0


def test_a_close_sent_again_over_rest_answers_200_while_the_first_ones_sync_runs(
    grandbo: Grandbo, background: Grandbo
) -> None:
    memory = background.org("acme", create=True)
    _, key = memory.keys.create("write", name="oncall")
    statuses: Counter[int] = Counter()
    with serving(background) as served, served.client(key) as client:
        for n in range(8):  # the second close raced the first one's sync (a write-behind) 4 runs in 15
            assert client.post("/v1/incidents", json={"id": f"I{n}", "title": "t"}).status_code == 201
            statuses.update(client.post(f"/v1/incidents/I{n}/close", json={}).status_code for _ in range(2))
        background.flush(timeout=60)
    assert statuses == Counter({200: 16})
    assert all(memory.incidents.get(f"I{n}").memory_sync == "done" for n in range(8))


@pytest.mark.parametrize(("source", "payload"), [("grafana", GRAFANA), ("opsgenie", OPSGENIE)])
def test_identical_deliveries_over_rest_answer_2xx_once_new(
    grandbo: Grandbo, source: str, payload: dict[str, Any]
) -> None:
    memory = grandbo.org("acme", create=True)
    memory.remember({"title": "checkout-api 5xx after a deploy", "body": "kafka consumer lag on orders"})
    _, key = memory.keys.create("write", name="alerts")
    body = json.dumps(payload).encode()
    with serving(grandbo) as served:

        def deliver() -> int:
            with served.client(key) as client:
                return client.post(f"/v1/webhooks/{source}", content=body,
                              headers={"Content-Type": "application/json"}).status_code  # fmt: skip

        with ThreadPoolExecutor(WRITERS) as pool:
            statuses = Counter(pool.map(lambda _: deliver(), range(WRITERS)))
    assert statuses == Counter({202: 1, 200: WRITERS - 1})
    (stored,) = memory.alerts.recent()
    assert stored.deliveries == WRITERS and stored.state == "recalled"
    assert memory.stats().write_behinds == 0


def test_one_incidents_outcome_reported_at_once_is_counted_once(memory: OrgMemory) -> None:
    memory.runbooks.add("RB-1", "Restart the pool", ["restart it"], services=["checkout-api"])
    report = [lambda: memory.ledger.record("RB-1", "succeeded", incident_id="I1")] * WRITERS
    assert at_once(report) == Counter(ok=WRITERS)
    assert [o.kind.value for o in memory.ledger.outcomes(["RB-1"])] == ["succeeded"]
