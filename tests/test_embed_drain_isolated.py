"""A text the provider refuses alone stops no drain: `grandbo backfill` embeds the rest of the backlog.

A batch the provider refuses for one text in it is asked again in halves down to that text (`embeddings.apart`):
the claim goes on and only that text's job counts the attempt. `EmbedWorker.drain` (backfill, reembed, a write
embedded at once) and the server's background loop stopped (or slept a poll) after any failed job, so one refused
text among thousands left every claim after the first pending until the next run. They stop for a provider that
fails a batch whole (an outage), as before. The fake provider answers as the OpenAI embeddings API documents.
"""

from __future__ import annotations

import pytest

from grandbo.model import parse_entry, utcnow
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings
from tests.serving import until
from tests.test_embedding_faults import _hosted


@pytest.fixture
def fake():
    with FakeEmbeddings(dimension=8) as server:
        yield server


def queued(grandbo: Grandbo, org: str, titles: list[str]) -> None:
    """Entries whose embed jobs wait in the outbox (written as a write does, not embedded by it)."""
    memory = grandbo.org(org, create=True)
    grandbo._store.append(org, [memory._writes._remembered(parse_entry({"title": title}), utcnow(), "test")
                                for title in titles])  # fmt: skip


def test_backfill_embeds_the_rest_of_the_backlog_past_a_text_refused_alone(tmp_path, fake, database_url):
    fake.behaviour.reject_for.add("poison")
    # batches of 4, one batch a claim (not timed yet): the refused text is in the first claim of 3
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_batch_size=4, embed_retry_seconds=60)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        queued(grandbo, "acme", ["poison text", *(f"disk full on node {n}" for n in range(11))])
        report = grandbo.backfill()
        stats = grandbo.org("acme").stats()
        assert (stats.readable, stats.pending) == (11, 1)  # before: 3 readable, 9 pending (the first claim only)
        assert (report.embedded, report.failed, report.failing) == (11, 1, False)

        # An outage still stops the drain at its first claim: the rest is not asked (nor counts an attempt) in vain.
        fake.behaviour.reject_for, fake.behaviour.reject_status = {""}, 503
        queued(grandbo, "acme", [f"kafka lag on partition {n}" for n in range(12)])
        asked = len(fake.behaviour.requests)
        report = grandbo.backfill()
        assert (report.claimed, report.failed, report.failing) == (4, 4, True)
        assert len(fake.behaviour.requests) - asked == 1  # an outage is not halved


def test_the_background_worker_goes_on_past_a_text_refused_alone(tmp_path, fake, database_url):
    """The server's loop slept its poll after such a claim: an hour here, so the rest waited for it."""
    fake.behaviour.reject_for.add("poison")
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_batch_size=4, embed_retry_seconds=60)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        queued(grandbo, "acme", ["poison text", *(f"disk full on node {n}" for n in range(11))])
        worker = grandbo.worker()
        worker.start(poll_seconds=3600)
        try:
            until(lambda: grandbo.org("acme").stats().readable == 11, "the 11 texts it accepts embedded")
        finally:
            worker.stop()
        assert grandbo.org("acme").stats().pending == 1
