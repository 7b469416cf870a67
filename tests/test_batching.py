"""Query embeddings of concurrent requests go to the model together, each answer to its own request."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest

from grandbo.config import Settings
from grandbo.embeddings import batching
from grandbo.embeddings.batching import QueryBatcher
from grandbo.embeddings.deterministic import DeterministicProvider
from grandbo.errors import EmbeddingError


class Recording(DeterministicProvider):
    """The deterministic provider, keeping the size of every call it answers."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.calls: list[int] = []
        self.gate: threading.Event | None = None

    def embed(self, texts, purpose="document"):
        self.calls.append(len(texts))
        if self.gate is not None:
            self.gate.wait(10)
        return super().embed(texts, purpose)


def test_concurrent_queries_are_batched_and_each_gets_its_own_vector():
    lanes, solo = Recording(Settings()), Recording(Settings())
    batcher = QueryBatcher(lanes, lanes=2, solo=solo)
    texts = [f"redis evicted keys on shard {n} under memory pressure" for n in range(40)]
    alone = batcher.embed([texts[0]], "query")[0]  # nothing else waiting: the solo session answers
    assert solo.calls == [1] and np.allclose(alone, DeterministicProvider().embed([texts[0]], "query")[0])
    # Hold the model (lanes and solo) until every query is either in a call or waiting: the rest queue up behind
    # the first calls however slowly the threads start on a loaded machine.
    lanes.gate = solo.gate = threading.Event()
    answers: dict[int, object] = {}
    threads = [
        threading.Thread(target=lambda n=n: answers.__setitem__(n, batcher.embed([texts[n]], "query")[0]))
        for n in range(40)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while sum(lanes.calls) + sum(solo.calls[1:]) + batcher._waiting.qsize() < 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    lanes.gate.set()
    for thread in threads:
        thread.join(30)
    expected = DeterministicProvider().embed(texts, "query")
    assert all(np.allclose(answers[n], expected[n]) for n in range(40))
    assert sum(lanes.calls) + sum(solo.calls[1:]) == 40 and max(lanes.calls) > 1  # batched, nothing lost


def test_document_embeddings_pass_straight_through():
    inner = Recording(Settings())
    QueryBatcher(inner, lanes=2).embed(["one", "two", "three"], "document")
    assert inner.calls == [3]


def test_a_query_asked_ahead_is_embedded_once_and_handed_to_the_embedding_in_its_block():
    inner = Recording(Settings())
    batcher = QueryBatcher(inner, lanes=1)
    text = "redis evicted keys under memory pressure on the auth shard"
    asked = batcher.ask(text)
    expected = DeterministicProvider().embed([text], "query")[0]
    assert np.allclose(asked.result(30), expected) and inner.calls == [1]
    with batching.embedded(batcher, text, asked):
        assert np.allclose(batcher.embed([text], "query")[0], expected)
        assert inner.calls == [1]  # the vector asked for, not the model again
        batcher.embed(["another topic of the same recall thread"], "query")  # a text not asked ahead: embedded
        other = Recording(Settings())
        QueryBatcher(other, lanes=1).embed([text], "query")  # another batcher (provider, space): its own vector
        assert other.calls == [1]
    assert inner.calls == [1, 1]
    batcher.embed([text], "query")  # outside the block: embedded again
    assert inner.calls == [1, 1, 1]


def test_the_error_of_a_query_asked_ahead_is_raised_where_it_is_embedded():
    failed: Future[object] = Future()
    failed.set_exception(EmbeddingError("the provider is down", detail={}))
    batcher = QueryBatcher(Recording(Settings()), lanes=1)
    with batching.embedded(batcher, "checkout latency spikes during deploys", failed), pytest.raises(EmbeddingError):
        batcher.embed(["checkout latency spikes during deploys"], "query")


def test_a_query_cancelled_before_the_model_takes_it_is_left_out_of_the_batch():
    inner = Recording(Settings())
    inner.gate = threading.Event()
    batcher = QueryBatcher(inner, lanes=1)
    first = batcher.ask("the first query, which the model holds")
    deadline = time.monotonic() + 30
    while not inner.calls and time.monotonic() < deadline:  # the model has the first; the rest wait behind it
        time.sleep(0.01)
    left, kept = batcher.ask("a query whose asker left"), batcher.ask("a query still wanted")
    assert left.cancel()  # its request was cancelled (the server stopping): nobody waits for it
    inner.gate.set()
    assert kept.result(30) is not None and first.result(30) is not None
    assert inner.calls == [1, 1]  # the second batch holds the wanted query alone
