"""`POST /v1/recall` served: its query's embedding waited for on the event loop, not on a worker thread.

Each recall used to hold one of the worker threads that every route which is not async shares (anyio's 40) for its
whole life, most of it blocked on its query's embedding: 40 recalls waiting for a slow provider left no thread to
any other such route of the process (`/readyz` among them), and at 16 clients 16 threads woke together whenever a
batch of embeddings came back, to contend for the GIL with the batcher's threads, which feed the model. Here the
query's embedding is asked of the `QueryBatcher` ahead (`QueryBatcher.ask`) and awaited on the event loop; the
recall then runs on a worker thread, where its embedding of that text is the one asked for (`batching.embedded`).
Those are the threads every sync route shares (anyio's), not a few of its own: a cap of cores + 1 measured fewer
context switches, but one org's slow recalls (a first recall building a large org's index) would hold them all,
and every other org's recalls would wait behind them (an org's share, GRANDBO_REQUESTS_PER_ORG, is 4). A request
cancelled while it waits (the server stopping) takes its query out of the model's next batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import nullcontext, suppress

import anyio

from grandbo.embeddings.batching import QueryBatcher, embedded
from grandbo.model import Arm, RecallResult
from grandbo.retrieval.text import query_text
from grandbo.service import Grandbo


async def recalled(grandbo: Grandbo, topic: str, arm: Arm, recall: Callable[[], RecallResult]) -> str:
    """The JSON of `recall()`, a recall of `topic` by `arm`, with its query embedded ahead (see the module)."""
    text = query_text(topic) if arm is not Arm.LEXICAL else None
    asked = _ask(grandbo, text) if text is not None else None
    ahead = asked[1] if asked is not None else None
    waited_ms = 0.0
    if ahead is not None:
        mark = time.perf_counter()
        # The provider's error is left to the recall, which meets it where it always did (and degrades); a request
        # cancelled meanwhile cancels `ahead` with it, and the batcher leaves its query out.
        with suppress(Exception):
            await asyncio.wrap_future(ahead)
        waited_ms = (time.perf_counter() - mark) * 1000

    def run() -> str:
        with embedded(asked[0], text, asked[1]) if text is not None and asked is not None else nullcontext():
            result = recall()
        result.timings.embed_ms += waited_ms  # its query's embedding was waited for before (the recall's own: ~0)
        return result.model_dump_json()

    return await anyio.to_thread.run_sync(run)


def _ask(grandbo: Grandbo, text: str) -> tuple[QueryBatcher, Future[Sequence[float]]] | None:
    """The query embedding of `text` asked of the process's query batcher; None without one, while the provider is
    known not to answer (recall goes lexical at once then, asking nothing), or before it is made: making it (the
    model loaded, its lock held) is the recall's, on its thread, never the event loop's (`grandbo serve` warms it)."""
    if grandbo.health.error() is not None:
        return None
    provider = grandbo.provider_made()
    return (provider, provider.ask(text)) if isinstance(provider, QueryBatcher) else None
