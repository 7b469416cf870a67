"""Postgres goes away under a serving process, and comes back: a Postgres of its own (stopping it hurts no other
test), a real API server on loopback (`--no-worker`'s layout) and a `grandbo worker` process, clients writing and
recalling all along.

While Postgres is down every request is answered, before a client deadline, with 503 `store_unavailable` and its
remedy (never a 500, never a hang); when it is back the first write succeeds within a client deadline of a few
seconds, every write acknowledged before, during or after the outage is whole, and the worker, which waited the
outage out, embeds them all."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from grandbo.config import Settings
from grandbo.devtools.postgres import LocalPostgres
from grandbo.retrieval.text import index_terms
from grandbo.service import Grandbo
from grandbo.store.postgres.store import PostgresStore
from tests.serving import serving

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]

DEADLINE_S = 5.0  # a client's deadline while the store is down: a request not answered by then fails the test
BACK_S = 10.0  # the first request's deadline once the store is back


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[tuple[LocalPostgres, str]]:
    with LocalPostgres(durable=True) as server:  # a crash keeps what it acknowledged (the session's may not)
        url = server.create_app_database("outage")
        PostgresStore(url, index_terms, migrate_url=server.owner_url("outage")).close()
        yield server, url


def _load(url: str, key: str, stop: threading.Event, acknowledged: list[str], statuses: list[int]) -> None:
    """Write (and recall) until stopped, keeping the id of every write answered 201 and every status seen."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                written = client.post("/v1/memories", json={"title": f"load {threading.get_ident()} {n} disk latency"})
                statuses.append(written.status_code)
                if written.status_code == 201:
                    acknowledged.append(written.json()["id"])
                recalled = client.post("/v1/recall", json={"topic": "disk latency on the load"})
                statuses.append(recalled.status_code)
            except httpx.TransportError:
                statuses.append(0)


