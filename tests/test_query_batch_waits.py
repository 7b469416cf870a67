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
from grandbo.errors import ProviderUnavailableError
from grandbo.health import Health
from tests.fakes import FakeEmbeddings, vector_for


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
