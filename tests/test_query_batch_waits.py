"""The query batcher heeds what a failed provider call says of the next ones: a Retry-After, a batch that timed out.

`grandbo serve` sends the query embeddings of concurrent recalls, every org's, to the provider together
(`QueryBatcher`). After a 429 with Retry-After it kept sending (each recall's topic, the health probe's), and a topic
that made the provider slow timed out every batch it was in, each time it was asked, costing every recall batched
with it its vector arm and marking the whole process degraded. The embed worker waits out a Retry-After
(`EmbedWorker._quiet_until`) and deals a timed-out batch's texts alone; so does the batcher now. The fake provider
answers as the OpenAI embeddings API documents.
"""

from __future__ import annotations

import threading

import pytest

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.batching import QueryBatcher, embedded
from grandbo.errors import EmbeddingError, ProviderUnavailableError
from grandbo.health import Health
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings, vector_for
from tests.serving import serving, until
from tests.test_query_batch_apart import asked_together


def _settings(url: str, timeout_s: float) -> Settings:
    return Settings(openai_base_url=url, openai_model="fake-embed", openai_dimension=8, openai_api_key="test-key",
                    http_timeout_seconds=timeout_s)  # fmt: skip


def test_no_query_is_sent_while_the_providers_retry_after_runs_and_recall_is_told_why():
    with FakeEmbeddings(dimension=8) as fake:
        fake.behaviour.status, fake.behaviour.retry_after = 429, "120"
        batcher = QueryBatcher(get_provider("openai", _settings(fake.url, 30)), lanes=1)
        health = Health(15.0, lambda: batcher, store=None)
        try:
            with pytest.raises(ProviderUnavailableError) as limited:
                batcher.ask("redis evictions on the sessions cache").result(timeout=30)
            assert limited.value.detail["retry_after_s"] == 120
            fake.behaviour.status = 200  # answering again: still not asked before the 120 s are over
            sent = len(fake.behaviour.requests)
            with pytest.raises(ProviderUnavailableError) as waiting:
                batcher.ask("disk full on ledger-db").result(timeout=30)
            assert "Retry-After" in waiting.value.message and "words only" in waiting.value.message
            with pytest.raises(ProviderUnavailableError):  # the health probe's warm-up neither
                batcher.warm()
            with pytest.raises(ProviderUnavailableError):  # what a recall embeds its topic with: it goes lexical
                health.for_recall().embed(["kafka lag on payments"], "query")
            assert len(fake.behaviour.requests) == sent  # before: each was sent (and answered)
            assert health.error() is not None  # /readyz says it is degraded meanwhile
        finally:
            batcher.close()


def test_a_topic_that_timed_out_its_batch_is_sent_alone_and_costs_no_other_recall_its_vector():
    with FakeEmbeddings(dimension=8) as fake:
        # the fake is slow (past the client's 0.5 s timeout) for any request holding the slow topic
        fake.behaviour.on_embed = lambda texts: any("slow" in text for text in texts) and threading.Event().wait(3)
        # batches of two, formed as soon as two wait (the window only bounds a lone query's wait for company)
        batcher = QueryBatcher(get_provider("openai", _settings(fake.url, 0.5)), lanes=1, most_queries=2, window_s=30)
        health = Health(15.0, lambda: batcher, store=None)
        try:
            slow, other = batcher.ask("slow topic of one org"), batcher.ask("disk full topic of another org")
            for done in (slow, other):  # the first time, batched together: both time out
                with pytest.raises(ProviderUnavailableError):
                    done.result(timeout=30)
            health.answered()  # (a probe found the provider answering)
            slow, other = batcher.ask("slow topic of one org"), batcher.ask("kafka lag topic of another org")
            assert other.result(timeout=30) == pytest.approx(vector_for("kafka lag topic of another org", 8))
            with pytest.raises(ProviderUnavailableError) as alone:
                slow.result(timeout=30)
            assert alone.value.detail["topic_only"] is True
            with embedded(batcher, "slow topic of one org", slow), pytest.raises(ProviderUnavailableError):
                health.for_recall().embed(["slow topic of one org"], "query")  # its recall goes lexical...
            assert health.error() is None  # ...without marking the process degraded for every other org
        finally:
            batcher.close()
    asked = [request["body"]["input"] for request in fake.behaviour.requests]
    assert ["kafka lag topic of another org"] in asked and ["slow topic of one org"] in asked


