"""A served recall waits for its query's embedding on the event loop, not on a thread of the server's."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from grandbo.config import Settings
from grandbo.embeddings.batching import QueryBatcher
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings
from tests.serving import Served, serving, until

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)

THREADS = 40  # anyio's default thread limiter, on which Starlette runs every route that is not async
HELD = "zqxheld"  # a word in the topics whose embedding the fake provider holds


@dataclass
class Held:
    fake: FakeEmbeddings
    served: Served
    key: str

    def waiting(self) -> int:
        """Queries at the provider unanswered, and in the query batcher's queue."""
        batcher = self.served.grandbo.provider()
        assert isinstance(batcher, QueryBatcher)
        asked = sum(len(r["body"].get("input", ())) for r in self.fake.behaviour.requests if not r["answered"])
        return asked + batcher._waiting.qsize()


@pytest.fixture
def held(tmp_path) -> Iterator[Held]:
    """A server whose query embeddings are batched (as `grandbo serve`'s are), of a hosted provider faked on
    loopback, with no bound on an org's requests at once: one org's memory and read key."""
    with FakeEmbeddings(dimension=8) as fake:
        settings = Settings(
            home=tmp_path / "home", openai_base_url=fake.url, openai_model="fake-embed", openai_dimension=8,
            openai_api_key="test-key", http_timeout_seconds=60.0, embed_retry_seconds=0, vector_min_similarity=-1.0,
            requests_per_org=0, rate_limit_per_key=0,
        )  # fmt: skip
        with Grandbo.init(settings, embedding="openai") as made:
            memory = made.org("acme", create=True)
            memory.remember({"title": "Redis evictions on auth-service", "body": "maxmemory reached, keys evicted"})
            _, key = memory.keys.create("read", name="reader")
        with Grandbo.open(settings, batch_queries=True) as grandbo, serving(grandbo) as served:
            yield Held(fake, served, key)


def _recall(client: httpx.Client, topic: str) -> dict[str, Any]:
    answer = client.post("/v1/recall", json={"topic": topic})
    assert answer.status_code == 200, answer.text
    return {"notes": answer.json()["notes"], "hits": len(answer.json()["hits"])}


def _context(client: httpx.Client, topic: str) -> dict[str, Any]:
    answer = client.get("/v1/context", params={"topic": topic})
    assert answer.status_code == 200, answer.text
    return {"notes": [], "hits": answer.json()["recall"].count("Redis evictions")}


def _mcp(tool: str) -> Callable[[httpx.Client, str], dict[str, Any]]:
    def call(client: httpx.Client, topic: str) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {
            "topic": topic, **({"detail": "full"} if tool == "query_org_memory" else {})}}}  # fmt: skip
        answer = client.post("/mcp", json=message, headers={"Accept": "application/json, text/event-stream"})
        assert answer.status_code == 200 and not answer.json()["result"]["isError"], answer.text
        said = answer.json()["result"]["structuredContent"]
        return {"notes": said.get("notes", []), "hits": json.dumps(said).count("Redis evictions")}

    return call


@pytest.mark.parametrize(
    "asked", [_recall, _context, _mcp("query_org_memory"), _mcp("get_context_block")],
    ids=["recall", "context", "mcp-query", "mcp-context"],
)  # fmt: skip
def test_recalls_waiting_for_their_embedding_leave_the_threads_to_other_requests(held, asked):
    """`POST /v1/recall` since session 29; `GET /v1/context` with a topic and MCP's two tools that recall held a
    thread each until their query was embedded (review 29)."""
    fake = held.fake.behaviour
    fake.hold, fake.hold_for = threading.Event(), {HELD}
    topics = [f"redis keys evicted on auth-service {HELD} {n} under memory pressure" for n in range(THREADS)]
    with held.served.client(held.key) as client, ThreadPoolExecutor(THREADS) as clients:
        try:
            recalls = [clients.submit(asked, client, topic) for topic in topics]
            until(lambda: held.waiting() == THREADS, "every recall's query waits at the provider or in the batcher")
            try:  # each recall held a worker thread while it waited: this request got none until they ended
                stats = client.get("/v1/stats", timeout=30)
            except httpx.TimeoutException:
                pytest.fail(f"{THREADS} recalls waiting for their embedding left no thread to a read of the stats")
            assert stats.status_code == 200 and stats.json()["total"] == 1
        finally:
            fake.hold.set()
        answers = [recall.result(60) for recall in recalls]
    assert all(not any("vector arm skipped" in note for note in answer["notes"]) for answer in answers)
    assert all(answer["hits"] for answer in answers)


def test_a_recall_whose_embedding_fails_is_answered_lexically_and_the_server_says_it_is_degraded(held):
    held.fake.behaviour.status = 500
    with held.served.client(held.key) as client:
        answer = client.post("/v1/recall", json={"topic": "redis keys evicted on auth-service under memory pressure"})
        assert answer.status_code == 200 and answer.json()["hits"]
        assert any(note.startswith("vector arm skipped") for note in answer.json()["notes"])
        assert client.get("/readyz").json()["status"] == "degraded"
