"""Query embeddings of concurrent requests go to the model together, each answer to its own request."""

from __future__ import annotations

import threading
import time

import numpy as np

from grandbo.config import Settings
from grandbo.embeddings.batching import QueryBatcher
from grandbo.embeddings.deterministic import DeterministicProvider


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