def test_store_outage_is_503_at_once_and_the_first_request_after_it_succeeds(own_postgres, tmp_path):
    server, database_url = own_postgres
    # No rate limit: three writers and the poll below share one key, and a 429 is not what this test is about (the
    # poll read a 429's body for `readable` under a loaded clean-clone run).
    settings = Settings(home=tmp_path / "home", database_url=database_url, rate_limit_per_key=0)
    with Grandbo.init(settings, embedding="deterministic"):
        pass
    # A batch the worker had claimed when the server died stays leased until its lease runs out (then any worker
    # takes it again): short leases and retries, so that the test need not wait the default five minutes.
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GRANDBO_")},
           "GRANDBO_DATABASE_URL": database_url, "GRANDBO_HOME": str(tmp_path / "home"),
           "GRANDBO_EMBED_LEASE_SECONDS": "3", "GRANDBO_EMBED_RETRY_SECONDS": "0.2"}  # fmt: skip
    worker = subprocess.Popen([sys.executable, "-m", "grandbo", "worker", "--poll", "0.2"], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        _outage(server, settings, worker)
    finally:
        worker.terminate()
        try:
            worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()


def _outage(server: LocalPostgres, settings: Settings, worker: subprocess.Popen[str]) -> None:
    with Grandbo.open(settings, background=True, embed_here=False) as grandbo, serving(grandbo) as served:
        memory = grandbo.org("acme", create=True)
        _, key = memory.keys.create("write", name="load", actor="test")
        stop, acknowledged, statuses = threading.Event(), [], []
        threads = [threading.Thread(target=_load, args=(served.url, key, stop, acknowledged, statuses))
                   for _ in range(3)]  # fmt: skip
        for thread in threads:
            thread.start()
        headers = {"Authorization": f"Bearer {key}"}
        try:
            with httpx.Client(base_url=served.url, headers=headers, timeout=DEADLINE_S) as client:
                # the writes under way, and the worker at work (it embedded one): then the outage
                while len(acknowledged) < 10 or not client.get("/v1/stats").json()["readable"]:
                    assert worker.poll() is None, worker.communicate()
                    threading.Event().wait(0.05)
                server.halt()
                ready = client.get("/readyz")
                assert ready.status_code == 503, ready.text
                assert ready.json()["store"]["error"] == "store_unavailable"
                for method, path, body in (("POST", "/v1/memories", {"title": "written while the store is down"}),
                                           ("POST", "/v1/recall", {"topic": "disk latency on the load"}),
                                           ("GET", "/v1/stats", None)):  # fmt: skip
                    answer = client.request(method, path, json=body)
                    assert answer.status_code == 503, (path, answer.text)
                    error = answer.json()["error"]
                    assert error["type"] == "store_unavailable", (path, error)
                    assert error["remedy"]
                server.resume()
            with httpx.Client(base_url=served.url, headers=headers, timeout=BACK_S) as client:
                first = client.post("/v1/memories", json={"title": "the first write once the store is back"})
                assert first.status_code == 201, first.text
                acknowledged.append(first.json()["id"])
                assert client.get("/readyz").status_code == 200
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
        assert 500 not in statuses and 0 not in statuses, sorted(set(statuses))
        with httpx.Client(base_url=served.url, headers=headers, timeout=30) as client:
            missing = {
                i: status for i in acknowledged if (status := client.get(f"/v1/memories/{i}").status_code) != 200
            }
            assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged writes are gone: {missing}"
            assert worker.poll() is None, f"`grandbo worker` exited {worker.returncode}: {worker.communicate()}"
            deadline = time.monotonic() + 60  # a loaded machine's bound, never asserted as a timing
            while (stats := client.get("/v1/stats").json())["unreadable"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert stats["unreadable"] == 0 and stats["total"] >= len(acknowledged), stats


def test_a_busy_pool_is_not_an_outage(own_postgres):
    """Every connection lent and the server answering: a request waits past the store timeout for one to come
    back (a burst of slow requests is not a store outage), and gets it."""
    _, database_url = own_postgres
    store = PostgresStore(database_url, index_terms, pool_size=1, connect_timeout=0.5)
    lent, release, answers = threading.Event(), threading.Event(), []

    def hold() -> None:
        with store.consistent_read("acme"):  # pins the pool's one connection
            lent.set()
            release.wait(30)

    def read() -> None:
        try:
            answers.append(store.outbox_depth())
        except Exception as error:  # what the test reports
            answers.append(error)

    holder, reader = threading.Thread(target=hold), threading.Thread(target=read)
    try:
        holder.start()
        assert lent.wait(30)
        reader.start()
        while store._pool.get_stats().get("requests_waiting", 0) < 1:  # the reader waits for the connection
            time.sleep(0.01)
        time.sleep(1.0)  # past the 0.5 s store timeout
        release.set()
        reader.join(30)
        assert len(answers) == 1 and isinstance(answers[0], int), answers
    finally:
        release.set()
        holder.join(30)
        store.close()


def test_the_write_behind_runner_waits_an_outage_out_in_one_line(own_postgres, tmp_path):
    """The runner that re-drives write-behinds logged `write_behind.redrive_crashed` at error level with a
    60-line traceback every few seconds for as long as Postgres was down (verify26's probe); an outage is now one
    warning line a round, as the embed worker's is, and the work waits for the store to come back."""
    import structlog

    server, database_url = own_postgres
    settings = Settings(home=tmp_path / "home", database_url=database_url, store_timeout_seconds=0.5)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:  # (again: the module's first test did)
        server.halt()
        try:
            with structlog.testing.capture_logs() as logs:
                report = grandbo.redriver.catch_up()
        finally:
            server.resume()
        assert (report.done, report.failed) == (0, 0)
        refused = [log for log in logs if log["event"] == "write_behind.store_refused"]
        assert [log["code"] for log in refused] == ["store_unavailable"] and refused[0]["log_level"] == "warning"
        assert not [log for log in logs if log["log_level"] == "error" or "exc_info" in log], logs
