"""Query embeddings of concurrent requests, sent to the model together.

A server answers many recalls at once; each needs its topic embedded, and one embedding at a time would make
the model the queue (5-6 ms a sentence on 2 cores: at most ~180 recalls/s). `QueryBatcher` wraps a provider:
one thread sends the model every query waiting at that moment, in one call. Alone, a query goes at once
(no waiting window: no latency added); under load, the queries that arrive while the model works on one
batch form the next. Document embeddings (the worker's) pass straight through.

The provider's Retry-After (a 429) is honoured as the embed worker honours it (`worker.EmbedWorker._quiet_until`):
until it runs out, every query is answered at once with an error saying so, nothing is sent (a recall answers by its
words, its explanation saying why). A batch that timed out marks its topics slow for SLOW_S: each is sent alone
meanwhile, after the other queries of its batch, so that a topic that makes the provider slow costs the recalls
batched with it their vector arm once, not every time it is asked. (Not asked again alone at once: the recall's budget,
one call's timeout, was spent by the batch.) A slow topic's own timeout then is the topic's, not the provider's
(`topic_only` in its detail): the process is not marked degraded for it (`health`), nor for a topic found at fault
by halving a refused batch, or refused alone while the provider embeds `CANARY`.

A server's route may ask for its query's embedding ahead (`ask`), wait for it on the event loop rather than on a
thread of its own, and then run its recall on a thread inside `embedded`, where the recall's embedding of that
text is the one asked for: no thread is held for the wait, so fewer threads contend for the GIL.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar

from grandbo.config import Settings
from grandbo.embeddings.apart import Apart
from grandbo.embeddings.base import CANARY, Provider, Purpose, Vectors, get_provider, space_of
from grandbo.errors import (
    EmbeddingCountError,
    EmbeddingError,
    GrandboError,
    ProviderMismatchError,
    ProviderUnavailableError,
)
from grandbo.http import closing
from grandbo.model import EmbeddingSpace

_AHEAD: ContextVar[tuple[QueryBatcher, str, Future[Sequence[float]]] | None] = ContextVar(
    "grandbo_query_ahead", default=None
)

SLOW_S = 600.0  # how long a topic of a batch that timed out is sent alone
SLOW_MOST = 4096  # slow topics remembered at most (the oldest forgotten first)


class QueryBatcher:
    """A provider whose single-text query embeddings are batched across threads."""

    def __init__(
        self,
        provider: Provider,
        *,
        lanes: int = 1,
        solo: Provider | None = None,
        most_queries: int = 32,
        window_s: float = 0.0,
        budget_s: float = 30.0,
    ) -> None:
        """`solo`, a session of the same model using every core, answers a query that is alone (one waiting, no
        other lane at work): 12.6 ms instead of 15.4 for one recall measured here, with the lanes' throughput
        kept under load. `budget_s`: how long a refused batch's halving may go on (`_settle`)."""
        self.inner = provider
        self.solo = solo
        self._busy = 0
        self.name, self.model, self.dimension = provider.name, provider.model, provider.dimension
        self.min_similarity = provider.min_similarity
        self.window_s, self.budget_s = window_s, budget_s
        # a wrapper of the provider: its documented limit of a request is the provider's (`base.capped_batch`)
        self.max_batch: int | None = getattr(provider, "max_batch", None)
        self.most_queries = min(most_queries, self.max_batch or most_queries)
        self._waiting: queue.SimpleQueue[tuple[str, Future[Sequence[float]]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.lanes = max(1, lanes)
        self._threads: list[threading.Thread] = []
        self._quiet_until = 0.0  # nothing sent before (monotonic seconds): the provider's Retry-After
        self._slow: dict[str, float] = {}  # a topic of a batch that timed out: sent alone until (monotonic seconds)

    def close(self) -> None:
        """Close the wrapped providers' clients."""
        closing(self.inner)
        closing(self.solo)

    def warm(self) -> None:
        """Load every model session now (a server's first requests should not pay for it)."""
        if (quiet := self._quiet()) is not None:  # (a health probe: not before the provider's Retry-After)
            raise quiet
        for model in (self.inner, self.solo):
            if model is not None:
                model.embed(["warm up the query model"], "query")

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> Vectors:
        if purpose != "query" or len(texts) != 1:
            return self.inner.embed(texts, purpose)
        ahead = _AHEAD.get()
        # asked of this batcher (its provider, its space), for this text: another's vector is never taken
        done = ahead[2] if ahead is not None and ahead[0] is self and ahead[1] == texts[0] else self.ask(texts[0])
        return [done.result()]

    def ask(self, text: str) -> Future[Sequence[float]]:
        """Queue the query embedding of `text`; its Future, which holds the provider's error when it fails. One
        cancelled before the model takes it is left out of the batch."""
        done: Future[Sequence[float]] = Future()
        if (quiet := self._quiet()) is not None:
            done.set_exception(quiet)
            return done
        self._waiting.put((text, done))
        self._ensure_running()
        return done

    def _quiet(self) -> ProviderUnavailableError | None:
        """While the provider's last Retry-After runs, the error every query gets instead of a call; else None."""
        left = self._quiet_until - time.monotonic()
        if left <= 0:
            return None
        return ProviderUnavailableError(
            f"{self.name} asked to be sent nothing for {left:.0f} s more (its Retry-After): recall is by words only "
            "until then.",
            detail={"provider": self.name, "retry_after_s": left},
        )

    def _ensure_running(self) -> None:
        with self._lock:
            self._threads = [thread for thread in self._threads if thread.is_alive()]
            while len(self._threads) < self.lanes:
                thread = threading.Thread(target=self._run, name="grandbo-query-batcher", daemon=True)
                thread.start()
                self._threads.append(thread)

    def _run(self) -> None:
        while True:
            try:
                first = self._waiting.get(timeout=30)
            except queue.Empty:  # idle: let the thread go; the next query starts it again
                with self._lock:
                    if self._waiting.empty():
                        self._threads = [t for t in self._threads if t is not threading.current_thread()]
                        return
                continue
            batch = [first]
            deadline = time.monotonic() + self.window_s
            while len(batch) < self.most_queries:
                left = deadline - time.monotonic()
                try:
                    batch.append(self._waiting.get(timeout=left) if left > 0 else self._waiting.get_nowait())
                except queue.Empty:
                    break
            batch = [(text, done) for text, done in batch if done.set_running_or_notify_cancel()]
            if batch:  # else every asker left (its client gone) before the model took it
                self._answer(batch)

    def _answer(self, batch: list[tuple[str, Future[Sequence[float]]]]) -> None:
        with self._lock:
            self._busy += 1
            alone = self._busy == 1 and len(batch) == 1 and self._waiting.empty()
        model = self.solo if alone and self.solo is not None else self.inner
        try:
            self._settle(model, batch)
        finally:
            with self._lock:
                self._busy -= 1

    def _settle(self, model: Provider, batch: list[tuple[str, Future[Sequence[float]]]]) -> None:
        """Each query of `batch` answered: its vector, or the provider's error. A batch holds every org's queries of
        the moment, and a provider refuses a request for one text in it (HTTP 400) or an answer unusable in one place:
        such a batch is asked again in halves down to the queries at fault (`embeddings.apart`, shared with the embed
        worker), so that one org's topic costs no other org's recall its vector arm (probe 31); within `budget_s` of
        the batch's first call, the wait a recall asking alone has for its vector (one provider call's timeout): a
        query not answered by then gets the batch's error, and its recall goes on lexically. The slow topics are sent
        each alone, after the others (see the module); nothing is sent while the provider's Retry-After runs."""
        if (quiet := self._quiet()) is not None:
            self._answered(batch, quiet)
            return
        now = time.monotonic()
        slow = [query for query in batch if self._slow.get(query[0], 0.0) > now]
        if len(slow) < len(batch):
            self._together(model, [query for query in batch if all(query is not alone for alone in slow)])
        for query in slow:
            self._together(model, [query], alone=True)

    def _together(
        self, model: Provider, batch: list[tuple[str, Future[Sequence[float]]]], *, alone: bool = False
    ) -> None:
        """`batch` sent in one call, asked again in halves when refused (`_settle`); `alone`: a slow topic's."""
        if (quiet := self._quiet()) is not None:
            self._answered(batch, quiet)
            return
        until = time.monotonic() + self.budget_s
        answer = self._embedded(model, batch)
        if alone and isinstance(answer, EmbeddingError) and answer.detail.get("timed_out"):
            answer = _topic_only(answer)
        if not isinstance(answer, BaseException):
            self._answered(batch, answer)
            return
        Apart[tuple[str, Future[Sequence[float]]], Vectors](lambda queries: self._embedded(model, queries),
              lambda: not isinstance(self._embedded(model, [(CANARY, Future())]), BaseException),
              self._answered, self._answered, until,
              alone=lambda queries, error: self._answered(queries, _topic_only(error))).run(batch, answer)  # fmt: skip

    def _embedded(self, model: Provider, batch: list[tuple[str, Future[Sequence[float]]]]) -> Vectors | BaseException:
        """The provider's vectors for the batch's texts, or its error."""
        try:
            vectors = model.embed([text for text, _ in batch], "query")
        except BaseException as error:  # each waiting request gets the provider's own error
            self._heed(error, [text for text, _ in batch])
            return error
        if len(vectors) != len(batch):
            return EmbeddingCountError(
                f"{self.name} returned {len(vectors)} vectors for {len(batch)} queries.",
                detail={"provider": self.name, "expected": len(batch), "received": len(vectors)},
            )
        return vectors

    def _heed(self, error: BaseException, texts: list[str]) -> None:
        """What a failed call says of the next ones: the provider's Retry-After (no call before it runs out, as the
        embed worker does), and after a timeout, its topics sent alone for SLOW_S."""
        if not isinstance(error, GrandboError):
            return
        now = time.monotonic()
        with self._lock:
            if isinstance(wait := error.detail.get("retry_after_s"), float):
                self._quiet_until = max(self._quiet_until, now + wait)
            if isinstance(error, ProviderUnavailableError) and error.detail.get("timed_out"):
                for text in texts:
                    self._slow.pop(text, None)  # the newest last: forgotten last
                    self._slow[text] = now + SLOW_S
                for text in [text for text, until in self._slow.items() if until <= now][:SLOW_MOST]:
                    del self._slow[text]
                while len(self._slow) > SLOW_MOST:
                    del self._slow[next(iter(self._slow))]

    @staticmethod
    def _answered(batch: list[tuple[str, Future[Sequence[float]]]], answer: Vectors | BaseException) -> None:
        if isinstance(answer, BaseException):
            for _, done in batch:
                done.set_exception(answer)
            return
        for (_, done), vector in zip(batch, answer, strict=True):
            done.set_result(vector)  # type: ignore[arg-type]  # one row of the provider's Vectors


def _topic_only(error: BaseException) -> BaseException:
    """`error` marked as one topic's own (`topic_only` in its detail): a slow topic's timeout when sent alone, a
    topic found at fault by halving its batch; the process is not marked degraded for it (`health`)."""
    if not isinstance(error, EmbeddingError):
        return error
    return type(error)(error.message, detail={**error.detail, "topic_only": True})


@contextmanager
def embedded(batcher: QueryBatcher, text: str, done: Future[Sequence[float]]) -> Iterator[None]:
    """Within the block, a `QueryBatcher`'s query embedding of `text` on this thread is `done`'s (asked ahead with
    `QueryBatcher.ask`): its vector, or its error as the provider raised it."""
    token = _AHEAD.set((batcher, text, done))
    try:
        yield
    finally:
        _AHEAD.reset(token)


def store_provider(space: EmbeddingSpace, settings: Settings, *, batch_queries: bool = False) -> Provider:
    """The provider of a store's embedding space, as configured (ProviderMismatchError when its model or dimension
    is not the store's); behind a `QueryBatcher` for a server that batches its queries (`batch_queries`)."""
    provider = get_provider(space.provider, settings)
    if space_of(provider) != space:
        raise ProviderMismatchError(
            f"The {space.provider!r} provider is configured as {space_of(provider)} but the store "
            f"holds vectors of {space}. Restore the configuration (model, dimension), or migrate "
            f"with `grandbo reembed --embedding {space.provider}`.",
            detail={"store_space": str(space), "configured": str(space_of(provider))},
        )
    if not batch_queries:
        return provider
    solo = None
    if settings.local_threads == 1:  # single-threaded lanes: a lone query gets every core
        solo = get_provider(space.provider, settings.model_copy(update={"local_threads": None}))
    return QueryBatcher(provider, lanes=os.cpu_count() or 1, solo=solo, budget_s=settings.http_timeout_seconds)
