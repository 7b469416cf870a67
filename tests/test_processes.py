"""The production layout on one Postgres, for real: two `grandbo serve --no-worker` processes and two `grandbo
worker` processes, no sticky routing. Whatever process a request reaches, it answers as fresh as the store: a
write through one is recalled through the other, a key revoked through one is refused by the other within the key
cache's window, an org dropped (and created again) elsewhere is gone from both, and the workers embed every entry
exactly once between them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from grandbo.config import Settings
from grandbo.service import Grandbo
from tests.conftest import reset_postgres
from tests.fakes import FakeEmbeddings
from tests.serving import free_port, until
from tests.test_postgres import _worker_env

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]

ENTRIES = 12


@contextmanager
def _process(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen([sys.executable, "-m", "grandbo", *args], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def _api(stack: ExitStack, env: dict[str, str]) -> httpx.Client:
    port = free_port()
    process = stack.enter_context(_process(["serve", "--no-worker", "--port", str(port)], env))
    client = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30))

    def up() -> bool:
        if process.poll() is not None:
            pytest.fail(f"`grandbo serve` exited: {process.communicate()}")
        try:
            return client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    until(up, "an API process answered /healthz")
    return client


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_two_api_processes_and_two_workers_answer_alike_without_sticky_routing(pg_database, tmp_path):
    reset_postgres(pg_database)
    with FakeEmbeddings(dimension=8) as fake, ExitStack() as stack:
        env = _worker_env(
            pg_database, tmp_path, fake.url, GRANDBO_KEY_CACHE_SECONDS="0.5", GRANDBO_EMBED_BATCH_SIZE="3"
        )
        # This process's key cache is the API processes' (0.5 s): the org made again below waits out that, not 2 s.
        settings = Settings(home=tmp_path, database_url=pg_database, openai_base_url=fake.url, key_cache_seconds=0.5,
                            openai_model="fake-embed", openai_dimension=8, openai_api_key="k")  # fmt: skip
        with Grandbo.init(settings, embedding="openai") as grandbo:
            acme = grandbo.org("acme", create=True)
            admin, writer = acme.keys.create("admin", name="admin")[1], acme.keys.create("write", name="writer")[1]
        one, two = _api(stack, env), _api(stack, env)
        workers = [stack.enter_context(_process(["worker", "--poll", "0.1"], env)) for _ in range(2)]

        # Written through one, recalled through the other at once (lexically: nothing is embedded yet, maybe).
        made = [one.post("/v1/memories", headers=_as(writer),
                         json={"title": f"lattice-{n} walrus-cache stampede", "body": f"cold start number {n}"})
                for n in range(ENTRIES)]  # fmt: skip
        assert [response.status_code for response in made] == [201] * ENTRIES, made[-1].text
        ids = {response.json()["id"] for response in made}
        for n, response in enumerate(made):  # each one fresh on the other process, the moment it is written
            found = two.post(
                "/v1/recall", headers=_as(writer), json={"topic": f"lattice-{n} walrus-cache stampede"}
            ).json()
            assert response.json()["id"] in [hit["entry"]["id"] for hit in found.get("hits", [])], found

        # The workers embed every entry, each exactly once between them.
        until(lambda: two.get("/v1/stats", headers=_as(writer)).json()["readable"] == ENTRIES, "every entry embedded")
        embedded = [
            text
            for request in fake.behaviour.requests
            for text in request["body"]["input"]
            if "cold start number" in text
        ]
        assert len(embedded) == len(set(embedded)) == ENTRIES, embedded
        assert all(worker.poll() is None for worker in workers)

        # A key revoked through one is refused by the other (it used it a moment ago) within the cache window.
        reader = one.post("/v1/keys", headers=_as(admin), json={"scope": "read", "name": "soon revoked"}).json()
        assert two.get("/v1/stats", headers=_as(reader["key"])).status_code == 200
        assert one.delete(f"/v1/keys/{reader['id']}", headers=_as(admin)).status_code == 200
        until(lambda: two.get("/v1/stats", headers=_as(reader["key"])).status_code == 401, "the revoked key refused")

        # The org dropped (and created again under its name) elsewhere: gone from both, and the new one is empty.
        with Grandbo.open(settings) as elsewhere:
            elsewhere.drop_org("acme")
            successor = elsewhere.org("acme", create=True).keys.create("read", name="successor")[1]
        for api in (one, two):
            until(lambda api=api: api.get("/v1/stats", headers=_as(writer)).status_code == 401, "the old key refused")
            assert api.get("/v1/stats", headers=_as(successor)).json()["total"] == 0
            found = api.post(
                "/v1/recall", headers=_as(successor), json={"topic": "lattice-1 walrus-cache stampede"}
            ).json()
            assert found["hits"] == [] and not ids & {hit["entry"]["id"] for hit in found["hits"]}
