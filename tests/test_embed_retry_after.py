"""A provider's Retry-After on HTTP 429 or 503 is the least the embed worker waits (probe 31).

OpenAI and Voyage send `Retry-After` with a rate limit; the worker retried after GRANDBO_EMBED_RETRY_SECONDS only
(doubling), so a provider asking for a minute was asked again at once, and again, each attempt counted: the jobs
failed for good within seconds of a rate limit. The header is read as RFC 9110 writes it (seconds, or an HTTP-date),
at most `pending_work.EMBED_MOST_SECONDS`.
"""

from __future__ import annotations

import email.utils
from datetime import timedelta

import pytest

from grandbo.model import utcnow
from grandbo.pending_work import EMBED_MOST_SECONDS
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings
from tests.test_embedding_faults import _hosted


@pytest.fixture
def fake():
    with FakeEmbeddings(dimension=8) as server:
        yield server


def _next_try_after(tmp_path, fake, database_url, status, header):
    fake.behaviour.status, fake.behaviour.retry_after = status, header
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_retry_seconds=1)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        before = utcnow()
        entry = memory.remember({"title": "disk full on node b"})  # embedded after its commit: refused
        state = memory.embedding(entry.id)
    assert (state.state, state.attempts) == ("pending", 1)
    return (state.next_try - before).total_seconds()


@pytest.mark.parametrize("status", [429, 503])
def test_the_worker_waits_the_seconds_the_providers_retry_after_asks(tmp_path, fake, database_url, status):
    assert _next_try_after(tmp_path, fake, database_url, status, "120") >= 119


def test_a_retry_after_date_is_waited_for(tmp_path, fake, database_url):
    when = email.utils.format_datetime(utcnow() + timedelta(seconds=600), usegmt=True)
    assert _next_try_after(tmp_path, fake, database_url, 429, when) >= 590


def test_a_retry_after_past_a_day_waits_a_day(tmp_path, fake, database_url):
    assert (
        EMBED_MOST_SECONDS - 5 <= _next_try_after(tmp_path, fake, database_url, 429, "9" * 40) <= EMBED_MOST_SECONDS + 5
    )


@pytest.mark.parametrize("header", [None, "soon", "-5"])
def test_without_a_usable_retry_after_the_retry_delay_stands(tmp_path, fake, database_url, header):
    assert _next_try_after(tmp_path, fake, database_url, 429, header) <= 5  # GRANDBO_EMBED_RETRY_SECONDS: 1


def test_no_other_batch_is_sent_before_the_retry_after_is_over(tmp_path, fake, database_url):
    # Failed before: only the refused batch's jobs waited; each later claim sent the next batch to the provider that
    # had asked for two minutes (a backlog: a request a poll, every job of it counting an attempt).
    fake.behaviour.status, fake.behaviour.retry_after = 429, "120"
    settings = _hosted(tmp_path, fake.url, database_url=database_url)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        first, other = grandbo.org("acme", create=True), grandbo.org("globex", create=True)
        first.remember({"title": "disk full on node b"})  # embedded after its commit: refused, Retry-After 120
        entry = other.remember({"title": "certificate expired on the edge"})
        report = grandbo.worker().run_once()
        state = other.embedding(entry.id)
    assert len(fake.behaviour.requests) == 1
    assert (report.claimed, state.state, state.attempts) == (0, "pending", 0)
