"""A refused batch's halving (`embeddings.apart`) is bounded in time and in what it leaves held, and a batch is sent
within the provider's documented limit of a request.

The fake provider answers as the OpenAI embeddings API documents (and, with `max_inputs`, refuses a request of more
texts than Voyage's documented limit as Voyage does: HTTP 400).
"""

from __future__ import annotations

import threading
import time

import pytest
import structlog.testing

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.batching import QueryBatcher
from grandbo.errors import EmbeddingError, EntryStateError
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings
from tests.test_embed_drain_isolated import queued
from tests.test_embedding_faults import _hosted
from tests.test_query_batch_apart import asked_together


@pytest.fixture
def fake():
    with FakeEmbeddings(dimension=8) as server:
        yield server


def _embeddings(fake: FakeEmbeddings) -> list[list[str]]:
    return [request["body"]["input"] for request in fake.behaviour.requests if "input" in request["body"]]


def test_no_half_is_asked_once_the_claims_time_is_up(tmp_path, fake, database_url, raw):
    """The time was looked at as each halving began, not before each call: a halving begun just before half the lease
    asked both halves, each up to the HTTP timeout, and then the canary. Here the first half's call (the provider slow
    for it) outlasts half the lease: the second half is not asked, and counts the batch's failure."""
    fake.behaviour.reject_for.add("poison")
    fake.behaviour.on_embed = lambda texts: time.sleep(2.5) if len(texts) == 2 else None  # a half: past the deadline
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_batch_size=4, embed_lease_seconds=4,
                       http_timeout_seconds=10)  # fmt: skip
    with Grandbo.init(settings, embedding="openai") as grandbo:
        queued(grandbo, "acme", ["poison pill text", "disk full on node b", "disk full on node c", "disk full on d"])
        asked = len(_embeddings(fake))
        report = grandbo.worker().run_once()
        outbox = raw("SELECT attempts, claimed_until FROM embed_outbox ORDER BY job_id", org="acme")
    assert _embeddings(fake)[asked:] == [["poison pill text", "disk full on node b", "disk full on node c",
                                          "disk full on d"], ["poison pill text", "disk full on node b"]]  # fmt: skip
    assert (report.claimed, report.embedded, report.failed) == (4, 0, 4)  # before: the second half asked, embedded
    assert outbox == [(1, None)] * 4


def test_a_halving_whose_write_fails_gives_its_jobs_back_at_once(tmp_path, fake, database_url, raw):
    """Writing a half's vectors failed (here the store's embedding space changed meanwhile, as `grandbo reembed` does)
    and the halving stopped there, its other jobs leased until the lease ran out (up to GRANDBO_EMBED_LEASE_SECONDS),
    then counted as lost. Now every job it had not settled is given back, claimable at once, no attempt counted."""
    fake.behaviour.reject_for.add("poison")
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_batch_size=4)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        queued(grandbo, "acme", ["disk full on node a", "disk full on node b", "poison pill text", "disk full on d"])

        def reembedding(texts: list[str]) -> None:
            if texts == ["disk full on node a", "disk full on node b"]:  # the half the provider embeds
                raw("UPDATE store_meta SET value = 'another-model' WHERE key = 'model'")

        fake.behaviour.on_embed = reembedding
        with pytest.raises(EntryStateError):
            grandbo.worker().run_once()
        outbox = raw("SELECT attempts, claimed_until FROM embed_outbox ORDER BY job_id", org="acme")
        raw("UPDATE store_meta SET value = 'fake-embed' WHERE key = 'model'")
    assert outbox == [(0, None)] * 4  # before: each still leased


def test_a_recalls_refused_batch_is_asked_apart_only_within_the_recalls_budget():
    """The query batcher's halving had no bound in time (up to 2n-1 calls of the HTTP timeout each, while every recall
    of the batch waited). It ends at the budget of the batch (a recall's own wait for its vector): with none left, the
    batch's error is every query's, and no call is made past it."""
    with FakeEmbeddings(dimension=8) as fake:
        settings = Settings(openai_base_url=fake.url, openai_model="fake-embed", openai_dimension=8,
                            openai_api_key="test-key", http_timeout_seconds=30)  # fmt: skip
        fake.behaviour.reject_for.add("poison")
        fake.behaviour.hold, fake.behaviour.hold_for = threading.Event(), {"first"}
        batcher = QueryBatcher(get_provider("openai", settings), lanes=1, budget_s=1e-9)
        try:
            first, evil, victim = asked_together(batcher, fake)
            assert len(first.result(timeout=30)) == 8
            for done in (evil, victim):
                with pytest.raises(EmbeddingError):
                    done.result(timeout=30)
        finally:
            fake.behaviour.hold.set()
            batcher.close()
    assert _embeddings(fake)[1:] == [["poison topic of one org", "disk full topic of another org"]]  # no halves


def test_a_batch_past_the_providers_limit_is_sent_in_parts_of_it_and_said_once(tmp_path, fake, database_url):
    """Voyage takes at most 1,000 texts a request: a batch of GRANDBO_EMBED_BATCH_SIZE past it was refused whole (HTTP
    400) and asked again in halves, on every call, silently. It is sent in parts of the limit, logged once."""
    fake.behaviour.max_inputs = 1000
    settings = Settings(home=tmp_path / "home", database_url=database_url, voyage_base_url=fake.url,
                        voyage_api_key="test-key", voyage_model="fake-embed", voyage_dimension=8,
                        embed_batch_size=1001, embed_retry_seconds=0, http_timeout_seconds=10)  # fmt: skip
    with structlog.testing.capture_logs() as logs, Grandbo.init(settings, embedding="voyage") as grandbo:
        queued(grandbo, "acme", [f"disk full on node {n}" for n in range(2002)])
        worker = grandbo.worker()
        while worker.run_once().claimed:
            pass
        stats = grandbo.org("acme").stats()
    assert stats.readable == 2002
    assert max(len(texts) for texts in _embeddings(fake)) <= 1000  # before: 1001, refused, then halved
    assert [event["max_batch"] for event in logs if event["event"] == "embedding.batch_capped"] == [1000]
