"""Grandbo: the service factory. It opens a store, its embedding provider and the embed worker, keeps the
search indexes above the store, and hands out org-bound handles (`OrgMemory`).

This module and `grandbo.store` are the only ones that know a store exists: each handle gets repositories
bound to its organization, the search side gets the store's change feed, the worker its outbox.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import cast

import structlog

from grandbo.background import Background
from grandbo.config import Settings
from grandbo.embeddings.base import Provider, get_provider, space_mismatch, space_of
from grandbo.embeddings.batching import store_provider
from grandbo.errors import ConfigError, GrandboError, NotAuthorizedError, NotFoundError, ProviderMismatchError
from grandbo.files import backup_target, not_a_folder
from grandbo.health import Health, Readiness
from grandbo.http import closing
from grandbo.incarnation import AFTER_KEY, WHILE_RUNNING, Incarnation
from grandbo.llm import LLMClient, client_from
from grandbo.memory import OrgMemory
from grandbo.model import ORG_ID_PATTERN, EmbeddingSpace
from grandbo.ports import VectorSearch
from grandbo.ratelimit import RateLimits
from grandbo.redrive import Redriver
from grandbo.retrieval.keeper import IndexKeeper
from grandbo.retrieval.policy import RankingPolicy
from grandbo.retrieval.search import OrgSearch
from grandbo.retrieval.text import index_terms
from grandbo.store import Store, open_store
from grandbo.store.scoped import ScopedDocuments, ScopedEntries, ScopedWork, confirming
from grandbo.tiers.key_cache import Verified, VerifiedKeys
from grandbo.tiers.keys import ApiKey, org_of, verify_key
from grandbo.tiers.operations import Snapshots
from grandbo.unerased import Unerased
from grandbo.urls import mask_url
from grandbo.worker import DrainReport, EmbedWorker

log = structlog.get_logger(__name__)


def _checked_org(org_id: str) -> str:
    if not ORG_ID_PATTERN.fullmatch(org_id):
        message = f"Invalid organization id {org_id!r}: use lowercase letters, digits, '-' or '_' (at most 63)."
        raise ConfigError(message, detail={"org_id": org_id})
    return org_id


def _store(settings: Settings) -> Store:
    return open_store(settings.store_url, index_terms, settings)


class Grandbo:
    """An open store and the provider it was created with."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        background: bool = False,
        batch_queries: bool = False,
        embed_here: bool = True,
        write_behind: bool | None = None,
    ) -> None:
        self.settings = settings
        self.policy = RankingPolicy.from_settings(settings)  # how every organization's recall ranks
        self.batch_queries = batch_queries
        self._store = store
        self.background = background
        self.embed_here = embed_here
        self._verified = VerifiedKeys(settings.key_cache_seconds)
        # Every per-process cache of an org is keyed by its generation (the epoch), never by its name alone: an
        # index started for a new generation tells the key cache, so a dropped org's keys die with it here too.
        memory_bytes, lazy = settings.index_memory_mb << 20, store.searches_vectors
        self._keeper = IndexKeeper(store, max_bytes=memory_bytes, seen=self._verified.seen, lazy_vectors=lazy)
        self._snapshots = Snapshots()
        self._known: set[str] = set()
        self._lock = threading.Lock()
        self._provider: Provider | None = None
        self._worker: EmbedWorker | None = None
        self.pools = Background(settings, threads=background if write_behind is None else write_behind)
        self.redriver = Redriver(store, settings, self.org, start=self.pools.behind is not None)  # from start-up on
        self.rate_limits = RateLimits.of(settings)
        self._llm: LLMClient | None = None
        self._owns_provider = True  # False for one handed to `init`: its caller closes it
        self.health = Health(settings.provider_probe_seconds, self.provider, store)  # what /readyz reports

    @classmethod
    def open(
        cls, settings: Settings | None = None, *, embedding: str | None = None, background: bool = False,
        batch_queries: bool = False, embed_here: bool = True, write_behind: bool | None = None,
    ) -> Grandbo:  # fmt: skip
        """Open an initialized store. Naming a provider other than the store's is refused.

        A long-running process (a server) passes `background` (embedding and write-behinds on background
        threads) and `batch_queries` (query embeddings of concurrent requests sent to the model together).
        A server whose embedding runs in `grandbo worker` processes passes `embed_here=False`: its writes
        leave their jobs in the outbox, and no embed worker starts in it. `write_behind` runs write-behinds on
        background threads whatever `background` says (a long-running process that embeds inline).
        """
        settings = settings or Settings()
        where = mask_url(settings.store_url).split("@")[-1]
        elsewhere = "" if settings.database_url else (  # `GRANDBO_HOME=DIR make demo` made one under DIR
            f" A store made under another GRANDBO_HOME (this is {settings.home}) is read with it set.")  # fmt: skip
        uninitialized = ConfigError(f"The store at {where} is not initialized. Run `grandbo init --embedding NAME` "
                                    f"first (NAME: deterministic, local, bedrock, voyage, openai).{elsewhere}",
                                    detail={"store": where})  # fmt: skip
        url = settings.store_url
        if url.startswith("sqlite:///") and not (path := Path(url.removeprefix("sqlite:///")).expanduser()).exists():
            file = not_a_folder(path)  # GRANDBO_HOME a file: said so, not "run init", which fails; nothing created
            raise uninitialized if file is None else ConfigError(f"{file} is a file: point GRANDBO_HOME at a folder.")
        store = _store(settings)
        try:  # a store that went away after its first connection does not leave its pool behind either
            if (space := store.space()) is None:
                raise uninitialized
            if (wanted := embedding or settings.embedding_provider) and wanted != space.provider:
                raise space_mismatch(space, wanted)
        except BaseException:
            store.close()
            raise
        grandbo = cls(settings, store, background=background, batch_queries=batch_queries, embed_here=embed_here,
                      write_behind=write_behind)  # fmt: skip
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
        store = _store(settings)
        recorded = store.space()
        if recorded is not None and name and name != recorded.provider:
            store.close()
            raise space_mismatch(recorded, name)
        try:
            provider = provider or get_provider(name, settings)
        except GrandboError:
            store.close()
            raise
        if recorded is None:
            store.initialize(space_of(provider))
        elif recorded != space_of(provider):
            store.close()
            raise space_mismatch(recorded, provider.name)
        grandbo = cls(settings, store)
        grandbo._provider, grandbo._owns_provider = provider, False
        return grandbo

    @property
    def url(self) -> str:
        """Where the store is (without a password)."""
        return self._store.url

    @property
    def space(self) -> EmbeddingSpace:
        space = self._store.space()
        assert space is not None
        return space

    def schema_versions(self) -> list[int]:
        return self._store.schema_versions()

    def readiness(self, counts: bool = True) -> Readiness:
        """Schema version, embed jobs and write-behinds waiting and failed (0 without `counts`): two queries, or one."""
        schema, waiting, failed = self._store.readiness(counts, self.settings.embed_max_attempts)
        return Readiness(schema, waiting, failed, *(self.redriver.counts() if counts else (0, 0)))

    @staticmethod
    def migrate(settings: Settings | None = None) -> list[int]:
        """Open the configured store, applying pending migrations; return its schema versions."""
        with contextlib.closing(_store(settings or Settings())) as store:
            return store.schema_versions()

    @staticmethod
    def initialized(settings: Settings | None = None) -> bool:
        """Whether the configured store exists and records an embedding space."""
        with contextlib.closing(_store(settings or Settings())) as store:
            return store.space() is not None

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        """Within: writes with vectors skip the per-batch check for an org's vector index (Postgres), which
        counts up to the index threshold after every batch; build it afterwards (`build_vector_index`)."""
        previous = getattr(self._store, "auto_index", None)
        if previous is None:
            yield
            return
        setattr(self._store, "auto_index", False)  # noqa: B010 (a Postgres-only knob)
        try:
            yield
        finally:
            setattr(self._store, "auto_index", previous)  # noqa: B010

    def backup(self, path: Path) -> str | None:
        """A consistent copy of the whole store at `path` (`Store.backup`); returns what one cut short left, removed."""
        swept = backup_target(path)
        self._store.backup(path)
        return swept

    def restore(self, path: Path) -> Path | None:
        """Replace the whole store with the backup at `path`; return where the replaced store is kept (embedded
        store). Stop other writers first (on Postgres, restart every other Grandbo process afterwards)."""
        before = self._store.orgs()
        kept = self._store.restore(path)
        self._known.clear()
        # The in-process indexes and snapshots of the replaced store are not the backup's.
        for org_id in {*before, *self._store.orgs()}:
            self._keeper.forget(org_id)
            self._snapshots.forget(org_id)
        return kept

    def build_vector_index(self, org_id: str) -> bool:
        """Build the org's approximate vector index now (Postgres HNSW); False where the store has none."""
        build = getattr(self._store, "ensure_vector_index", None)
        return bool(build(_checked_org(org_id), force=True)) if build is not None else False

    def provider(self) -> Provider:
        """The store's provider, created on first use and checked against the recorded space."""
        with self._lock:
            if self._provider is None:
                self._provider = store_provider(self.space, self.settings, batch_queries=self.batch_queries)
            return self._provider

    def provider_made(self) -> Provider | None:
        """The provider if it is made already, else None: nothing built, no lock waited for (an event loop's ask)."""
        return self._provider

    def worker(self) -> EmbedWorker:
        with self._lock:
            if self._worker is None:
                self._worker = EmbedWorker(self._store, self._provider_unlocked(), self.settings)
                if self.background and self.embed_here:  # else built only to drain on demand (strict, backfill)
                    self._worker.start()
            return self._worker

    def _provider_unlocked(self) -> Provider:
        self._lock.release()
        try:
            return self.provider()
        finally:
            self._lock.acquire()

    def org(
        self, org_id: str | None = None, *, create: bool = False, incarnation: int | None = None,
        why: tuple[str, str] = WHILE_RUNNING,
    ) -> OrgMemory:  # fmt: skip
        """The org-bound handle of one organization. An organization that does not exist is refused,
        unless `create` asks for it to be created. Made per call, never kept; its writes stay with the org its
        first write (or `OrgMemory.pin`) found, never one created again under its name (`grandbo.incarnation`).
        `incarnation`: the org's, known already (a re-driven piece of work's): the handle reads and writes that
        one or nothing (OrgDroppedError, whose message says `why`)."""
        org_id = _checked_org(self.settings.org if org_id is None else org_id)  # "" is no name, not the default
        if org_id not in self._known:
            if create:
                self._ensure(org_id)
            elif org_id not in self._store.orgs():
                raise NotFoundError(
                    f"No organization {org_id!r} in this store. Check the name (known: "
                    f"{', '.join(self._store.orgs()[:10]) or 'none yet'}), or create it with "
                    f"`grandbo orgs create {org_id}`.",
                    detail={"org_id": org_id},
                )
            self._known.add(org_id)
        pinned = Incarnation(org_id, partial(self._store.incarnation, org_id), incarnation, why)
        store = confirming(self._store, pinned)  # a known incarnation is read again before the first read
        entries = ScopedEntries(store, org_id, pinned)
        native = cast(VectorSearch, store) if self._store.searches_vectors else None
        documents = ScopedDocuments(store, org_id, self.settings.write_behind_grace_seconds, pinned)
        search = OrgSearch(self._keeper, org_id, entries.get_many, native, pinned.seen, documents.reading)
        return OrgMemory(
            org_id,
            self.settings,
            self.policy,
            entries,
            documents,
            search,
            self._snapshots,
            self.health.for_recall,
            self.worker,
            background=self.background,
            embed_here=self.embed_here,
            pools=self.pools,
            llm=self.llm,
            work=ScopedWork(store, org_id),
            verified=self._verified,
            incarnation=pinned,
            unerased=Unerased(org_id, partial(self._store.erasures, org_id)),  # a count: no read of the org
        )

    def authenticate(self, key: str, *, fresh: bool = False) -> tuple[OrgMemory, ApiKey]:
        """The handle of the organization an API key belongs to, and the key's record; the organization comes
        from the key alone. Unknown, malformed and revoked keys are refused alike (NotAuthorizedError), so a
        caller learns nothing about which organizations exist. `fresh`: read from the store even when this process
        verified the key a moment ago (an admin's request: a key revoked through another process is refused)."""
        refused = NotAuthorizedError(
            "Missing, unknown or revoked API key. Send `Authorization: Bearer <key>` with a key made by "
            "`grandbo keys create --org ORG --scope read|write|admin`.",
            detail={},
        )
        org_id = org_of(key)
        if org_id is None:  # not shaped like a key: the shape is public, nothing to hide
            raise refused
        # The key is checked before anything asks whether its organization exists, and a refusal does the
        # same work whichever it is (an unknown org's key reads its incarnation and the record it does not have,
        # and is compared with a hash no key has), so its time does not tell which organizations exist.
        read = partial(self._store.incarnation, org_id)
        found = verify_key(ScopedDocuments(self._store, org_id), self._verified, key, fresh=fresh, incarnation=read)
        if found is None or found.incarnation is None:  # no org: the key was of one dropped since
            raise refused
        try:
            return self._keyed(org_id, found), found.record
        except NotFoundError:
            raise refused from None

    def held(self, key: str) -> tuple[OrgMemory, ApiKey] | None:
        """`authenticate` from memory alone (a key this process verified a moment ago, of an org it has open),
        or None where that needs the store: it neither reads nor refuses, so an event loop may ask."""
        org_id, found = org_of(key), self._verified.held(key)
        if found is None or found.incarnation is None or org_id not in self._known:
            return None
        return self._keyed(org_id, found), found.record

    def _keyed(self, org_id: str, found: Verified) -> OrgMemory:
        """The handle a key opens: of the incarnation of the org the key was read in, which it reads again before
        its first read (`store.scoped.confirming`): a key of a dropped org never acts on one created again under
        its name, even one this process has not read yet, nor does a request that waited its turn meanwhile."""
        return self.org(org_id, incarnation=found.incarnation, why=AFTER_KEY)

    def orgs(self) -> list[str]:
        """Every organization of the store, by name."""
        return self._store.orgs()

    def org_created(self) -> dict[str, datetime]:
        """Every organization with the time it was created (what tells a stale evaluation org)."""
        return self._store.org_created()

    def create_org(self, org_id: str) -> bool:
        """Create an organization; return False when it existed already. Told by the store's insert itself: of two
        creates at once, in any processes, one returns True."""
        org_id = _checked_org(org_id)
        made = self._ensure(org_id)
        self._known.add(org_id)
        return made

    def _ensure(self, org_id: str) -> bool:
        """Create the org if it does not exist (True: this call made it); one dropped under the name less than
        GRANDBO_KEY_CACHE_SECONDS ago, once that long has passed (a process may trust the old org's keys till then:
        probe 16, a reset within 0.1 s; the store records only the drop of an org that had a key, `since_dropped`). A
        drop recorded between that read and the create (a create racing the drop) is waited out after the create; the
        org's incarnation refuses the old org's keys meanwhile (`grandbo.incarnation`)."""
        if (wait := self._drop_wait(org_id)) > 0 and org_id not in self._store.orgs():
            time.sleep(wait)
        made = self._store.ensure_org(org_id)  # True: this call's insert made it
        if made and (wait := self._drop_wait(org_id)) > 0:
            time.sleep(wait)
        return made

    def _drop_wait(self, org_id: str) -> float:
        """How long a key cache may still hold a key of an org dropped under the name (0: none dropped lately)."""
        since = self._store.since_dropped(org_id)  # a moment more: a key read just before the drop is kept after it
        return self.settings.key_cache_seconds + 0.25 - since if since is not None else 0.0

    def drop_org(self, org_id: str) -> None:
        """Delete an organization and everything it holds."""
        try:
            self._store.drop_org(_checked_org(org_id))
        finally:  # a drop cut short may have taken the org already (the embedded store drops in steps)
            for forget in (self._known.discard, self._keeper.forget, self._snapshots.forget):
                forget(org_id)
            self._verified.forget()  # its keys die with it

    def llm(self) -> LLMClient | None:
        """The configured LLM client (GRANDBO_LLM_*), built once per process and closed with it; None when
        there is none (ConfigError when its configuration is incomplete)."""
        with self._lock:
            if self._llm is None:
                self._llm = client_from(self.settings)
            return self._llm

    def flush(self, timeout: float | None = None) -> None:
        """Wait for deferred write-behind work to finish (it never raises)."""
        self.pools.flush(timeout)

    def reembed(self, embedding: str, *, every_entry: bool = False) -> tuple[int, DrainReport]:
        """Switch the store to a provider's space and embed every active entry lacking a vector in it.

        `every_entry` re-embeds everything, current vectors included (say, after a model update that
        kept its name).
        """
        provider = get_provider(embedding, self.settings)
        count = self._store.switch_space(space_of(provider), every_entry=every_entry)
        count += self._store.requeue_unembeddable()  # a text one model has no vector for, another may
        with self._lock:
            if self._worker is not None:
                self._worker.stop()
            if self._owns_provider:
                closing(self._provider)
            self._provider, self._worker, self._owns_provider = provider, None, True
        log.info("store.reembed_started", space=str(space_of(provider)), entries=count)
        return count, self.worker().drain()

    def backfill(self) -> DrainReport:
        """Embed everything pending in every org, failed jobs included."""
        self._store.retry_failed()
        self._store.enqueue_missing()
        return self.worker().drain()

    def close(self) -> None:
        """Finish the acknowledged background work, stop every thread, close the provider's and the LLM's HTTP
        clients, then the store."""
        self.redriver.stop()
        self.pools.close()
        if self._worker is not None:
            self._worker.stop()
        self._keeper.close()  # its last index images are saved before the store closes
        if self._owns_provider:
            closing(self._provider)
        closing(self._llm)
        self._provider = self._llm = None
        self._store.close()

    def __enter__(self) -> Grandbo:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
