"""Shared work between organizations, on a real server: bounded pools with per-org shares and back-pressure
(429 / 503 with Retry-After), large webhook deliveries triaged after their answer, per-key rate limits, and
one long-lived HTTP client per provider and LLM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import structlog

from grandbo.config import Settings
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings
from tests.serving import BOUND, serving

FLOOD = "floodmark"  # acme's alerts carry it; the fake provider holds every request that does


def _until(check: Callable[[], bool], what: str, seconds: float = 30, show: Callable[[], object] = str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"never: {what} ({show()})"
        time.sleep(0.02)


def _hosted(tmp_path, url: str, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "home": tmp_path / "home", "openai_base_url": url, "openai_model": "fake-embed", "openai_dimension": 8,
        "openai_api_key": "test-key", "vector_min_similarity": -1.0, "http_timeout_seconds": 60,
        # a small pool: 4 triage threads, at most 4 tasks waiting; an org may run 2 and hold 4
        "triage_workers": 4, "work_queue": 4, "work_org_share": 0.5,
    }  # fmt: skip
    return Settings(**{**values, **extra})


@contextmanager
def _two_orgs(settings: Settings) -> Iterator[tuple[Grandbo, dict[str, str]]]:
    with Grandbo.init(settings, embedding="openai") as grandbo:
        keys = {}
        for org in ("acme", "beta"):
            memory = grandbo.org(org, create=True)
            memory.remember({"id": "M-1", "title": "redis evictions on redis-sessions", "body": "maxmemory reached"})
            keys[org] = memory.keys.create("read", name="agent")[1]
        yield grandbo, keys


def _triage(served, key: str, summary: str, out: list[Any] | None = None) -> Any:
    with served.client(key) as client:
        response = client.post("/v1/triage", json={"summary": summary, "service": "redis-sessions", "narrate": False})
    if out is not None:
        out.append(response)
    return response


def test_an_org_flooding_triage_gets_429_with_retry_after_while_another_org_is_served(tmp_path):
    with FakeEmbeddings() as fake:
        fake.behaviour.hold, fake.behaviour.hold_for = threading.Event(), {FLOOD}
        budgets = {"triage_recall_budget_ms": 60_000, "triage_budget_ms": 60_000}  # acme's requests stay in flight
        # No turns of acme's requests at the HTTP layer: its fifth request (GRANDBO_REQUESTS_PER_ORG is 4) waited
        # there GRANDBO_REQUESTS_WAIT_SECONDS (10 s) and was refused by it, never reaching the triage pool's share.
        settings = _hosted(tmp_path, fake.url, requests_per_org=0, **budgets)
        with _two_orgs(settings) as (grandbo, keys), serving(grandbo) as served:
            answers: list[Any] = []
            flood = [threading.Thread(target=_triage, args=(served, keys["acme"], f"{FLOOD} redis evictions {n}",
                                                            answers)) for n in range(4)]  # fmt: skip
            for thread in flood:
                thread.start()
            pool = grandbo.pools.triage
            _until(
                lambda: pool.stats().by_org.get("acme") == (2, 2),
                "acme holds its share: 2 running, 2 waiting",
                show=lambda: (pool.stats(), [a.text for a in answers]),
            )

            refused = _triage(served, keys["acme"], f"{FLOOD} redis evictions again")
            served_beta = _triage(served, keys["beta"], "redis evictions on redis-sessions")

            fake.behaviour.hold.set()
            for thread in flood:
                thread.join(60)
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["Retry-After"]) >= 1
    error = refused.json()["error"]
    assert error["type"] == "org_over_share" and "GRANDBO_WORK_ORG_SHARE" in error["remedy"]  # the pool's share
    assert error["detail"]["retry_after_s"] == int(refused.headers["Retry-After"])
    assert served_beta.status_code == 200 and served_beta.json()["recall_arm"] == "reranked"  # not even degraded
    assert [a.status_code for a in answers] == [200] * 4  # what acme's share admitted was answered
    stats = pool.stats()
    assert stats.peak_org_running <= 2 and stats.peak_org_held <= 4 and stats.peak_held <= 8


def test_triage_work_whose_caller_gave_up_before_it_started_is_never_run(tmp_path):
    with FakeEmbeddings() as fake:
        fake.behaviour.hold, fake.behaviour.hold_for = threading.Event(), {FLOOD}
        budgets = {"triage_recall_budget_ms": 1000, "triage_budget_ms": 1500}
        with _two_orgs(_hosted(tmp_path, fake.url, **budgets)) as (grandbo, keys), serving(grandbo) as served:
            answers: list[Any] = []
            flood = [threading.Thread(target=_triage, args=(served, keys["acme"], f"{FLOOD} redis evictions {n}",
                                                            answers)) for n in range(4)]  # fmt: skip
            for thread in flood:
                thread.start()
            for thread in flood:  # every caller gives up (its budget passes) while two recalls are held
                thread.join(60)
            fake.behaviour.hold.set()
            assert grandbo.pools.triage.idle(60)
            held = [r for r in fake.behaviour.requests if FLOOD in json.dumps(r["body"])]
    assert {a.status_code for a in answers} <= {200, 429}
    assert len(held) == 2  # the two recalls that had a thread; the two still waiting were dropped, not run
    assert grandbo.pools.triage.stats().skipped >= 2


def _alertmanager(count: int) -> dict[str, Any]:
    alerts = [
        {"status": "firing", "labels": {"alertname": f"RedisEvictions{n}", "service": "redis-sessions",
                                        "severity": "critical"},
         "annotations": {"summary": f"redis-sessions evicting keys, shard {n}"},
         "startsAt": "2026-11-30T10:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
         "generatorURL": "http://prometheus.example:9090/graph", "fingerprint": f"{n:016x}"}
        for n in range(count)
    ]  # fmt: skip
    return {"version": "4", "groupKey": "{}:{}", "truncatedAlerts": 0, "status": "firing", "receiver": "grandbo",
            "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am.example",
            "alerts": alerts}  # fmt: skip


def test_a_500_alert_delivery_is_answered_before_its_alerts_are_triaged_and_each_gets_its_plan(tmp_path):
    settings = Settings(home=tmp_path / "home", work_queue=4)
    Grandbo.init(settings, embedding="deterministic").close()
    with Grandbo.open(settings, write_behind=True) as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember({"id": "M-1", "title": "redis-sessions evicting keys", "body": "maxmemory reached"})
        key = memory.keys.create("write")[1]
        with serving(grandbo) as served, served.client(key) as client:
            body = json.dumps(_alertmanager(500)).encode()
            answer = client.post("/v1/webhooks/alertmanager", content=body,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
            assert answer.status_code == 202, answer.text
            assert answer.json()["new"] == 500
            # the answer carries the alerts as stored: none triaged yet, none waited for
            assert {(a["state"], a["top_match"]) for a in answer.json()["alerts"]} == {("received", None)}
            assert grandbo.pools.alerts is not None
            assert grandbo.pools.alerts.idle(300)
            kept = client.get("/v1/alerts", params={"limit": 500}).json()["items"]
            whole = [client.get(a["href"]).json() for a in kept[:20]]
            unplanned = [a.id for a in memory.alerts.recent(500) if a.plan is None]
    assert len(kept) == 500 and unplanned == []
    assert {a["state"] for a in kept} == {"recalled"}
    assert all(a["plan"] and a["plan"]["query"] == a["query"] for a in whole)
    for pool in grandbo.pools.pools():  # the queues never held more than their bound
        stats = pool.stats()
        assert stats.peak_held <= stats.workers + stats.queue and stats.peak_org_held <= stats.org_held, pool.name
    alerts = grandbo.pools.alerts.stats()  # one place per alert, the delivery's 500 at most
    assert alerts.peak_org_held == 500 and alerts.org_held == settings.alert_org_backlog and alerts.done == 500


def test_a_small_delivery_is_still_triaged_before_its_answer(tmp_path):
    settings = Settings(home=tmp_path / "home")
    Grandbo.init(settings, embedding="deterministic").close()
    with Grandbo.open(settings, write_behind=True) as grandbo:
        key = grandbo.org("acme", create=True).keys.create("write")[1]
        with serving(grandbo) as served, served.client(key) as client:
            answer = client.post("/v1/webhooks/alertmanager", json=_alertmanager(3))
    assert answer.status_code == 202 and {a["state"] for a in answer.json()["alerts"]} == {"recalled"}


def test_a_pool_never_queues_past_its_bound_nor_an_org_past_its_share_and_serves_orgs_in_turn():
    from grandbo.errors import OrgOverloadedError, OverloadedError
    from grandbo.pools import BoundedPool  # (new with the pools: imported here so the other tests run on old code)

    pool = BoundedPool("test", workers=1, queue=7, org_share=0.5)  # an org: 1 running, 4 held; the pool: 8 held
    gate = threading.Event()
    served: list[str] = []

    def task(org: str) -> None:
        gate.wait(30)
        served.append(org)

    def submit(org: str) -> str:
        try:
            pool.submit(org, lambda: task(org))
            return "queued"
        except OrgOverloadedError as error:
            return "429" if error.retry_after >= 1 else "429 without Retry-After"
        except OverloadedError as error:
            return "503" if error.retry_after >= 1 else "503 without Retry-After"

    assert submit("acme") == "queued"
    _until(lambda: pool.stats().running == 1, "the one thread holds acme's first task")
    acme = [submit("acme") for _ in range(5)]
    beta = [submit("beta") for _ in range(5)]
    gamma = submit("gamma")
    stats = pool.stats()
    gate.set()
    assert pool.idle(30)
    pool.shutdown()
    assert acme == ["queued"] * 3 + ["429"] * 2  # acme's share: 4 tasks, one of them running
    assert beta == ["queued"] * 4 + ["429"]
    assert gamma == "503"  # the pool itself was full (8): the process is saturated, not gamma
    assert stats.peak_held == 8 and stats.peak_org_held == 4 and stats.peak_org_running == 1
    assert served == ["acme", "acme", "beta", "acme", "beta", "acme", "beta", "beta"]  # in turn, not acme's backlog


def test_a_key_over_its_rate_gets_429_while_other_keys_are_served(tmp_path):
    settings = Settings(home=tmp_path / "home", rate_limit_per_key=0.01, rate_limit_burst=3)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        acme, beta = grandbo.org("acme", create=True), grandbo.org("beta", create=True)
        (first, second, other) = (acme.keys.create("read")[1], acme.keys.create("read")[1], beta.keys.create("read")[1])
        with serving(grandbo) as served:
            with served.client(first) as client:
                codes = [client.get("/v1/stats").status_code for _ in range(3)]
                over = client.get("/v1/stats")
            with served.client(second) as client:
                same_org = client.get("/v1/stats")
            with served.client(other) as client:
                other_org = client.get("/v1/stats")
    assert codes == [200, 200, 200]
    assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
    assert over.json()["error"]["type"] == "rate_limited" and "GRANDBO_RATE_LIMIT_PER_KEY" in over.json()["error"][
        "remedy"]  # fmt: skip
    assert same_org.status_code == 200 and other_org.status_code == 200


def test_minting_keys_does_not_multiply_an_organizations_rate(tmp_path):
    """Each key had its own bucket and nothing else: an admin minting 8 keys sent 8 times the rate (a hostile
    probe). All of an org's keys together now share GRANDBO_RATE_LIMIT_PER_ORG (bursts 4 times a key's: 12 here);
    a request refused by a key's bucket takes nothing from its org's, and another org is served throughout."""
    settings = Settings(home=tmp_path / "home", rate_limit_per_key=0.01, rate_limit_burst=3, rate_limit_per_org=0.01)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        acme, beta = grandbo.org("acme", create=True), grandbo.org("beta", create=True)
        keys = [acme.keys.create("read")[1] for _ in range(6)]
        with serving(grandbo) as served:
            codes = []
            for key in keys:
                with served.client(key) as client:
                    codes.append([client.get("/v1/stats").status_code for _ in range(4)])  # the 4th: over its own
            with served.client(keys[-1]) as client:
                last = client.get("/v1/stats")
            with served.client(beta.keys.create("read")[1]) as client:
                other_org = client.get("/v1/stats")
    assert codes[:4] == [[200, 200, 200, 429]] * 4  # 12 served: the org's burst
    assert codes[4:] == [[429] * 4] * 2
    assert "Organization acme's keys together" in last.json()["error"]["message"]
    assert last.json()["error"]["detail"]["setting"] == "GRANDBO_RATE_LIMIT_PER_ORG"
    assert other_org.status_code == 200


@pytest.mark.parametrize("rate", [0.0])
def test_a_rate_of_zero_turns_the_limit_off(tmp_path, rate):
    """A key's rate of 0 turns both limits off (the org's is 4 times it, unset)."""
    settings = Settings(home=tmp_path / "home", rate_limit_per_key=rate, rate_limit_burst=1)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        key = grandbo.org("acme", create=True).keys.create("read")[1]
        with serving(grandbo) as served, served.client(key) as client:
            assert {client.get("/v1/stats").status_code for _ in range(5)} == {200}


def test_one_http_client_per_provider_and_llm_for_many_requests_closed_at_shutdown(tmp_path):
    with FakeEmbeddings(keep_alive=True) as fake:
        fake.behaviour.chat_answers = ['{"summary": "Check evictions.", "steps": []}'] * 100
        settings = _hosted(tmp_path, fake.url, llm_provider="openai", llm_base_url=f"{fake.url}/v1",
                           triage_workers=16, work_queue=64)  # fmt: skip
        Grandbo.init(settings, embedding="openai").close()
        grandbo = Grandbo.open(settings)
        try:
            memory = grandbo.org("acme", create=True)
            key = memory.keys.create("write")[1]
            with serving(grandbo) as served, served.client(key) as client:
                for n in range(25):  # 50 requests: each write embeds, each triage embeds and asks the LLM
                    written = client.post("/v1/memories", json={"title": f"redis evictions on shard {n}"})
                    assert written.status_code == 201, written.text
                    plan = client.post("/v1/triage", json={"summary": f"redis evicting keys, shard {n}"})
                    assert plan.status_code == 200, plan.text
            chats = [r for r in fake.behaviour.requests if r["path"].endswith("/chat/completions")]
            assert len(chats) == 25 and len(fake.behaviour.requests) >= 75
            opened = fake.connections
        finally:
            grandbo.close()
        _until(lambda: fake.open_connections == 0, "every connection closed once Grandbo closed", 30)
    # one client for the embeddings, one for the LLM; a second connection only when two calls overlapped
    assert opened <= 4, f"{opened} connections for {len(fake.behaviour.requests)} requests"


def test_a_close_whose_write_behind_has_no_room_is_refused_before_it_is_written(tmp_path):
    settings = Settings(home=tmp_path / "home", work_queue=1, work_org_share=0.5)  # an org holds 1 write-behind
    Grandbo.init(settings, embedding="deterministic").close()
    with Grandbo.open(settings, write_behind=True) as grandbo:
        acme, beta = grandbo.org("acme", create=True), grandbo.org("beta", create=True)
        for memory in (acme, beta):
            memory.incidents.open("Logins slow", incident_id="INC-1")
        gate = threading.Event()
        acme.defer(lambda: gate.wait(30) and None)  # acme's write-behind share is taken
        keys = {memory.org: memory.keys.create("write")[1] for memory in (acme, beta)}
        with serving(grandbo) as served:
            with served.client(keys["acme"]) as client:
                refused = client.post("/v1/incidents/INC-1/close", json={"resolution": "restarted"})
            with served.client(keys["beta"]) as client:
                closed = client.post("/v1/incidents/INC-1/close", json={"resolution": "restarted"})
            gate.set()
        still_open = acme.incidents.get("INC-1").status.value
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1, refused.text
    assert still_open == "open"  # refused before the close was written: the client's retry closes it once
    assert closed.status_code == 200 and closed.json()["status"] == "closed"


def test_closing_runs_queued_write_behinds_for_a_bounded_time_and_leaves_the_rest_to_the_redriver(
    tmp_path, monkeypatch
):
    """A write-behind was answered as done (an incident's close, an edit's learning, a delivery's triage), and it is
    recorded with its write (`grandbo.redrive`): closing the process runs what it queued for CLOSE_DRAIN_SECONDS,
    then leaves the rest to the re-driver, as a kill would. It ran all of it: one org's 1,500 queued alert triages
    held two servers' SIGTERM for over 2 minutes (probe 20a), every org's rolling deploy waiting. (That a recorded
    close left so is made whole by the next process: `test_write_behinds.py`.)"""
    from grandbo import background
    from grandbo.background import Background

    monkeypatch.setattr(background, "CLOSE_DRAIN_SECONDS", 0.3)
    pools = Background(Settings(home=tmp_path), threads=True)
    assert pools.behind is not None
    release, ran = threading.Event(), []
    pools.later("acme", lambda: release.wait(60) and None)
    pools.later("acme", lambda: release.wait(60) and None)  # both threads busy: what follows waits in the queue
    for number in range(5):
        pools.later("acme", lambda number=number: ran.append(number))
    with structlog.testing.capture_logs() as logs:
        closing = threading.Thread(target=pools.close)
        closing.start()
        closing.join(timeout=30)  # the running tasks still hold their threads: it does not wait them out
    try:
        assert not closing.is_alive() and ran == []
        (left,) = [log for log in logs if log["event"] == "pool.left_queued"]
        assert left["pool"] == "write-behind" and left["tasks"] >= 5, left  # the five, and a held one still queued
    finally:
        release.set()


def test_a_rest_import_past_the_process_s_imports_at_once_is_refused_before_its_upload(tmp_path):
    """A REST import ran on the request's thread, as many at once as organizations sent them, each a whole CPU-bound
    import in the API process. Now at most GRANDBO_IMPORTS_AT_ONCE run: past it, 503 with Retry-After, nothing
    written, and the same request is served once the running one ends."""
    settings = Settings(home=tmp_path / "home", imports_at_once=1)
    row = {
        "id": "INC-7",
        "title": "Checkout returned 502s",
        "started_at": "2025-03-02T10:00:00Z",
        "root_cause": "pool exhausted",
    }
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        acme = grandbo.org("acme", create=True)
        key = acme.keys.create("admin")[1]
        gate = threading.Event()
        running = grandbo.pools.imports.submit("beta", lambda: gate.wait(30))  # beta's import holds the one place
        with serving(grandbo) as served, served.client(key) as client:
            refused = client.post("/v1/import-from/jsonl", content=json.dumps(row).encode() + b"\n")
            gate.set()
            running.result(timeout=30)
            _until(lambda: grandbo.pools.imports.stats().running == 0, "the place given back")
            served_after = client.post("/v1/import-from/jsonl", content=json.dumps(row).encode() + b"\n")
        assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 30, refused.text
        assert (
            refused.json()["error"]["type"] == "overloaded"
            and "GRANDBO_IMPORTS_AT_ONCE" in refused.json()["error"]["remedy"]
        )
        assert served_after.status_code == 200 and served_after.json()["imported"] == 1, served_after.text
        assert [incident.title for incident in acme.incidents.find()] == ["Checkout returned 502s"]


def test_a_rest_import_whose_request_is_cancelled_still_reads_its_upload(tmp_path):
    """An import runs on the imports pool's thread, which no cancellation stops: its request cancelled (the ASGI
    app's caller gone, a server stopped) while the import waited for the store, the import goes on, and its
    upload must stay until it ends. The route removed the upload at once, so the import, once it had the org's
    lease, found no file and filed nothing."""
    import asyncio
    import contextlib

    import httpx

    from grandbo.api.app import create_app
    from tests.test_server_errors import file_locked

    settings = Settings(home=tmp_path / "home")
    row = {"id": "INC-7", "title": "Checkout returned 502s", "started_at": "2025-03-02T10:00:00Z"}
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        acme = grandbo.org("acme", create=True)
        key = acme.keys.create("admin")[1]
        app = create_app(grandbo, mcp=False, console=False)

        async def cancelled() -> None:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://grandbo") as client:
                with file_locked(settings):  # the import's first write, the org's lease, waits for the file's lock
                    request = asyncio.ensure_future(
                        client.post("/v1/import-from/jsonl", content=json.dumps(row).encode() + b"\n",
                                    headers={"Authorization": f"Bearer {key}"})
                    )  # fmt: skip
                    deadline = time.monotonic() + 30
                    while grandbo.pools.imports.stats().running == 0 and time.monotonic() < deadline:
                        await asyncio.sleep(0.01)
                    request.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await request

        asyncio.run(cancelled())
        assert grandbo.pools.imports.idle(30) and grandbo.pools.imports.stats().done == 1
        assert [incident.title for incident in acme.incidents.find()] == ["Checkout returned 502s"]
        assert not list((settings.home / "uploads").iterdir())  # the upload went once it ended


def test_one_org_runs_at_most_half_the_imports_so_another_org_s_import_has_a_place(tmp_path):
    """A dry run takes no import lease, nor does an import whose request was cancelled still run: one admin key held
    both of a process's import places (an upload of up to 1 GiB is minutes of CPU), and every other org's import
    was refused 503. An org runs at most half of GRANDBO_IMPORTS_AT_ONCE; past it, 429 with Retry-After."""
    row = {"id": "INC-7", "title": "Checkout returned 502s", "started_at": "2025-03-02T10:00:00Z"}
    with Grandbo.init(Settings(home=tmp_path / "home", imports_at_once=2), embedding="deterministic") as grandbo:
        keys = {org: grandbo.org(org, create=True).keys.create("admin")[1] for org in ("acme", "beta")}
        gate = threading.Event()
        running = grandbo.pools.imports.submit("acme", lambda: gate.wait(30))  # acme's dry run holds a place
        with serving(grandbo) as served, served.client(keys["acme"]) as acme, served.client(keys["beta"]) as beta:
            second = acme.post("/v1/import-from/jsonl?dry_run=true", content=json.dumps(row).encode() + b"\n")
            other = beta.post("/v1/import-from/jsonl", content=json.dumps(row).encode() + b"\n")
            gate.set()
            running.result(timeout=30)
        assert second.status_code == 429 and int(second.headers["Retry-After"]) >= 1, second.text
        error = second.json()["error"]
        assert error["type"] == "org_over_share" and "GRANDBO_IMPORTS_AT_ONCE" in error["remedy"]
        assert other.status_code == 200 and other.json()["imported"] == 1, other.text


def test_an_org_runs_one_rest_erasure_at_a_time_and_another_org_s_is_served(tmp_path):
    """An erasure of a text ran on the request's thread, as many at once as an admin key sent, each reading its
    org's whole log and documents, and on after its request was given up: 26 abandoned ones held both servers'
    threads, and another org's recalls waited 24 s (probe 16). Now they run on the erasure pool: one per org, two
    per process; past that, 429 (its org's) or 503 with Retry-After, and the running one ends as before."""
    with Grandbo.init(Settings(home=tmp_path / "home"), embedding="deterministic") as grandbo:
        keys = {org: grandbo.org(org, create=True).keys.create("admin")[1] for org in ("acme", "beta", "delta")}
        for org in ("acme", "beta"):
            grandbo.org(org).remember({"title": "token pasted", "body": f"the key {org}-hunter2-walrus"})
        gate = threading.Event()
        running = grandbo.pools.erasures.submit("acme", lambda: gate.wait(30))  # acme's erasure in flight
        ask = {"reason": "a leaked key", "text": "hunter2-walrus"}
        with serving(grandbo) as served, served.client(keys["acme"]) as acme, served.client(keys["beta"]) as beta:
            second = acme.post("/v1/erasures", json=ask)
            other = beta.post("/v1/erasures", json=ask)
            held = grandbo.pools.erasures.submit("gamma", lambda: gate.wait(30))  # the process's second place
            with served.client(keys["delta"]) as delta:
                full = delta.post("/v1/erasures", json=ask)
            gate.set()
            running.result(timeout=30), held.result(timeout=30)
            _until(lambda: grandbo.pools.erasures.stats().running == 0, "the places given back")
            again = acme.post("/v1/erasures", json=ask)
        assert second.status_code == 429 and int(second.headers["Retry-After"]) >= 1, second.text
        assert second.json()["error"]["type"] == "org_over_share" and "one erasure" in second.json()["error"]["remedy"]
        assert other.status_code == 200 and other.json()["found"] and len(other.json()["entries"]) == 1, other.text
        assert full.status_code == 503 and full.json()["error"]["type"] == "overloaded", full.text
        assert again.status_code == 200 and again.json()["found"], again.text
        assert "hunter2" not in grandbo.org("acme").entries(include_inactive=True)[0].body


def test_liveness_answers_while_every_worker_thread_of_the_server_is_busy(tmp_path):
    """Probe 17: 40 slow calls of one key took every worker thread of the server (anyio's 40), and `/healthz`, a
    plain route run on one of them, queued behind them: the liveness probe failed for minutes and an orchestrator
    would have restarted the process. It answers on the event loop now."""
    settings = Settings(home=tmp_path / "home", rate_limit_per_key=0, rate_limit_per_org=0, requests_per_org=0)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:  # one org may take every thread here
        memory = grandbo.org("acme", create=True)
        memory.remember({"title": "redis evicted keys", "body": "b"})
        _, key = memory.keys.create("read")
        release = threading.Event()
        # The org's first recall holds its thread past BOUND: a /healthz queued behind the threads times out rather
        # than answering late. It had 10 s, and took longer once at load 12-13 (session 21).
        grandbo._keeper.building = lambda _org: release.wait(2 * BOUND)
        with serving(grandbo) as served, served.client(key) as client:
            busy = [threading.Thread(target=lambda: client.post("/v1/recall", json={"topic": "redis evicted keys under memory pressure"}, timeout=3 * BOUND))
                    for _ in range(45)]  # fmt: skip
            for thread in busy:
                thread.start()
            _until(lambda: sum(t.name.startswith("AnyIO worker") for t in threading.enumerate()) >= 40,
                   "every worker thread taken")  # fmt: skip
            try:
                alive = client.get("/healthz", timeout=BOUND).status_code
            finally:
                release.set()
                for thread in busy:
                    thread.join(90)
    assert alive == 200


@contextmanager
def _acme_held(settings: Settings) -> Iterator[tuple[Grandbo, str, str, threading.Event]]:
    """Orgs acme and beta of one memory each, their read keys, and an event until which acme's first recall waits
    (its index build held), set on the way out."""
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        acme, beta = grandbo.org("acme", create=True), grandbo.org("beta", create=True)
        for memory in (acme, beta):
            memory.remember({"title": "redis evicted keys", "body": "b"})
        acme_key, beta_key = acme.keys.create("read")[1], beta.keys.create("read")[1]
        release = threading.Event()
        grandbo._keeper.building = lambda org: release.wait(60) if org == "acme" else None
        try:
            yield grandbo, acme_key, beta_key, release
        finally:
            release.set()


def test_one_orgs_slow_requests_hold_its_share_of_the_threads_and_the_others_are_served(tmp_path):
    """Probe 17: rate limits count requests, not what they cost. One key's slow calls took every worker thread of the
    server, and another org's recall, webhook and `/healthz` waited minutes. An org now runs GRANDBO_REQUESTS_PER_ORG
    requests at once in a process, over REST, MCP and the console alike; the next wait without a thread, in turn, and
    past GRANDBO_REQUESTS_WAIT_SECONDS get 429 with Retry-After. Another org is served meanwhile."""
    settings = Settings(home=tmp_path / "home", rate_limit_per_key=0, rate_limit_per_org=0, requests_per_org=2,
                        requests_wait_seconds=1.0)  # fmt: skip
    with _acme_held(settings) as (grandbo, acme_key, beta_key, release):
        slow: list[int] = []
        with serving(grandbo) as served, served.client(acme_key) as client, served.client(beta_key) as other:

            def asked() -> None:
                slow.append(
                    client.post(
                        "/v1/recall", json={"topic": "redis evicted keys under memory pressure"}, timeout=90
                    ).status_code
                )

            held = [threading.Thread(target=asked) for _ in range(2)]
            for thread in held:
                thread.start()
            _until(lambda: grandbo.rate_limits.slots.every._running.get("acme") == 2, "acme's two slots taken")
            refused = client.post(
                "/v1/recall", json={"topic": "redis evicted keys under memory pressure"}, timeout=30
            )  # waits 1 s, then 429
            mcp = client.post("/mcp", headers={"Accept": "application/json, text/event-stream"},
                              json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)  # fmt: skip
            tool = client.post("/v1/tools/query_org_memory", json={"topic": "redis evicted keys"}, timeout=30)
            served_other = other.post(
                "/v1/recall", json={"topic": "redis evicted keys under memory pressure"}, timeout=30
            )
            waiting = threading.Thread(target=asked)  # waits its turn, and gets it when one ends
            waiting.start()
            _until(lambda: len(grandbo.rate_limits.slots.every._waiting.get("acme", ())) == 1, "acme's third in line")
            release.set()
            for thread in [*held, waiting]:
                thread.join(90)
        assert grandbo.rate_limits.slots.every._running == {} and grandbo.rate_limits.slots.every._waiting == {}
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["type"] == "org_over_share"
    assert "GRANDBO_REQUESTS_PER_ORG" in refused.json()["error"]["remedy"]
    assert mcp.status_code == 429 and "GRANDBO_REQUESTS_PER_ORG" in mcp.json()["error"]["remedy"]
    assert tool.status_code == 429 and tool.json()["error"]["type"] == "org_over_share"  # /v1/tools too (review)
    assert served_other.status_code == 200 and served_other.json()["hits"]
    assert slow == [200, 200, 200]


def test_one_orgs_large_requests_run_one_at_a_time_and_its_small_ones_are_not_queued_behind_them(tmp_path):
    """Four 500-alert deliveries of one org at once each had a fifth of the GIL, their writes held the store's lock
    several times as long, and another org's one-alert webhook took 450-600 ms (65 ms with one at a time). A request
    with a body over 16 KiB now also takes one of its org's GRANDBO_LARGE_REQUESTS_PER_ORG slots, waiting without
    holding any other, and past GRANDBO_REQUESTS_WAIT_SECONDS gets 429 naming that setting, over REST and MCP alike;
    the org's small requests and another org's large ones are served meanwhile."""
    from grandbo.ratelimit import LARGE_REQUEST_BYTES

    settings = Settings(home=tmp_path / "home", rate_limit_per_key=0, rate_limit_per_org=0, requests_per_org=4,
                        large_requests_per_org=1, requests_wait_seconds=1.0)  # fmt: skip
    padding = " " * (LARGE_REQUEST_BYTES + 1)  # JSON's own whitespace: the same request, a large body
    asked = json.dumps({"topic": "redis evicted keys under memory pressure"})
    large = (asked[:-1] + padding + "}").encode()
    listed = (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})[:-1] + padding + "}").encode()
    with _acme_held(settings) as (grandbo, acme_key, beta_key, release):
        answers: list[Any] = []
        slots = grandbo.rate_limits.slots
        headers = {"Content-Type": "application/json"}
        with serving(grandbo) as served, served.client(acme_key) as client, served.client(beta_key) as other:
            held = threading.Thread(
                target=lambda: answers.append(client.post("/v1/recall", content=large, headers=headers, timeout=90))
            )
            held.start()
            _until(lambda: slots.large._running.get("acme") == 1, "acme's large slot taken")
            refused = client.post("/v1/recall", content=large, headers=headers, timeout=30)  # waits 1 s, then 429
            mcp = client.post("/mcp", content=listed, timeout=30,
                              headers={**headers, "Accept": "application/json, text/event-stream"})  # fmt: skip
            stats = client.get("/v1/stats", timeout=30)  # acme's small requests are served
            mcp_small = client.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, timeout=30,
                                    headers={"Accept": "application/json, text/event-stream"})  # fmt: skip
            served_other = other.post("/v1/recall", content=large, headers=headers, timeout=30)  # beta's large slot
            assert slots.every._running.get("acme") == 1  # the refused one gave back nothing it did not hold
            release.set()
            held.join(90)
        assert slots.every._running == {} and slots.large._running == {} and slots.large._waiting == {}
    assert answers[0].status_code == 200 and answers[0].json()["hits"]
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    error = refused.json()["error"]
    assert error["type"] == "org_over_share" and "GRANDBO_LARGE_REQUESTS_PER_ORG" in error["remedy"]
    assert mcp.status_code == 429 and "GRANDBO_LARGE_REQUESTS_PER_ORG" in mcp.json()["error"]["remedy"]
    assert stats.status_code == 200 and mcp_small.status_code == 200
    assert served_other.status_code == 200 and served_other.json()["hits"]