def test_a_served_recall_answers_by_words_while_the_retry_after_runs_and_no_probe_is_sent(tmp_path):
    """Before, the health probe (every GRANDBO_PROVIDER_PROBE_SECONDS, asked for by /readyz and recalls) was sent
    during the Retry-After; answered, the process was ready again and every recall sent its topic."""
    with FakeEmbeddings(dimension=8) as fake:
        settings = Settings(home=tmp_path / "home", openai_base_url=fake.url, openai_model="fake-embed",
                            openai_dimension=8, openai_api_key="test-key", http_timeout_seconds=30,
                            vector_min_similarity=-1.0, provider_probe_seconds=0.01)  # fmt: skip
        with Grandbo.init(settings, embedding="openai") as made:
            memory = made.org("acme", create=True)
            memory.remember({"title": "Redis evictions on auth-service", "body": "maxmemory reached, keys evicted"})
            _, key = memory.keys.create("read", name="reader")
        fake.behaviour.status, fake.behaviour.retry_after = 429, "120"
        with (
            Grandbo.open(settings, batch_queries=True) as grandbo,
            serving(grandbo) as served,
            served.client(key) as client,
        ):
            topic = {"topic": "redis keys evicted on auth-service under memory pressure"}
            limited = client.post("/v1/recall", json=topic).json()
            assert limited["hits"] and any("vector arm skipped" in note for note in limited["notes"])
            fake.behaviour.status = 200
            sent = len(fake.behaviour.requests)
            for _ in range(3):  # each asks for a probe (one at a time, 10 ms apart at least)
                assert client.get("/readyz").json()["status"] == "degraded"
                until(lambda: not grandbo.health._probing, "the probe ended")
                answer = client.post("/v1/recall", json=topic).json()
                assert answer["hits"] and any("vector arm skipped" in note and "Retry-After" in note
                                              for note in answer["notes"])  # fmt: skip
            assert len(fake.behaviour.requests) == sent


def _degraded_by_a_refused_topic(refused: str) -> bool:
    """Whether the recall of a topic batched with another org's and refused (`refused`: in the topics the fake
    refuses) marks the process degraded; it goes lexical either way."""
    with FakeEmbeddings(dimension=8) as fake:
        fake.behaviour.reject_for.add(refused)
        fake.behaviour.hold, fake.behaviour.hold_for = threading.Event(), {"first"}
        batcher = QueryBatcher(get_provider("openai", _settings(fake.url, 30)), lanes=1)
        health = Health(15.0, lambda: batcher, store=None)
        try:
            first, evil, victim = asked_together(batcher, fake)
            first.exception(timeout=30), victim.exception(timeout=30)
            with embedded(batcher, "poison topic of one org", evil), pytest.raises(EmbeddingError):
                health.for_recall().embed(["poison topic of one org"], "query")
            return health.error() is not None
        finally:
            fake.behaviour.hold.set()
            batcher.close()


def test_a_topic_found_at_fault_by_halving_does_not_mark_the_process_degraded():
    """The others' recalls, batched with it, had their vectors, and every other org's recall after it keeps its
    vector search too. Before, its error marked the process degraded: every recall went lexical until a probe
    answered (GRANDBO_PROVIDER_PROBE_SECONDS)."""
    assert not _degraded_by_a_refused_topic("poison")
    assert _degraded_by_a_refused_topic("")  # a provider that refuses every topic (any text) still marks it degraded


def _degraded_by_a_lone_refused_topic(refused: str) -> tuple[bool, int]:
    """Whether a recall's topic refused when asked alone (no other query waiting: a server under light load) marks
    the process degraded, and the provider calls it took."""
    with FakeEmbeddings(dimension=8) as fake:
        fake.behaviour.reject_for.add(refused)
        batcher = QueryBatcher(get_provider("openai", _settings(fake.url, 30)), lanes=1)
        health = Health(15.0, lambda: batcher, store=None)
        try:
            with pytest.raises(EmbeddingError):
                health.for_recall().embed(["poison topic of one org"], "query")
            return health.error() is not None, len(fake.behaviour.requests)
        finally:
            batcher.close()


def test_a_topic_refused_alone_does_not_mark_the_process_degraded_when_the_provider_embeds_another_text():
    """A topic asked alone (the common case under light load) and refused for its own text (HTTP 400) marked the
    process degraded: every org's recalls went lexical until a probe answered, as a batched one did before the
    halving. The provider is asked `CANARY` once to tell the topic's fault from a refusal of every request."""
    assert _degraded_by_a_lone_refused_topic("poison") == (False, 2)
    assert _degraded_by_a_lone_refused_topic("") == (True, 2)  # every text refused: the process is degraded
