"""A served request's query embedding waited for on the event loop, not on a worker thread (`embedded_first`).

Each request that recalls (`POST /v1/recall`, `GET /v1/context` with a topic, MCP's `query_org_memory` and
`get_context_block`) used to hold one of the worker threads that every route which is not async shares (anyio's
40) for its whole life, most of it blocked on its query's embedding: 40 of them waiting for a slow provider left no
thread to any other such route of the process (`/readyz` among them), and at 16 clients 16 threads woke together
whenever a batch of embeddings came back, to contend for the GIL with the batcher's threads, which feed the model.
Here the query's embedding is asked of the `QueryBatcher` ahead (`QueryBatcher.ask`) and awaited on the event loop;
the request's work then runs on a worker thread, where its embedding of that text is the one asked for
(`batching.embedded`). Those are the threads every sync route shares (anyio's), not a few of its own: a cap of cores
+ 1 measured fewer context switches, but one org's slow recalls (a first recall building a large org's index) would
hold them all, and every other org's recalls would wait behind them (an org's share, GRANDBO_REQUESTS_PER_ORG, is
4). A request cancelled while it waits (the server stopping) takes its query out of the model's next batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import nullcontext, suppress
from typing import TYPE_CHECKING, TypeVar

import anyio

from grandbo.embeddings.batching import QueryBatcher, embedded
from grandbo.retrieval.text import query_text

if TYPE_CHECKING:
    from grandbo.service import Grandbo

T = TypeVar("T")


async def embedded_first(grandbo: Grandbo | None, topic: str | None, run: Callable[[float], T]) -> T:
    """`run(waited_ms)` on a worker thread, once the query embedding of a recall of `topic` (None: it embeds none)
    asked ahead of `grandbo`'s query batcher came back (see the module); `waited_ms`, how long that took. Within `run`
    the batcher's embedding of that text is that one. Without a batcher (or `grandbo`) it is `run(0.0)` on a thread."""
    text = query_text(topic) if topic else None  # what the recall embeds of its topic
    asked = _ask(grandbo, text) if grandbo is not None and text is not None else None
    waited_ms = 0.0
    if asked is not None:
        mark = time.perf_counter()
        # The provider's error is left to `run`, which meets it where it always did (a recall degrades); a request
        # cancelled meanwhile cancels the embedding with it, and the batcher leaves its query out.
        with suppress(Exception):
            await asyncio.wrap_future(asked[1])
        waited_ms = (time.perf_counter() - mark) * 1000

    def within() -> T:
        with embedded(asked[0], text, asked[1]) if asked is not None and text is not None else nullcontext():
            return run(waited_ms)

    return await anyio.to_thread.run_sync(within)


def _ask(grandbo: Grandbo, text: str) -> tuple[QueryBatcher, Future[Sequence[float]]] | None:
    """The query embedding of `text` asked of the process's query batcher; None without one, while the provider is
    known not to answer (recall goes lexical at once then, asking nothing), or before it is made: making it (the
    model loaded, its lock held) is the recall's, on its thread, never the event loop's (`grandbo serve` warms it)."""
    if grandbo.health.error() is not None:
        return None
    provider = grandbo.provider_made()
    return (provider, provider.ask(text)) if isinstance(provider, QueryBatcher) else None
