"""One organization's text that the provider refuses never fails another's entries (probe 31).

A claim deals a provider batch across the orgs with work, and a provider refuses a whole batch for one text in it
(HTTP 400: too long for the model, a content filter) or answers one text's vector unusably (NaN). Every job of the
batch counted the attempt and came back with the same retry time, so the next claim dealt them together again:
after GRANDBO_EMBED_MAX_ATTEMPTS another org's entry was failed for good, never found by meaning, by a text it
never saw. The fake provider answers as the OpenAI embeddings API documents.
"""

from __future__ import annotations

import pytest

from grandbo.model import parse_entry, utcnow
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings, vector_for
from tests.test_embedding_faults import _hosted


@pytest.fixture
def fake():
    with FakeEmbeddings(dimension=8) as server:
        yield server


FAULTS = {
    "refused": lambda behaviour: behaviour.reject_for.add("poison"),
    "a NaN": lambda behaviour: behaviour.value_for.update(poison=float("nan")),
}


def _two_orgs_embedded(grandbo: Grandbo, attempts: int) -> None:
    """Two texts the fake refuses written by org "evil", two fine ones by "victim" (dealt evil, victim, evil, victim:
    into both halves of a batch of 4), then the worker's claims run once more than an entry's attempts."""
    writes = {"evil": ["poison pill text", "another poison text"],
              "victim": ["disk full on node b", "kafka lag on the payments topic"]}  # fmt: skip
    for org, titles in writes.items():
        memory = grandbo.org(org, create=True)
        grandbo._store.append(org, [memory._writes._remembered(parse_entry({"title": title}), utcnow(), "test")
                                    for title in titles])  # fmt: skip
    worker = grandbo.worker()
    for _ in range(attempts + 1):
        worker.run_once()


@pytest.mark.parametrize("fault", list(FAULTS))
def test_another_orgs_text_the_provider_refuses_never_fails_this_orgs_entries(tmp_path, fake, database_url, fault):
    FAULTS[fault](fake.behaviour)
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_batch_size=4, embed_max_attempts=3)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        _two_orgs_embedded(grandbo, settings.embed_max_attempts)
        victim, evil = grandbo.org("victim").stats(), grandbo.org("evil").stats()
        entries = grandbo.org("victim").recall("disk full kafka lag", k=5).hits
        vectors = grandbo.org("victim").vectors([hit.entry.id for hit in entries])
    assert (victim.readable, victim.failed, victim.pending) == (2, 0, 0)
    assert (evil.readable, evil.failed) == (0, 2)  # the texts at fault count their own attempts
    for hit in entries:  # each under its own entry
        assert vectors[hit.entry.id].tolist() == pytest.approx(vector_for(hit.entry.title, 8), abs=1e-6)


def test_a_provider_that_refuses_every_request_is_asked_at_most_four_times_a_batch(tmp_path, fake, database_url):
    """Refused whatever it holds (an unsupported dimension, a model the key cannot use as asked), a batch is not halved
    down to each text (2n-1 calls: 127 for 64): both halves fail and so does a text of no tenant's alone, so the
    whole batch counts the attempt, and the claim stops there."""
    fake.behaviour.reject_for = {""}  # every text
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_batch_size=64)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        grandbo._store.append("acme", [memory._writes._remembered(parse_entry({"title": f"entry {n}"}), utcnow(), "t")
                                       for n in range(64)])  # fmt: skip
        asked = len(fake.behaviour.requests)
        report = grandbo.worker().run_once()
        assert (report.claimed, report.failed) == (64, 64)
        assert len(fake.behaviour.requests) - asked <= 4  # the batch, its two halves, the canary alone (at most)
        assert memory.stats().pending == 64


def test_a_claim_whose_time_is_spent_by_the_batch_still_asks_its_halves_apart(tmp_path, fake, database_url):
    """The halving was bounded by the claim's budget (GRANDBO_EMBED_CLAIM_SECONDS, 2 s): a batch that took it all
    (Bedrock's 64 calls, one a text; a hosted provider under load) failed whole, so one org's refused text failed the
    other's entries to the end of their attempts, as before probe 31. It is bounded by half the lease, which covers
    it (a budget spent here: a claim of a microsecond)."""
    fake.behaviour.reject_for.add("poison")
    settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_batch_size=4, embed_max_attempts=3,
                       embed_claim_seconds=1e-6)  # fmt: skip
    with Grandbo.init(settings, embedding="openai") as grandbo:
        _two_orgs_embedded(grandbo, settings.embed_max_attempts)
        victim = grandbo.org("victim").stats()
    assert (victim.readable, victim.failed, victim.pending) == (2, 0, 0)  # before: (0, 2, 0)