def test_a_waiter_cancelled_as_its_slot_is_released_loses_no_slot():
    """Review: a waiting request's task cancelled (its client gone, its time out) cancels its turn at once, and a
    release in the same pass of the loop handed the slot to that dead turn (an error in the releasing request) and
    never counted it back: after four such races the org got only 429s until the process restarted."""
    from grandbo.ratelimit import OrgSlots

    async def scenario() -> tuple[dict[str, int], dict[str, object], bool]:
        slots, go = OrgSlots(1, 5.0), asyncio.Event()

        async def holder() -> None:
            async with slots.running("o"):
                await go.wait()

        async def waiter() -> None:
            async with slots.running("o"):
                pass

        held = asyncio.create_task(holder())
        await asyncio.sleep(0)
        waiting = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        go.set()  # the holder's release runs first in the next pass...
        waiting.cancel()  # ...its waiter's cancellation after it
        await held
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        async with asyncio.timeout(1):  # the slot is free again, at once
            async with slots.running("o"):
                entered = True
        return slots.every._running, dict(slots.every._waiting), entered

    running, waiting, entered = asyncio.run(scenario())
    assert running == {} and waiting == {} and entered


def test_a_large_request_refused_after_both_waits_says_how_long_it_waited_in_all():
    """Review: a large request waits for a large slot, then for one of the org's slots, within one wait; refused in
    the second it reported the time that had been left for it, not the time it waited."""
    import re

    from grandbo.errors import RequestsOrgBusyError
    from grandbo.ratelimit import OrgSlots

    async def scenario() -> str:
        slots, done = OrgSlots(1, 0.4, large_per_org=1), asyncio.Event()

        async def large_first() -> None:
            async with slots.running("o", large=True):
                await asyncio.sleep(0.2)

        async def small_after() -> None:  # takes the org's slot as the large one leaves it, and keeps it
            await asyncio.sleep(0.1)
            async with slots.running("o"):
                await done.wait()

        first, second = asyncio.create_task(large_first()), asyncio.create_task(small_after())
        await asyncio.sleep(0.01)
        try:
            async with slots.running("o", large=True):  # its large slot at 0.2 s, the org's never
                raise AssertionError("ran")
        except RequestsOrgBusyError as refused:
            message = refused.message
        done.set()
        await asyncio.gather(first, second)
        return message

    message = asyncio.run(scenario())
    waited = float(re.search(r"waited ([0-9.]+) s", message).group(1))
    assert waited >= 0.35  # its whole wait (0.4 s), not what was left of it after the large slot (about 0.2 s)
