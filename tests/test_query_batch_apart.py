"""One organization's recall topic that the provider refuses never costs another's recall its vector arm (probe 31).

`grandbo serve` sends the query embeddings of concurrent recalls, every org's, to the provider together
(`QueryBatcher`). A hosted provider refuses a whole request for one text in it (HTTP 400: too long, a content
filter) and an answer unusable in one place is refused whole: every recall batched with that topic lost its vector
arm (and its verdict) with the topic's own error. The fake provider answers as the OpenAI embeddings API documents;
the first query is held by the fake until the two others wait behind it, so that they go in one batch.
"""

from __future__ import annotations

import threading

import pytest

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.batching import QueryBatcher
from grandbo.errors import EmbeddingError, ProviderUnavailableError
from tests.fakes import FakeEmbeddings, vector_for

FAULTS = {
    "refused": lambda behaviour: behaviour.reject_for.add("poison"),
    "a NaN": lambda behaviour: behaviour.value_for.update(poison=float("nan")),
    "an outage": lambda behaviour: setattr(behaviour, "reject_status", 503) or behaviour.reject_for.add("poison"),
}


def asked_together(batcher, fake):  # type: ignore[no-untyped-def]
    """A first topic the provider holds (`hold_for` "first"), then one org's poison topic and another org's, which
    wait together behind it for the batcher's one lane; the provider then let go: the three futures."""
    first = batcher.ask("first topic, held by the provider")
    while not fake.behaviour.requests:  # the lane is asking for the first: the next two wait together
        threading.Event().wait(0.01)
    evil, victim = batcher.ask("poison topic of one org"), batcher.ask("disk full topic of another org")
    fake.behaviour.hold.set()
    return first, evil, victim


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_topic_the_provider_refuses_fails_only_its_own_recall(fault):
    with FakeEmbeddings(dimension=8) as fake:
        settings = Settings(openai_base_url=fake.url, openai_model="fake-embed", openai_dimension=8,
                            openai_api_key="test-key", http_timeout_seconds=30)  # fmt: skip
        FAULTS[fault](fake.behaviour)
        fake.behaviour.hold, fake.behaviour.hold_for = threading.Event(), {"first"}
        batcher = QueryBatcher(get_provider("openai", settings), lanes=1)
        try:
            first, evil, victim = asked_together(batcher, fake)
            assert len(first.result(timeout=30)) == 8
            with pytest.raises(EmbeddingError) as refused:
                evil.result(timeout=30)
            if fault == "an outage":  # the provider's own state: every query waiting on it shares it
                assert isinstance(refused.value, ProviderUnavailableError)
                with pytest.raises(ProviderUnavailableError):
                    victim.result(timeout=30)
            else:
                assert victim.result(timeout=30) == pytest.approx(vector_for("disk full topic of another org", 8))
        finally:
            fake.behaviour.hold.set()
            batcher.close()
    asked = [request["body"]["input"] for request in fake.behaviour.requests]
    assert asked[1] == ["poison topic of one org", "disk full topic of another org"]  # batched together


def test_a_provider_that_refuses_every_query_is_asked_four_times_a_batch():
    """Refused whatever it holds, a batch of queries is not halved down to each (2n-1 calls): both halves fail, so does
    a text of no tenant's alone (`CANARY`), and every query gets the batch's error."""
    with FakeEmbeddings(dimension=8) as fake:
        settings = Settings(openai_base_url=fake.url, openai_model="fake-embed", openai_dimension=8,
                            openai_api_key="test-key", http_timeout_seconds=30)  # fmt: skip
        fake.behaviour.reject_for = {""}  # every text
        fake.behaviour.hold, fake.behaviour.hold_for = threading.Event(), {"first"}
        batcher = QueryBatcher(get_provider("openai", settings), lanes=1)
        try:
            first = batcher.ask("first topic, held by the provider")
            while not fake.behaviour.requests:
                threading.Event().wait(0.01)
            waiting = [batcher.ask(f"refused topic {n}") for n in range(8)]
            fake.behaviour.hold.set()
            for done in [first, *waiting]:
                with pytest.raises(EmbeddingError):
                    done.result(timeout=30)
        finally:
            fake.behaviour.hold.set()
            batcher.close()
    # the first, refused alone, and the canary that tells whether it was its text; the batch, its two halves, the
    # canary (at most)
    assert len(fake.behaviour.requests) <= 2 + 4


def test_a_half_the_provider_embedded_is_answered_before_the_other_half_is_asked_apart():
    """The halves of a refused batch: the one embedded is answered at once, not after the one refused has been asked
    again in halves, one call after another (up to 2n-1), while the other org's recalls waited on their vectors."""
    with FakeEmbeddings(dimension=8) as fake:
        settings = Settings(openai_base_url=fake.url, openai_model="fake-embed", openai_dimension=8,
                            openai_api_key="test-key", http_timeout_seconds=30)  # fmt: skip
        fake.behaviour.reject_for.add("poison")
        fake.behaviour.hold, fake.behaviour.hold_for = threading.Event(), {"first"}
        batcher = QueryBatcher(get_provider("openai", settings), lanes=1)
        waited: list[bool] = []  # whether the other org's recalls were answered when each lone poison was asked
        try:
            first = batcher.ask("first topic, held by the provider")
            while not fake.behaviour.requests:
                threading.Event().wait(0.01)
            evil = [batcher.ask(f"poison topic {n} of one org") for n in range(2)]
            victims = [batcher.ask(f"disk full topic {n} of another org") for n in range(2)]
            fake.behaviour.on_embed = lambda texts: waited.append(
                len(texts) == 1 and "poison" in texts[0] and not all(victim.done() for victim in victims)
            )
            fake.behaviour.hold.set()
            assert len(first.result(timeout=30)) == 8
            for victim, n in zip(victims, range(2), strict=True):
                assert victim.result(timeout=30) == pytest.approx(vector_for(f"disk full topic {n} of another org", 8))
            for done in evil:
                with pytest.raises(EmbeddingError):
                    done.result(timeout=30)
        finally:
            fake.behaviour.hold.set()
            batcher.close()
    lone = [request["body"]["input"] for request in fake.behaviour.requests if len(request["body"]["input"]) == 1]
    assert [t for t in lone if "poison" in t[0]] == [["poison topic 0 of one org"], ["poison topic 1 of one org"]]
    assert not any(waited), waited  # before: each lone poison asked while the other org's recalls still waited
