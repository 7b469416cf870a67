"""What a process knows of the parts it cannot do without, for `/readyz` and for degrading instead of stopping.

A hosted embedding provider that does not answer when `grandbo serve` starts (an HTTP 500, a timeout, a refused
connection) no longer stops the process: it is recorded here as degraded. Meanwhile recall skips the vector arm
at once (lexical only, with a note) instead of waiting a client timeout per query, writes are stored and their
embed jobs wait in the outbox, and `/readyz` answers 200 with what is degraded. While degraded, a probe (one
query embedding, on a thread of its own, at most every GRANDBO_PROVIDER_PROBE_SECONDS, asked for by `/readyz`
or a recall) finds when the provider answers again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import numpy as np
import structlog

from grandbo.embeddings.base import Provider, Purpose, Vectors, embed_checked
from grandbo.embeddings.batching import QueryBatcher
from grandbo.errors import EmbeddingError, GrandboError, ProviderUnavailableError

log = structlog.get_logger(__name__)

DEGRADED = "recall is lexical only; writes are stored and queued for embedding until the provider answers"


class Readiness(NamedTuple):
    """What `/readyz` reports of the store: its schema, and with GRANDBO_READYZ_COUNTS (else 0) every org's embed
    jobs and write-behinds together, each as those waiting and those that used their attempts (failed: parked until
    `grandbo backfill`). Two queries whatever the number of orgs, or one without the counts; never an org's own."""

    schema: int
    embed_waiting: int = 0  # jobs under GRANDBO_EMBED_MAX_ATTEMPTS, leased or not (the unembeddable are settled)
    embed_failed: int = 0
    write_behinds: int = 0
    write_behinds_failed: int = 0

    def counts(self) -> dict[str, int]:
        """The store's counts as `/readyz` names them."""
        return {"outbox": self.embed_waiting, "outbox_failed": self.embed_failed,
                "write_behinds": self.write_behinds, "write_behinds_failed": self.write_behinds_failed}  # fmt: skip


class Health:
    """Whether the embedding provider answered the last time this process asked it (the start's warm-up, a
    probe), and whether the store refuses writes (`refused_writes`); safe across threads."""

    def __init__(self, probe_every_s: float, provider: Callable[[], Provider], store: object) -> None:
        self.probe_every_s = probe_every_s
        self._provider, self._store = provider, store
        self._lock = threading.Lock()
        self._error: EmbeddingError | None = None
        self._since: datetime | None = None
        self._probed_at = float("-inf")
        self._probing = False

    def refused_writes(self) -> GrandboError | None:
        """Why the store refuses writes now (the embedded store's disk is full: `/readyz` says so), or None."""
        refused = getattr(self._store, "refused_writes", None)  # the embedded store's; Postgres answers 503
        return refused if isinstance(refused, GrandboError) else None

    def warm_up(self) -> bool:
        """Ask the provider for one query embedding now (a local model loads its sessions): True when it answered.
        One that does not (EmbeddingError: an HTTP error, a timeout, a refused connection) is recorded as degraded,
        not raised: the process serves lexical recall and queues embeddings until a probe finds it answering
        again. A configuration error (a model not prepared) is still raised."""
        try:
            self._probe()
        except EmbeddingError as error:
            self.failed(error)
            return False
        self.answered()
        return True

    def _probe(self) -> None:
        provider = self._provider()
        if isinstance(provider, QueryBatcher):
            provider.warm()
        # Checked as recall checks it: a provider that answers, but with vectors of another dimension or not
        # finite, is no better than one that does not.
        embed_checked(provider, ["warm up the query model"], "query")

    def for_recall(self) -> Provider:
        """The provider recall embeds its topic with; while it is known not to answer, an error at once (recall
        answers lexically, with a note, instead of waiting a timeout per query) and a probe."""
        if (error := self._error) is not None:
            self.probe_if_due(self._probe)
            limited = "retry_after_s" in error.detail
            waits = " and asked to be sent nothing for a while (its Retry-After)" if limited else ""
            raise ProviderUnavailableError(
                f"the embedding provider is not answering ({error.code}){waits}; recall is lexical only until it does",
                detail={"provider_error": error.code},
            )
        return _Watched(self._provider(), self)

    def report(self) -> dict[str, Any]:
        """What `/readyz` shows (`state`); while degraded, a probe is started."""
        self.probe_if_due(self._probe)
        return self.state()

    def answered(self) -> None:
        with self._lock:
            was, self._error, self._since = self._error, None, None
        if was is not None:
            log.warning("provider.recovered", degraded_because=was.code)

    def failed(self, error: EmbeddingError) -> None:
        with self._lock:
            first = self._error is None
            self._error = error
            self._since = self._since or datetime.now(UTC)
            self._probed_at = time.monotonic()
        if first:
            log.warning("provider.degraded", code=error.code, error=error.message, effect=DEGRADED)

    def error(self) -> EmbeddingError | None:
        return self._error

    def state(self) -> dict[str, Any]:
        """What `/readyz` shows: `ok`, and while degraded, since when, why and what it means."""
        with self._lock:
            error, since = self._error, self._since
        if error is None:
            return {"ok": True}
        return {"ok": False, "degraded": DEGRADED, "error": error.code, "message": error.message,
                "since": since.isoformat() if since else None}  # fmt: skip

    def probe_if_due(self, probe: Callable[[], None]) -> None:
        """While degraded, run `probe` (it raises EmbeddingError when the provider still fails) on a thread of its
        own, one at a time and at most every `probe_every_s`; the caller never waits for it."""
        with self._lock:
            now = time.monotonic()
            if self._error is None or self._probing or now - self._probed_at < self.probe_every_s:
                return
            self._probing, self._probed_at = True, now

        def run() -> None:
            try:
                probe()
            except EmbeddingError as error:
                self.failed(error)
            except Exception as error:  # a probe never takes the process down; the log says what happened
                log.warning("provider.probe_failed", error=f"{type(error).__name__}: {error}"[:300])
            else:
                self.answered()
            finally:
                with self._lock:
                    self._probing = False

        threading.Thread(target=run, name="grandbo-provider-probe", daemon=True).start()


class _Watched:
    """The provider recall embeds its topic with, watched: an answer it cannot use (no answer, an error, vectors of
    another dimension or not finite) makes the process degraded from then on, as a failed warm-up does, so that
    `/readyz` says so and the next recalls go lexical at once; a probe finds when it answers well again."""

    def __init__(self, inner: Provider, health: Health) -> None:
        self._inner, self._health = inner, health
        self.name, self.model, self.dimension = inner.name, inner.model, inner.dimension
        self.min_similarity = inner.min_similarity

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> Vectors:
        try:
            checked = embed_checked(self._inner, texts, purpose)
        except EmbeddingError as error:
            if not error.detail.get("topic_only"):  # a slow topic's own timeout is no sign of the provider's state
                self._health.failed(error)
            raise
        # An all-zero vector (a text with nothing to embed) is the provider's honest answer: handed on as it came.
        return [v if v is not None else np.zeros(self.dimension, dtype=np.float32) for v in checked]
