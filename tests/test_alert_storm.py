"""One organization's alert storm on a real server: its share of the alert-triage pool is counted in alerts,
not deliveries (a delivery past GRANDBO_ALERT_ORG_BACKLOG is refused with 429 and Retry-After before anything
is stored, and stored once when sent again); the pool triages one alert at a time, organizations in turn, so
another organization's alerts are not queued behind a storm's backlog."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from grandbo.config import Settings
from grandbo.service import Grandbo
from tests.serving import serving


def _alertmanager(prefix: str, count: int, firing: bool = True) -> bytes:
    alerts = [
        {"status": "firing" if firing else "resolved",
         "labels": {"alertname": f"RedisEvictions{n}", "service": "redis-sessions", "severity": "critical"},
         "annotations": {"summary": f"redis-sessions evicting keys, shard {n}"},
         "startsAt": "2026-11-30T10:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
         "generatorURL": "http://prometheus.example:9090/graph", "fingerprint": f"{prefix}{n:012x}"}
        for n in range(count)
    ]  # fmt: skip
    return json.dumps({"version": "4", "groupKey": "{}:{}", "truncatedAlerts": 0, "status": "firing",
                       "receiver": "grandbo", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                       "externalURL": "http://am.example", "alerts": alerts}).encode()  # fmt: skip


@contextmanager
def _served(tmp_path, orgs: tuple[str, ...], **settings: Any) -> Iterator[tuple[Grandbo, Any, dict[str, Any]]]:
    """A real server with background threads over orgs that each know one memory; a write client per org."""
    configured = Settings(home=tmp_path / "home", **settings)
    Grandbo.init(configured, embedding="deterministic").close()
    with Grandbo.open(configured, write_behind=True) as grandbo, serving(grandbo) as served:
        clients = {}
        for org in orgs:
            memory = grandbo.org(org, create=True)
            memory.remember({"id": "M-1", "title": "redis-sessions evicting keys", "body": "maxmemory reached"})
            clients[org] = served.client(memory.keys.create("write")[1])
        try:
            yield grandbo, served, clients
        finally:
            for client in clients.values():
                client.close()


def _post(client: Any, body: bytes) -> Any:
    return client.post("/v1/webhooks/alertmanager", content=body, headers={"Content-Type": "application/json"})


def _hold_alert_thread(grandbo: Grandbo, org: str, gate: threading.Event) -> None:
    """Take `org`'s one running thread of the alert-triage pool until `gate` opens (its place: one alert's)."""
    seats = grandbo.org(org).reserve_alerts(1)
    assert seats is not None
    with seats:
        seats.submit(lambda: gate.wait(60) and None)
    pool = grandbo.pools.alerts
    assert pool is not None
    deadline = threading.Event()
    for _ in range(600):
        if pool.stats().by_org.get(org, (0, 0))[0] == 1:
            return
        deadline.wait(0.05)
    pytest.fail(f"{org}'s hold never took its thread")


def test_a_delivery_past_the_orgs_alert_backlog_is_refused_429_before_it_is_stored_and_stored_once_resent(tmp_path):
    gate = threading.Event()
    with _served(tmp_path, ("acme", "beta"), alert_org_backlog=1000) as (grandbo, _, clients):
        acme, beta = clients["acme"], clients["beta"]
        _hold_alert_thread(grandbo, "acme", gate)  # acme's triage waits: 1 place of its 1,000 held
        first = _post(acme, _alertmanager("a", 500))
        second = _post(acme, _alertmanager("b", 499))  # 1,000 places: acme's backlog is full
        refused = _post(acme, _alertmanager("c", 11))  # 11 alerts more: past it, whole
        small = _post(acme, _alertmanager("d", 3))  # triaged before its answer: not the backlog's
        other = _post(beta, _alertmanager("e", 500))  # another organization goes on
        stored_while_full = len(grandbo.org("acme").alerts.recent(5000))
        held = grandbo.pools.alerts.stats()  # type: ignore[union-attr]
        gate.set()
        assert grandbo.pools.alerts.idle(300)  # type: ignore[union-attr]
        resent = _post(acme, _alertmanager("c", 11))  # the sender retries the same delivery
        again = _post(acme, _alertmanager("c", 11))  # and once more: a redelivery
        assert grandbo.pools.alerts.idle(300)  # type: ignore[union-attr]
        kept = grandbo.org("acme").alerts.recent(5000)
    assert [first.status_code, second.status_code, small.status_code, other.status_code] == [202] * 4
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["type"] == "org_over_share" and "GRANDBO_ALERT_ORG_BACKLOG" in error["remedy"]
    assert int(refused.headers["Retry-After"]) >= 1
    assert error["detail"]["retry_after_s"] == int(refused.headers["Retry-After"]) and error["detail"]["units"] == 11
    assert stored_while_full == 500 + 499 + 3  # nothing of the refused delivery was stored
    assert {a["state"] for a in small.json()["alerts"]} == {"recalled"}
    assert held.by_org["acme"] == (1, 999) and held.peak_org_held == 1000  # counted in alerts: never past it
    assert (resent.status_code, resent.json()["new"]) == (202, 11)
    assert (again.status_code, again.json()["new"]) == (200, 0)
    assert len(kept) == 500 + 499 + 3 + 11 and {a.state for a in kept} == {"recalled"}  # each once, each triaged


def test_another_orgs_alerts_are_triaged_in_turn_with_a_storms_not_behind_its_backlog(tmp_path):
    gate = threading.Event()
    with _served(tmp_path, ("acme", "beta", "gamma")) as (grandbo, _, clients):
        for org in ("acme", "gamma"):  # the pool's two threads: each storming org holds one
            _hold_alert_thread(grandbo, org, gate)
        storms = [_post(clients[org], _alertmanager(org[0], 100)) for org in ("acme", "gamma")]
        quiet = _post(clients["beta"], _alertmanager("b", 20))  # sent last: waits behind 200 alerts
        waiting = grandbo.pools.alerts.stats().by_org  # type: ignore[union-attr]
        gate.set()
        assert grandbo.pools.alerts.idle(300)  # type: ignore[union-attr]
        done = sorted(
            (alert.updated_at, org)
            for org in ("acme", "beta", "gamma")
            for alert in grandbo.org(org).alerts.recent(500)
        )
    assert [s.status_code for s in storms] + [quiet.status_code] == [202] * 3
    assert waiting["beta"] == (0, 20) and waiting["acme"] == (1, 100)
    order = [org for _, org in done]
    assert len(order) == 220 and order.count("beta") == 20
    last_beta = max(n for n, org in enumerate(order) if org == "beta")
    # In turn: beta's 20 alerts among the first ~60 triaged (one of every three), not after a whole delivery.
    assert last_beta < 100, order


def test_a_pool_reserves_a_batchs_places_all_or_none_and_gives_back_those_unused():
    from grandbo.errors import AlertBacklogError, AlertsBusyError  # (new: imported here, so the others run on old code)
    from grandbo.pools import BoundedPool

    pool = BoundedPool("test", workers=1, queue=9, org_share=0.5, org_held=6,
                       org_error=AlertBacklogError, pool_error=AlertsBusyError)  # fmt: skip
    gate = threading.Event()
    served: list[str] = []

    def task(org: str) -> None:
        gate.wait(30)
        served.append(org)

    with pool.reserve("acme", 5) as acme:  # an org: 6 places; the pool: 10
        with pytest.raises(AlertBacklogError) as over_share:
            pool.reserve("acme", 2)  # 7 > 6: none of the 2 taken
        acme.submit(lambda: task("acme"))
        for _ in range(600):  # the one thread holds acme's first task before the rest queue
            if pool.stats().running == 1:
                break
            gate.wait(0.05)
        for _ in range(2):
            acme.submit(lambda: task("acme"))
        reserved = pool.stats().by_org["acme"]
    after_close = pool.stats().by_org["acme"]  # the 2 places not used given back
    with pool.reserve("beta", 6) as beta:
        with pytest.raises(AlertsBusyError) as full:
            pool.reserve("gamma", 2)  # 3 + 6 + 2 > 10: the process is full
        beta.submit(lambda: task("beta"))
        beta.submit(lambda: task("beta"))
        with pytest.raises(ValueError, match="no reserved place"):
            pool.reserve("delta", 0).submit(lambda: None)
    gate.set()
    assert pool.idle(30)
    pool.shutdown()
    assert over_share.value.status == 429 and over_share.value.retry_after >= 1
    assert full.value.status == 503 and full.value.retry_after >= 1
    assert over_share.value.detail["units"] == 2
    assert sum(reserved) == 5 and sum(after_close) == 3
    assert served == ["acme", "acme", "beta", "acme", "beta"]  # after the one running, in turn
    stats = pool.stats()
    assert stats.peak_org_held <= 6 and stats.peak_held <= 10 and stats.refused == 2


def test_an_orgs_alert_backlog_always_holds_one_whole_delivery():
    """A backlog under one delivery's most alerts would refuse such a delivery for ever (429, every retry)."""
    from grandbo.config import Settings
    from grandbo.ingest.adapters import MAX_ALERTS

    least = next(rule.ge for rule in Settings.model_fields["alert_org_backlog"].metadata if hasattr(rule, "ge"))
    assert least >= MAX_ALERTS
