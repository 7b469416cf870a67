"""One organization's text that makes the provider slow never fails another's entries (probe 31).

A batch the provider does not answer within GRANDBO_HTTP_TIMEOUT_SECONDS was taken for an outage and failed whole,
and a claim deals a batch across orgs: the text's batch-mates came back with it, timed out with it, and another
org's entry was failed for good after GRANDBO_EMBED_MAX_ATTEMPTS. A batch that timed out is now dealt as jobs that
lost their worker (`embed_jobs.TIMED_OUT`): a batch of its own, then each alone. The fake provider holds its answer past
the timeout for a request holding the slow text, as a provider stuck on one input does.
"""

from __future__ import annotations

import threading

import pytest

from grandbo.embed_jobs import TIMED_OUT_AGAIN
from grandbo.model import parse_entry, utcnow
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings
from tests.test_embedding_faults import _hosted


@pytest.fixture
def fake():
    with FakeEmbeddings(dimension=8) as server:
        yield server


def test_another_orgs_text_that_makes_the_provider_slow_never_fails_this_orgs_entries(tmp_path, fake, database_url):
    fake.behaviour.hold, fake.behaviour.hold_for, fake.behaviour.hold_s = threading.Event(), {"poison"}, 2.0
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_batch_size=4, embed_max_attempts=5)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        writes = {"evil": ["poison pill text"], "victim": ["disk full on node b", "kafka lag on the payments topic"]}
        for org, titles in writes.items():
            memory = grandbo.org(org, create=True)
            grandbo._store.append(org, [memory._writes._remembered(parse_entry({"title": title}), utcnow(), "test")
                                        for title in titles])  # fmt: skip
        worker = grandbo.worker()
        for _ in range(settings.embed_max_attempts + 3):  # two batches, then one job alone a claim
            worker.run_once()
        victim, evil = grandbo.org("victim").stats(), grandbo.org("evil").stats()
        (poison,) = grandbo.org("evil").entries()
        state = grandbo.org("evil").embedding(poison.id)
    fake.behaviour.hold.set()
    assert (victim.readable, victim.failed, victim.pending) == (2, 0, 0)
    assert (evil.readable, evil.failed) == (0, 1)  # the slow text counts its own attempts
    assert (state.state, state.last_error) == ("failed", TIMED_OUT_AGAIN)


def test_a_backlog_of_jobs_timed_out_twice_is_embedded_several_a_claim_each_alone(tmp_path, fake, database_url, raw):
    """Jobs whose batch timed out twice in a row (`TIMED_OUT_AGAIN`) were leased one a claim: a provider slow for a
    while left a backlog drained a job a claim. A claim takes several, each asked alone, within its budget."""
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_batch_size=8, embed_claim_seconds=100)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        titles = [f"disk full on node {n}" for n in range(4)]
        memory = grandbo.org("acme", create=True)
        grandbo._store.append("acme", [memory._writes._remembered(parse_entry({"title": title}), utcnow(), "test")
                                       for title in titles])  # fmt: skip
        raw("UPDATE embed_outbox SET attempts = 2, last_error = %s", (TIMED_OUT_AGAIN,), org="acme")
        asked = len(fake.behaviour.requests)
        report = grandbo.worker().run_once()
    assert (report.claimed, report.embedded) == (4, 4)  # before: (1, 1)
    assert [request["body"]["input"] for request in fake.behaviour.requests[asked:]] == [
        [title] for title in titles
    ]  # each alone
