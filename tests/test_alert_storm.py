"""One organization's alert storm on a real server: its share of the alert-triage pool is counted in alerts,
not deliveries (a delivery past GRANDBO_ALERT_ORG_BACKLOG is refused with 429 and Retry-After before anything
is stored, and stored once when sent again); the pool triages one alert at a time, organizations in turn, so
another organization's alerts are not queued behind a storm's backlog. A group sent again (Alertmanager's
group_interval) takes places for its new alerts only: with nothing new it is taken while the backlog is full."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from grandbo.background import READS_WHILE_REFUSED_BURST, READS_WHILE_REFUSED_PER_S
from grandbo.config import Settings
from grandbo.service import Grandbo
from tests.serving import serving

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)


def _alerts(prefix: str, numbers: range, firing: bool = True) -> list[dict[str, Any]]:
    return [
        {"status": "firing" if firing else "resolved",
         "labels": {"alertname": f"RedisEvictions{n}", "service": "redis-sessions", "severity": "critical"},
         "annotations": {"summary": f"redis-sessions evicting keys, shard {n}"},
         "startsAt": "2026-11-30T10:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
         "generatorURL": "http://prometheus.example:9090/graph", "fingerprint": f"{prefix}{n:012x}"}
        for n in numbers
    ]  # fmt: skip


def _group(*alerts: list[dict[str, Any]]) -> bytes:
    return json.dumps({"version": "4", "groupKey": "{}:{}", "truncatedAlerts": 0, "status": "firing",
                       "receiver": "grandbo", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                       "externalURL": "http://am.example",
                       "alerts": [alert for part in alerts for alert in part]}).encode()  # fmt: skip


def _alertmanager(prefix: str, count: int, firing: bool = True) -> bytes:
    return _group(_alerts(prefix, range(count), firing))


@contextmanager
def _served(
    tmp_path, orgs: tuple[str, ...], base: Settings | None = None, **settings: Any
) -> Iterator[tuple[Grandbo, Any, dict[str, Any]]]:
    """A real server with background threads over orgs that each know one memory; a write client per org. `base`:
    the settings to start from (a backend's, from the `settings` fixture)."""
    configured = (base or Settings(home=tmp_path / "home")).model_copy(update=settings)
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
    with _served(tmp_path, ("acme", "beta"), alert_org_backlog=500) as (grandbo, _, clients):
        acme, beta = clients["acme"], clients["beta"]
        _hold_alert_thread(grandbo, "acme", gate)  # acme's triage waits: 1 place of its 500 held
        first = _post(acme, _alertmanager("a", 250))
        second = _post(acme, _alertmanager("b", 249))  # 500 places (the least it may be): acme's backlog is full
        refused = _post(acme, _alertmanager("c", 11))  # 11 alerts more: past it, whole
        small = _post(acme, _alertmanager("d", 3))  # triaged before its answer: not the backlog's
        other = _post(beta, _alertmanager("e", 250))  # another organization goes on
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
    assert stored_while_full == 250 + 249 + 3  # nothing of the refused delivery was stored
    assert {a["state"] for a in small.json()["alerts"]} == {"recalled"}
    assert held.by_org["acme"] == (1, 499) and held.peak_org_held == 500  # counted in alerts: never past it
    assert (resent.status_code, resent.json()["new"]) == (202, 11)
    assert (again.status_code, again.json()["new"]) == (200, 0)
    assert len(kept) == 250 + 249 + 3 + 11 and {a.state for a in kept} == {"recalled"}  # each once, each triaged


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


def _waiting(grandbo: Grandbo, org: str) -> tuple[int, int]:
    """`org`'s alert triages in the alert-triage pool now: (running, waiting or reserved)."""
    assert grandbo.pools.alerts is not None
    return grandbo.pools.alerts.stats().by_org.get(org, (0, 0))


def test_a_resent_group_takes_places_for_its_new_alerts_only_and_is_taken_while_the_backlog_is_full(settings):
    """Alertmanager sends a group again every group_interval. Its alerts already stored add no work: a re-sent
    group used to be counted whole against the backlog, and refused (429, retried by the sender) while it was full."""
    gate = threading.Event()
    with _served(settings.home.parent, ("acme",), base=settings, alert_org_backlog=500) as (grandbo, _, clients):
        acme = clients["acme"]
        _hold_alert_thread(grandbo, "acme", gate)  # 1 place of acme's 500
        first = _post(acme, _alertmanager("a", 250))
        mixed = _post(acme, _group(_alerts("a", range(247)), _alerts("f", range(3))))  # 3 new: 3 places
        after_mixed = _waiting(grandbo, "acme")
        second = _post(acme, _alertmanager("b", 246))  # 1 + 250 + 3 + 246: the backlog is full
        full = _waiting(grandbo, "acme")
        resent = _post(acme, _alertmanager("a", 250))  # nothing new
        resolves = _post(acme, _group(_alerts("a", range(10), firing=False), _alerts("a", range(10, 250))))
        refused = _post(acme, _group(_alerts("a", range(240)), _alerts("g", range(5))))  # 5 new: no room
        broken = json.loads(_alertmanager("h", 500))
        del broken["alerts"][-1]["labels"]["alertname"], broken["alerts"][-1]["annotations"]["summary"]
        malformed = _post(acme, json.dumps(broken).encode())  # no room either, but its fault comes first
        still_full = _waiting(grandbo, "acme")
        gate.set()
        assert grandbo.pools.alerts.idle(300)  # type: ignore[union-attr]
        stats = grandbo.pools.alerts.stats()  # type: ignore[union-attr]
        kept = {stored.alert.fingerprint: stored for stored in grandbo.org("acme").alerts.recent(5000)}
    assert [first.status_code, mixed.status_code, second.status_code] == [202] * 3
    assert (mixed.json()["new"], after_mixed) == (3, (1, 253)), mixed.text
    assert full == (1, 499) and still_full == full and stats.peak_org_held == 500
    assert (resent.status_code, resent.json()["new"], len(resent.json()["alerts"])) == (200, 0, 250), resent.text
    assert (resolves.status_code, resolves.json()["new"]) == (200, 0), resolves.text
    assert refused.status_code == 429 and refused.json()["error"]["detail"]["units"] == 5, refused.text
    assert malformed.status_code == 422 and "alerts[499]" in malformed.text, malformed.text
    # Nothing lost, nothing stored twice, each alert triaged once; the refused delivery stored nothing.
    assert len(kept) == 250 + 3 + 246 and not any(f.startswith(("g", "h")) for f in kept)
    assert {stored.state for stored in kept.values()} == {"recalled"} and stats.done == 1 + 499
    assert [kept[f"a{n:012x}"].alert.status for n in (0, 9, 10)] == ["resolved", "resolved", "firing"]
    assert [kept[f"a{n:012x}"].deliveries for n in (0, 246, 247, 249)] == [4, 4, 3, 3]


def test_the_same_new_group_sent_to_two_requests_at_once_is_triaged_once_and_frees_the_loser_s_places(settings):
    """Both requests find the alerts missing and reserve their places; the one whose write lands first stores and
    triages them, the other's write conflicts, reads them again as redelivered, and gives its places back."""
    gate, start = threading.Event(), threading.Barrier(2)
    answers: list[Any] = []

    def send(client: Any) -> None:
        start.wait(30)
        answers.append(_post(client, _alertmanager("s", 40)))

    with _served(settings.home.parent, ("acme",), base=settings) as (grandbo, served, clients):
        other = served.client(grandbo.org("acme").keys.create("write")[1])  # a second sender of the same group
        _hold_alert_thread(grandbo, "acme", gate)
        threads = [threading.Thread(target=send, args=(client,)) for client in (clients["acme"], other)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        held = _waiting(grandbo, "acme")  # the winner's 40 waiting behind the hold; the loser's given back
        gate.set()
        assert grandbo.pools.alerts.idle(300)  # type: ignore[union-attr]
        stats = grandbo.pools.alerts.stats()  # type: ignore[union-attr]
        kept = grandbo.org("acme").alerts.recent(500)
        other.close()
    assert sorted((a.status_code, a.json()["new"]) for a in answers) == [(200, 0), (202, 40)]
    assert held == (1, 40) and _waiting(grandbo, "acme") == (0, 0)
    assert len(kept) == 40 and {a.state for a in kept} == {"recalled"} and stats.done == 1 + 40


def test_large_groups_sent_again_with_nothing_new_leave_the_alert_pool_triaging_every_orgs_alerts(settings):
    """Alertmanager sends a group again every group_interval. A large one with nothing new queued an empty batch in
    the alert-triage pool, and the thread that came to it died (probe 32): two such resends, once the alerts sent
    first were triaged, ended the pool's two threads, and from then on every organization's large deliveries were
    stored, answered 202 and never triaged in that process."""
    with _served(settings.home.parent, ("acme", "gamma", "beta"), base=settings) as (grandbo, _, clients):
        pool = grandbo.pools.alerts
        assert pool is not None
        resent = []
        for org in ("acme", "gamma"):  # one resend a thread of the pool, each of its own org
            first = _post(clients[org], _alertmanager(org[0], 20))
            assert first.status_code == 202 and pool.idle(60), first.text  # triaged before the group comes again
            resent.append(_post(clients[org], _alertmanager(org[0], 20)))
        other = _post(clients["beta"], _alertmanager("b", 20))
        drained = pool.idle(60)
        kept = grandbo.org("beta").alerts.recent(50)
    assert [(again.status_code, again.json()["new"]) for again in resent] == [(200, 0)] * 2
    assert other.status_code == 202 and drained, "beta's alerts are still waiting for a thread of the pool"
    assert len(kept) == 20 and {a.state for a in kept} == {"recalled"}


def test_an_empty_batch_queues_nothing_and_the_pools_thread_serves_the_next_task():
    from grandbo.pools import BoundedPool

    pool = BoundedPool("test", workers=1, queue=9, org_share=0.5)
    with pool.reserve("acme", 3) as acme:
        assert acme.submit_all([]) == []  # a resent group: nothing new to triage
    done = pool.submit("beta", lambda: "served")
    try:
        assert done.result(timeout=30) == "served"
    finally:
        pool.shutdown(wait=False, timeout=5)


def test_a_small_redelivery_with_nothing_new_is_taken_while_the_triage_pool_has_no_room(settings):
    """A small delivery is triaged before its answer, so it needs room in the triage pool, but only for an alert
    it triages: one with nothing new used to be refused 429 when its org's share of that pool was taken."""
    body = _alertmanager("p", 3)
    with _served(settings.home.parent, ("acme",), base=settings) as (grandbo, _, clients):
        acme = clients["acme"]
        first = _post(acme, body)
        pool = grandbo.pools.triage
        # A triage past its deadline (a loaded machine) is answered without its plan and ends on its thread after.
        assert pool.idle(timeout=30)
        with pool.reserve("acme", pool.stats().org_held):  # every place of acme's share taken
            again = _post(acme, body)
            new = _post(acme, _group(_alerts("p", range(3)), _alerts("q", range(1))))
        kept = grandbo.org("acme").alerts.recent(50)
    assert (first.status_code, first.json()["new"]) == (202, 3)
    assert (again.status_code, again.json()["new"]) == (200, 0), again.text
    assert new.status_code == 429, new.text  # one new alert to triage: no room for it, nothing stored
    assert len(kept) == 3 and {a.deliveries for a in kept} == {2}


def test_a_storm_outpacing_the_reads_of_its_full_backlog_is_refused_unread_and_read_again_once_it_has_room(settings):
    """A refused storm's senders retry at once: each large delivery read (parsed, looked up) only to be refused
    costs a server about 10 ms. After a refusal for the org's backlog, its large deliveries are read at most
    READS_WHILE_REFUSED_PER_S a second past a burst; the rest are refused unread (a malformed one gets 429, not
    its 422), other orgs are untouched, and the first delivery that takes places again ends it."""
    gate = threading.Event()
    with _served(settings.home.parent, ("acme", "beta"), base=settings, alert_org_backlog=500) as (
        grandbo, _, clients,
    ):  # fmt: skip
        acme, beta = clients["acme"], clients["beta"]
        _hold_alert_thread(grandbo, "acme", gate)
        assert _post(acme, _alertmanager("a", 499)).status_code == 202  # full
        refused = _post(acme, _alertmanager("b", 50))
        broken = json.loads(_alertmanager("h", 60))
        del broken["alerts"][0]["labels"]["alertname"], broken["alerts"][0]["annotations"]["summary"]
        storm = [_post(acme, json.dumps(broken).encode()) for _ in range(3 * READS_WHILE_REFUSED_BURST)]
        other = _post(beta, json.dumps(broken).encode())  # another org's is read: its fault is said
        gate.set()
        assert grandbo.pools.alerts.idle(300)  # type: ignore[union-attr]
        for _ in range(60):  # a read comes back within 1 / READS_WHILE_REFUSED_PER_S seconds
            if (taken := _post(acme, _alertmanager("b", 50))).status_code != 429:
                break
            threading.Event().wait(1 / READS_WHILE_REFUSED_PER_S)
        after = _post(acme, json.dumps(broken).encode())
    assert refused.status_code == 429 and refused.json()["error"]["detail"]["units"] == 50
    statuses = [answer.status_code for answer in storm]
    assert statuses[:READS_WHILE_REFUSED_BURST] == [422] * READS_WHILE_REFUSED_BURST  # read: a burst of them
    unread = [answer for answer in storm if answer.status_code == 429]
    assert unread and set(statuses) == {422, 429}
    error = unread[0].json()["error"]
    assert error["type"] == "org_over_share" and "GRANDBO_ALERT_ORG_BACKLOG" in error["remedy"]
    assert int(unread[0].headers["Retry-After"]) >= 1 and "not read" in error["message"]
    assert other.status_code == 422
    assert (taken.status_code, taken.json()["new"]) == (202, 50)
    assert after.status_code == 422  # places taken again: every delivery is read


def test_an_orgs_sparing_reads_end_at_its_refusals_retry_after_though_its_backlog_is_still_full(settings, monkeypatch):
    """While an org's backlog is full its large deliveries are read at most READS_WHILE_REFUSED_PER_S a second past a
    burst, until its last refusal's Retry-After (when the pool expected room): then they are all read again, so a
    sender that waited as told is not refused unread for a refusal it already honoured. On the process's clock
    (only this module's reading of it is moved)."""
    from types import SimpleNamespace

    from grandbo import background
    from grandbo.errors import AlertBacklogError

    clock = SimpleNamespace(now=1_000.0)
    monkeypatch.setattr(background, "time", SimpleNamespace(monotonic=lambda: clock.now))
    pools = background.Background(settings, threads=True)
    held = pools.reserve_alerts("acme", settings.alert_org_backlog)  # the org's whole backlog, never given back here
    try:
        with pytest.raises(AlertBacklogError) as refused:
            pools.reserve_alerts("acme", 1)
        for _ in range(READS_WHILE_REFUSED_BURST):
            pools.admit("acme", "alerts")  # read
        with pytest.raises(AlertBacklogError) as unread:
            pools.admit("acme", "alerts")
        assert unread.value.retry_after <= refused.value.retry_after
        pools.admit("beta", "alerts")  # another org is read
        clock.now += refused.value.retry_after
        for _ in range(3 * READS_WHILE_REFUSED_BURST):
            pools.admit("acme", "alerts")  # every one read: the refusal's Retry-After has passed
    finally:
        assert held is not None
        held.close()
        pools.close()
