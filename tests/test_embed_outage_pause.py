"""After an outage fails a batch whole, the embed worker claims nothing for the batch's retry delay (session 32).

The loops claimed the next batch at once (`grandbo worker`) or a poll later (the server's): during an outage each job
of a backlog spent an attempt on a provider known to be failing, and one longer than the attempts' back-off failed
every queued job of every org for good. A batch a text of it made fail (HTTP 400) pauses nothing: its halves go on.
"""

from __future__ import annotations

import time

import pytest
import structlog

from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings
from tests.test_embedding_faults import _hosted


@pytest.fixture
def fake():
    with FakeEmbeddings(dimension=8) as server:
        yield server


@pytest.mark.parametrize("status", [503, 401])  # an outage, the account refused
def test_after_a_batch_failed_for_the_providers_sake_no_other_batch_is_sent_until_its_retry_time(
    tmp_path, fake, database_url, status
):
    fake.behaviour.status = status  # and no Retry-After
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_retry_seconds=60)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        first, other = grandbo.org("acme", create=True), grandbo.org("globex", create=True)
        with structlog.testing.capture_logs() as logs:
            first.remember({"title": "disk full on node b"})  # embedded after its commit: refused
        entries = [other.remember({"title": f"certificate expired on edge {n}"}) for n in range(3)]
        report = grandbo.worker().run_once()
        states = [other.embedding(entry.id) for entry in entries]
    assert len(fake.behaviour.requests) == 1
    assert [log["seconds"] for log in logs if log["event"] == "memory.embedding_paused"] == [60.0]
    assert report.claimed == 0 and {(state.state, state.attempts) for state in states} == {("pending", 0)}


def test_once_the_pause_is_over_a_batch_asks_again_and_the_backlog_drains(tmp_path, fake, database_url):
    fake.behaviour.status = 503
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_retry_seconds=0.5)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        entries = [memory.remember({"title": f"queue {n} backlog on shard {n}"}) for n in range(4)]
        fake.behaviour.status = 200  # the provider is back
        worker, embedded = grandbo.worker(), 0
        for _ in range(200):  # bounded: the pause is half a second (the count, not the time, is checked)
            embedded += worker.drain().embedded
            if embedded == len(entries):
                break
            time.sleep(0.05)
        stats = memory.stats()
    assert (embedded, stats.readable, stats.pending) == (4, 4, 0)


def test_a_text_the_provider_refuses_pauses_nothing(tmp_path, fake, database_url):
    fake.behaviour.reject_for = {"poison"}
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_retry_seconds=60)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        first, other = grandbo.org("acme", create=True), grandbo.org("globex", create=True)
        first.remember({"title": "poison pill in the queue"})  # refused (400): that text alone
        entry = other.remember({"title": "certificate expired on the edge"})
        grandbo.worker().drain()
        state = other.embedding(entry.id)
    assert state.state == "embedded"
