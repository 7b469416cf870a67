"""An organization's alert backlog is bounded by the time its own measured triage would take to drain it
(GRANDBO_ALERT_ORG_BACKLOG_SECONDS), not only by a count: a large org's alert takes longer to triage, and a count
of alerts let its backlog last minutes. An org that holds none is never refused for it."""

from __future__ import annotations

import threading
import time

import pytest

from grandbo.errors import AlertBacklogError
from grandbo.pools import BoundedPool
from tests.test_alert_storm import _alertmanager, _post, _served


def _measured(pool: BoundedPool, org: str, seconds: float) -> None:
    """One task of `org` that takes at least `seconds` (its measured duration is no shorter)."""
    pool.submit(org, lambda: time.sleep(seconds)).result(60)


def test_an_orgs_held_tasks_are_refused_past_the_time_its_measured_tasks_would_take():
    pool = BoundedPool("alert-triage", 1, 100, 1.0, org_held=100, org_error=AlertBacklogError, org_seconds=1.0)
    gate = threading.Event()
    try:
        _measured(pool, "acme", 0.3)  # acme's tasks take 0.3 s at least
        pool.submit("acme", lambda: gate.wait(60) and None)  # one held
        with pytest.raises(AlertBacklogError) as refused:
            pool.reserve("acme", 3)  # 4 tasks of 0.3 s at least: past its second, refused whole
        assert refused.value.detail["org_seconds"] == 1.0 and refused.value.detail["task_ms"] >= 300
        assert refused.value.retry_after >= 1 and "1 s it may hold" in refused.value.message
        with pool.reserve("beta", 20) as seats:  # another org holds none: taken (its count bounds it)
            assert seats.left == 20
        gate.set()
        assert pool.idle(60)
        with pool.reserve("acme", 50) as seats:  # acme holds none now: a batch of any size is taken
            assert seats.left == 50
        assert pool.stats().refused == 1
    finally:
        gate.set()
        pool.shutdown(wait=False)


def test_a_slow_orgs_second_delivery_is_refused_429_naming_the_seconds_and_another_org_goes_on(tmp_path):
    gate = threading.Event()
    with _served(tmp_path, ("acme", "beta"), alert_org_backlog=1000, alert_org_backlog_seconds=10) as (
        grandbo, _, clients,
    ):  # fmt: skip
        acme, beta = clients["acme"], clients["beta"]
        alerts, triage = grandbo.pools.alerts, grandbo.pools.triage
        assert alerts is not None
        seats = grandbo.org("acme").reserve_alerts(1)  # one acme alert triage measured at 0.1 s at least
        assert seats is not None
        with seats:
            seats.submit(lambda: time.sleep(0.1))
        assert alerts.idle(60)
        for _ in range(triage.stats().org_running):  # acme's recalls wait: none of its triages ends meanwhile
            triage.submit("acme", lambda: gate.wait(60) and None)
        try:
            first = _post(acme, _alertmanager("a", 500))  # held none: taken (500 of 0.1 s: past 10 s, still taken)
            second = _post(acme, _alertmanager("b", 20))  # 500 held at 0.1 s each: past 10 s, refused whole
            other = _post(beta, _alertmanager("c", 500))  # another org, holding none: taken
            stored = len(grandbo.org("acme").alerts.recent(5000))
        finally:
            gate.set()
    assert (first.status_code, other.status_code) == (202, 202)
    assert second.status_code == 429, second.text
    error = second.json()["error"]
    assert error["type"] == "org_over_share" and "GRANDBO_ALERT_ORG_BACKLOG_SECONDS" in error["remedy"]
    assert error["detail"]["org_seconds"] == 10 and error["detail"]["units"] == 20
    assert int(second.headers["Retry-After"]) >= 10 and stored == 500  # nothing of the refused delivery stored


def test_a_batch_goes_into_its_reserved_places_at_once_in_order_and_no_further():
    pool = BoundedPool("alert-triage", 1, 100, 1.0, org_held=100)
    ran: list[int] = []
    try:
        with pool.reserve("acme", 5) as seats:
            futures = seats.submit_all([lambda n=n: ran.append(n) for n in range(4)])
            with pytest.raises(ValueError, match="no reserved place left"):
                seats.submit_all([lambda: None, lambda: None])  # one place left, two asked
            assert seats.left == 1
        assert [future.result(60) for future in futures] == [None] * 4 and ran == [0, 1, 2, 3]
        assert pool.idle(60) and pool.stats().by_org == {} and pool.stats().peak_org_held == 5
    finally:
        pool.shutdown(wait=False)
