"""Processes that start, or imports that end, while Postgres is down (probe 22a F1, F2): a Postgres of its own
(stopping it hurts no other test), real `grandbo worker` / `grandbo serve` processes.

A worker or server started during the outage exited 2 before the store was back and stayed down (41,220 entries of 3
orgs left without vectors); now it waits, saying so, and works once the store answers. An import the outage cut
short kept the org's import lease for its whole 90 s (its release was refused too), so the org's next imports were
refused 409 though nothing ran; and its 503 said "nothing was read or written" after 300 records were filed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from grandbo.config import Settings
from grandbo.devtools.postgres import LocalPostgres
from grandbo.errors import StoreUnavailableError
from grandbo.history.importer import CHUNK, import_history
from grandbo.history.registry import reader
from grandbo.retrieval.text import index_terms
from grandbo.service import Grandbo
from grandbo.store.postgres.store import PostgresStore
from grandbo.tiers import imported as imported_module
from grandbo.tiers.imported import HISTORY, RUNNING, Imported
from tests.serving import free_port, until

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]
MAP = {"started_at": "date"}


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[tuple[LocalPostgres, str]]:
    with LocalPostgres(durable=True) as server:  # a crash keeps what it acknowledged (a throwaway one may not)
        url = server.create_app_database("startwait")
        PostgresStore(url, index_terms, migrate_url=server.owner_url("startwait")).close()
        yield server, url


@pytest.fixture
def down(own_postgres):  # type: ignore[no-untyped-def]
    """Postgres halted as a crash would for the test (resumed by it, or after it)."""
    server, _ = own_postgres
    halted = []

    def halt() -> None:
        server.halt()
        halted.append(True)

    def resume() -> None:
        server.resume()
        halted.clear()

    yield halt, resume
    if halted:
        server.resume()


def _env(tmp_path: Path, url: str, **more: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("GRANDBO_")}, "GRANDBO_DATABASE_URL": url,
            "GRANDBO_HOME": str(tmp_path / "home"), **more}  # fmt: skip


def _stopped(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_a_worker_started_while_postgres_is_down_waits_for_it_and_then_embeds(own_postgres, down, tmp_path):
    _, url = own_postgres
    halt, resume = down
    settings = Settings(home=tmp_path / "home", database_url=url)
    with Grandbo.init(settings, embedding="deterministic"):
        pass
    with Grandbo.open(settings, background=True, embed_here=False) as grandbo:  # the jobs wait in the outbox
        memory = grandbo.org("acme", create=True)
        memory.remember_many([{"title": f"disk latency {n}"} for n in range(20)])
        assert memory.stats().unreadable == 20
    halt()
    migrate = subprocess.run([sys.executable, "-m", "grandbo", "migrate"], env=_env(tmp_path, url), text=True,
                             capture_output=True, timeout=120)  # fmt: skip
    assert migrate.returncode == 2 and "Cannot reach Postgres" in migrate.stderr, migrate  # operators: at once
    bounded = subprocess.run([sys.executable, "-m", "grandbo", "worker"], text=True, capture_output=True,
                             env=_env(tmp_path, url, GRANDBO_STORE_WAIT_SECONDS="1"), timeout=120)  # fmt: skip
    assert bounded.returncode == 2 and "GRANDBO_STORE_WAIT_SECONDS=1) and gives up" in bounded.stderr, bounded
    # The waiting worker is started last, and Postgres resumed once it says it waits: its back-off (1 s, doubling)
    # had grown to 8-15 s while the two commands above ran, and the test waited most of a pause out after resume.
    log = tmp_path / "worker.err"
    with log.open("w") as err:
        worker = subprocess.Popen([sys.executable, "-m", "grandbo", "worker", "--poll", "0.2"], env=_env(tmp_path, url),
                                  stdout=subprocess.DEVNULL, stderr=err, text=True)  # fmt: skip
    try:
        until(lambda: "store unavailable" in log.read_text() or worker.poll() is not None, "the worker said it waits")
        assert worker.poll() is None, f"`grandbo worker` exited {worker.returncode}: {log.read_text()}"
        said = log.read_text()
        assert "waits for postgresql://" in said and "trying again in" in said and "Traceback" not in said, said
        assert "app-password" not in said  # the URL without its password
        resume()
        with Grandbo.open(settings, embed_here=False) as grandbo:
            memory = grandbo.org("acme")

            def embedded() -> bool:
                assert worker.poll() is None, log.read_text()
                return memory.stats().unreadable == 0

            until(embedded, "the worker embedded every queued memory once Postgres was back", every_s=0.2)
        assert "store available again" in log.read_text()
    finally:
        _stopped(worker)


def test_serve_started_while_postgres_is_down_is_alive_not_ready_and_serves_once_it_is_back(
    own_postgres, down, tmp_path
):
    _, url = own_postgres
    halt, resume = down
    settings = Settings(home=tmp_path / "home", database_url=url)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        _, key = grandbo.org("acme", create=True).keys.create("write", name="t", actor="test")
    halt()
    port = free_port()
    log = tmp_path / "serve.err"
    with log.open("w") as err:
        server = subprocess.Popen([sys.executable, "-m", "grandbo", "serve", "--no-worker", "--port", str(port)],
                                  env=_env(tmp_path, url), stdout=subprocess.DEVNULL, stderr=err, text=True)  # fmt: skip
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, headers={"Authorization": f"Bearer {key}"})

    def answers(path: str, status: int) -> bool:
        assert server.poll() is None, f"`grandbo serve` exited {server.returncode}: {log.read_text()}"
        try:
            return client.get(path).status_code == status
        except httpx.TransportError:
            return False

    try:
        until(lambda: answers("/healthz", 200), "`grandbo serve` answered /healthz while Postgres was down")
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.headers["retry-after"], ready.text
        assert ready.json()["store"]["error"] == "store_unavailable" and "Cannot reach" in ready.text, ready.text
        for method, path in (("POST", "/v1/memories"), ("GET", "/v1/stats"), ("POST", "/v1/recall")):
            answer = client.request(method, path, json={"title": "disk latency", "topic": "disk latency"})
            assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1, (path, answer.text)
            assert answer.json()["error"]["type"] == "store_unavailable" and answer.json()["error"]["remedy"]
        lines = log.read_text()
        assert '"event": "store.unavailable"' in lines and '"waiting_for": "postgresql://' in lines, lines
        resume()
        until(lambda: answers("/readyz", 200), "`grandbo serve` ready once Postgres was back")
        written = client.post("/v1/memories", json={"title": "written once the store was back"})
        assert written.status_code == 201, written.text
        assert "Traceback" not in log.read_text()
    finally:
        client.close()
        _stopped(server)


def _records(path: Path, count: int) -> Path:
    rows = ({"id": f"INC-{n}", "title": f"Replica lag on db-{n}", "summary": f"db-{n} fell behind its primary.",
             "date": "2025-03-02T10:00:00Z"} for n in range(count))  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_an_import_an_outage_cut_short_says_how_far_it_got_and_the_next_is_not_refused(own_postgres, down, tmp_path):
    _, url = own_postgres
    halt, resume = down
    settings = Settings(home=tmp_path / "home", database_url=url, store_timeout_seconds=0.5)
    export = _records(tmp_path / "export.jsonl", CHUNK * 3)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("imports", create=True)

        def outage_after_the_first_chunk(done: int, _total: int | None) -> None:
            if done == CHUNK:
                halt()

        with pytest.raises(StoreUnavailableError) as cut:
            import_history(
                memory, reader("jsonl"), export, mapping=MAP, actor="api", progress=outage_after_the_first_chunk
            )
        said = cut.value.message
        assert "nothing was read or written" not in said, said
        assert f"{CHUNK} records read" in said and f"{CHUNK} filed" in said and "again" in said, said
        resume()
        again = import_history(memory, reader("jsonl"), export, mapping=MAP, actor="api")  # not 409 import_running
        assert (again.unchanged, again.imported) == (CHUNK, CHUNK * 2), again.to_dict()


def test_a_lease_the_outage_kept_is_given_back_once_the_store_answers(own_postgres, down, tmp_path, monkeypatch):
    """Another process (another server) sees the org's import lease given back by its holder, alive, once the store
    answers again: not at the end of the lease."""
    _, url = own_postgres
    halt, resume = down
    # The holder tries again every 0.2 s, not from 1 s doubling to 15: while Postgres came back (seconds, a crash
    # recovery) its pause had grown, and the test waited most of it out. Not given back, the lease runs 90 s.
    monkeypatch.setattr(imported_module, "GIVE_BACK", timedelta(seconds=0.1))
    monkeypatch.setattr(imported_module, "RENEW", timedelta(seconds=0.2))
    settings = Settings(home=tmp_path / "home", database_url=url, store_timeout_seconds=0.5)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:  # the holder, alive all along
        imported = Imported(grandbo.org("leased", create=True).incidents)
        version = imported.begin("api")
        halt()
        imported.end(version, "api")  # refused by the outage: not raised, given back later
        resume()
        with Grandbo.open(settings) as other:
            documents = other.org("leased").incidents.documents

            def given_back() -> bool:
                lease = documents.get(HISTORY, RUNNING)
                return lease is None or lease.data is None

            until(given_back, "the lease given back once Postgres answered", every_s=0.2)
