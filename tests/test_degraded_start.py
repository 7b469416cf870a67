"""`grandbo serve` starts while its hosted embedding provider is down (answers 500, sleeps past the client's
timeout, or refuses connections): recall answers lexically with a note, writes are stored and queued for
embedding, and `/readyz` answers 200 saying what is degraded. The provider is a fake at the HTTP layer."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from grandbo.config import Settings
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings
from tests.serving import free_port, until

pytestmark = pytest.mark.timeout(180)


def _env(home: Path, fake_url: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("GRANDBO_")},
        "GRANDBO_HOME": str(home),
        "GRANDBO_OPENAI_BASE_URL": fake_url,
        "GRANDBO_OPENAI_MODEL": "fake-embed",
        "GRANDBO_OPENAI_DIMENSION": "8",
        "GRANDBO_OPENAI_API_KEY": "k",
        "GRANDBO_HTTP_TIMEOUT_SECONDS": "0.5",
        "GRANDBO_EMBED_RETRY_SECONDS": "0",
        "GRANDBO_PROVIDER_PROBE_SECONDS": "0.2",
    }


@contextmanager
def _serving(env: dict[str, str]) -> Iterator[httpx.Client]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "grandbo", "serve", "--port", str(port)], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

    def up() -> bool:
        if process.poll() is not None:
            pytest.fail(f"`grandbo serve` exited {process.returncode}: {process.communicate()}")
        try:
            return client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        until(up, "`grandbo serve` answered /healthz")
        yield client
    finally:
        client.close()
        process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def _prepared(home: Path, fake_url: str) -> str:
    """A store recording the fake's space, one org with one embedded memory; the org's write key."""
    settings = Settings(home=home, openai_base_url=fake_url, openai_model="fake-embed", openai_dimension=8,
                        openai_api_key="k")  # fmt: skip
    with Grandbo.init(settings, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember({"title": "checkout latency after the payment gateway certificate expired", "kind": "finding"})
        _, key = memory.keys.create("write", name="test", actor="test")
    return key


@pytest.mark.parametrize("outage", ["answers_500", "sleeps", "refuses"])
def test_serve_starts_degraded_while_the_provider_is_down(tmp_path, outage):
    with FakeEmbeddings(dimension=8) as fake:
        key = _prepared(tmp_path / "home", fake.url)
        if outage == "answers_500":
            fake.behaviour.status = 500
        elif outage == "sleeps":
            fake.behaviour.delay_s = 3.0  # past the client's 0.5 s timeout
        else:
            fake.down()
        with _serving(_env(tmp_path / "home", fake.url)) as client:
            ready = client.get("/readyz")
            assert ready.status_code == 200, ready.text
            body = ready.json()
            assert body["status"] == "degraded"
            assert body["provider"]["ok"] is False
            assert "lexical" in body["provider"]["degraded"] and "queued" in body["provider"]["degraded"]
            headers = {"Authorization": f"Bearer {key}"}
            written = client.post("/v1/memories", headers=headers,
                                  json={"title": "payment gateway certificate renewed by hand", "kind": "runbook"})  # fmt: skip
            assert written.status_code == 201, written.text
            recalled = client.post("/v1/recall", headers=headers, json={"topic": "payment gateway certificate"})
            assert recalled.status_code == 200, recalled.text
            answer = recalled.json()
            assert any("vector arm skipped" in note for note in answer["notes"])
            assert {hit["entry"]["id"] for hit in answer["hits"]} >= {written.json()["id"]}
            stats = client.get("/v1/stats", headers=headers).json()
            assert stats["total"] == 2
            if outage == "answers_500":  # the provider comes back: the process says so, and embeds what waited
                fake.behaviour.status = 200
                until(lambda: client.get("/readyz").json()["status"] == "ready", "/readyz ready again")
                until(
                    lambda: client.get("/v1/stats", headers=headers).json()["unreadable"] == 0,
                    "the queued write embedded",
                )
