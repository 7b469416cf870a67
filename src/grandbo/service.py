"""Grandbo: a store, its embedding provider and the embed worker, handing out OrgMemory seams."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

import structlog

from grandbo.config import Settings
from grandbo.embeddings.base import Provider, get_provider, space_of
from grandbo.errors import ConfigError, GrandboError, ProviderMismatchError
from grandbo.memory import OrgMemory, run_guarded
from grandbo.model import ORG_ID_PATTERN, EmbeddingSpace
from grandbo.store import Store, open_store
from grandbo.worker import DrainReport, EmbedWorker

log = structlog.get_logger(__name__)


def _mismatch(recorded: EmbeddingSpace, wanted: str) -> ProviderMismatchError:
    return ProviderMismatchError(
        f"This store was created with the embedding space {recorded}, not {wanted!r}. Vectors of two "
        f"spaces never mix: keep {recorded.provider!r}, or migrate with `grandbo reembed --embedding {wanted}` "
        "(re-embeds every entry).",
        detail={"store_space": str(recorded), "requested": wanted},
    )


class Grandbo:
    """An open store and the provider it was created with."""

    def __init__(self, settings: Settings, store: Store, *, background: bool = False) -> None:
        self.settings = settings
        self.store = store
        self.background = background
        self._lock = threading.Lock()
        self._provider: Provider | None = None
        self._worker: EmbedWorker | None = None
        self._behind: ThreadPoolExecutor | None = (
            ThreadPoolExecutor(max_workers=2, thread_name_prefix="grandbo-write-behind") if background else None
        )
        self._pending: set[Future[None]] = set()

    @classmethod
    def open(
        cls, settings: Settings | None = None, *, embedding: str | None = None, background: bool = False
    ) -> Grandbo:
        """Open an initialized store. Naming a provider other than the store's is refused."""
        settings = settings or Settings()
        store = open_store(settings.store_url, settings)
        space = store.space()
        if space is None:
            store.close()
            raise ConfigError(
                f"The store at {settings.store_url.split('@')[-1]} is not initialized. Run "
                "`grandbo init --embedding NAME` first (NAME: deterministic, local, bedrock, voyage, openai).",
                detail={"store": settings.store_url.split("@")[-1]},
            )
        wanted = embedding or settings.embedding_provider
        if wanted and wanted != space.provider:
            store.close()
            raise _mismatch(space, wanted)
        grandbo = cls(settings, store, background=background)
        try:
            grandbo.provider()  # a changed model or dimension is refused now, not at the first embedding
        except ProviderMismatchError:
            grandbo.close()
            raise
        except GrandboError:
            pass  # e.g. a model not prepared yet: reported when embedding is needed; lexical work goes on
        return grandbo

    @classmethod
    def init(
        cls, settings: Settings | None = None, *, embedding: str | None = None, provider: Provider | None = None
    ) -> Grandbo:
        """Create (or reopen) a store recording the embedding space of the named provider.

        `provider` hands in an already built provider (a cache around one, say) instead of the registry's.
        """
        settings = settings or Settings()
        name = provider.name if provider else embedding or settings.embedding_provider
        store = open_store(settings.store_url, settings)
        recorded = store.space()
        if recorded is not None and name and name != recorded.provider:
            store.close()
            raise _mismatch(recorded, name)
        try:
            provider = provider or get_provider(name, settings)
        except GrandboError:
            store.close()
            raise
        if recorded is None:
            store.initialize(space_of(provider))
        elif recorded != space_of(provider):
            store.close()
            raise _mismatch(recorded, provider.name)
        grandbo = cls(settings, store)
        grandbo._provider = provider
        return grandbo

    @property
    def space(self) -> EmbeddingSpace:
        space = self.store.space()
        assert space is not None
        return space

    def provider(self) -> Provider:
        """The store's provider, created on first use and checked against the recorded space."""
        with self._lock:
            if self._provider is None:
                space = self.space
                provider = get_provider(space.provider, self.settings)
                if space_of(provider) != space:
                    raise ProviderMismatchError(
                        f"The {space.provider!r} provider is configured as {space_of(provider)} but the store "
                        f"holds vectors of {space}. Restore the configuration (model, dimension), or migrate "
                        f"with `grandbo reembed --embedding {space.provider}`.",
                        detail={"store_space": str(space), "configured": str(space_of(provider))},
                    )
                self._provider = provider
            return self._provider

    def worker(self) -> EmbedWorker:
        with self._lock:
            if self._worker is None:
                self._worker = EmbedWorker(self.store, self._provider_unlocked(), self.settings)
                if self.background:
                    self._worker.start()
            return self._worker

    def _provider_unlocked(self) -> Provider:
        self._lock.release()
        try:
            return self.provider()
        finally:
            self._lock.acquire()

    def org(self, org_id: str | None = None, *, create: bool = True) -> OrgMemory:
        """The memory seam of one organization (created on first use unless `create` is False)."""
        org_id = org_id or self.settings.org
        if not ORG_ID_PATTERN.fullmatch(org_id):
            raise ConfigError(
                f"Invalid organization id {org_id!r}: use lowercase letters, digits, '-' or '_' (at most 63).",
                detail={"org_id": org_id},
            )
        if create:
            self.store.ensure_org(org_id)
        return OrgMemory(
            self.store, org_id, self.settings, self.provider, self.worker, background=self.background, defer=self._defer
        )

    def _defer(self, task: Callable[[], None]) -> None:
        if self._behind is None:
            run_guarded(task)
            return
        future = self._behind.submit(run_guarded, task)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._pending.discard)

    def flush(self, timeout: float | None = None) -> None:
        """Wait for deferred write-behind work to finish (it never raises)."""
        with self._lock:
            pending = list(self._pending)
        wait(pending, timeout=timeout)

    def reembed(self, embedding: str, *, every_entry: bool = False) -> tuple[int, DrainReport]:
        """Switch the store to a provider's space and embed every active entry lacking a vector in it.

        `every_entry` re-embeds everything, current vectors included (say, after a model update that
        kept its name).
        """
        provider = get_provider(embedding, self.settings)
        count = self.store.switch_space(space_of(provider), every_entry=every_entry)
        with self._lock:
            if self._worker is not None:
                self._worker.stop()
            self._provider, self._worker = provider, None
        log.info("store.reembed_started", space=str(space_of(provider)), entries=count)
        return count, self.worker().drain()

    def backfill(self) -> DrainReport:
        """Embed everything pending in every org, failed jobs included."""
        self.store.retry_failed()
        self.store.enqueue_missing()
        return self.worker().drain()

    def close(self) -> None:
        if self._behind is not None:
            self.flush(timeout=60)
            self._behind.shutdown(wait=True)
        if self._worker is not None:
            self._worker.stop()
        self.store.close()

    def __enter__(self) -> Grandbo:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
