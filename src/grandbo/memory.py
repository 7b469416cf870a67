"""OrgMemory: the org-bound handle, the one door to an organization's memory.

`Grandbo.org(ORG)` returns it, bound to that organization: the read seam (`recall`), the write seam
(`remember`, `correct`, `retire`) and every tier (incidents, runbooks and their ledger, the catalog,
settings, the profile, learning, the context block, import and export). It holds no store and takes no
organization anywhere: what it reads and writes goes through repositories already bound to its org
(`grandbo.ports`), so one organization's handle cannot reach another's memory. Every interface (CLI,
API, MCP, web) and every tier goes through it, so a change to relevance or to the write contract
happens once, for everybody.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog

from grandbo.config import Settings
from grandbo.embeddings.base import Provider
from grandbo.errors import InvalidInputError, NotFoundError, StrictModeError
from grandbo.llm import LLMClient, client_from
from grandbo.model import (
    Arm,
    CorpusStats,
    EmbeddingSpace,
    Entry,
    Event,
    EventType,
    NewEntry,
    RecallResult,
    Severity,
    Source,
    parse_entry,
    utcnow,
)
from grandbo.ports import NewEvent, OrgDocuments, OrgEntries
from grandbo.retrieval.keeper import OrgSearch
from grandbo.retrieval.recall import MAX_K, Recall
from grandbo.tiers.alerts import Alerts
from grandbo.tiers.context import ContextBlock, build
from grandbo.tiers.incidents import Incidents
from grandbo.tiers.keys import Keys, WebhookSecrets
from grandbo.tiers.learning import Learning
from grandbo.tiers.operations import Snapshots
from grandbo.tiers.profile import Profiles
from grandbo.tiers.runbooks import Catalog, Ledger, OrgSettings, Runbooks
from grandbo.tiers.transfer import ImportReport, export_file, import_file
from grandbo.worker import DrainReport, EmbedWorker

log = structlog.get_logger(__name__)


def run_guarded(task: Callable[[], None]) -> None:
    """Run a deferred task now; log its failure instead of raising it."""
    try:
        task()
    except Exception as error:
        log.warning("memory.deferred_task_failed", error=f"{type(error).__name__}: {str(error)[:300]}")


def new_entry_id() -> str:
    """A time-ordered, collision-resistant id: mem-<ms since epoch, hex>-<random>."""
    return f"mem-{time.time_ns() // 1_000_000:011x}-{secrets.token_hex(4)}"


class OrgMemory:
    """One organization's memory. Construct through `Grandbo.org()`."""

    def __init__(
        self,
        org: str,
        settings: Settings,
        entries: OrgEntries,
        documents: OrgDocuments,
        search: OrgSearch,
        snapshots: Snapshots,
        provider: Callable[[], Provider],
        worker: Callable[[], EmbedWorker],
        *,
        background: bool = False,
        defer: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self._org = org
        self._settings = settings
        self._entries = entries
        self._documents = documents
        self._search = search
        self._worker = worker
        self._background = background
        self._defer = defer or run_guarded
        self._recall = Recall(
            org, search, settings, provider, lambda version: snapshots.get(org, documents, version), self.stats
        )

    @property
    def org(self) -> str:
        """The organization this handle is bound to."""
        return self._org

    @property
    def space(self) -> EmbeddingSpace | None:
        """The store's embedding space (every vector of the store is of it)."""
        return self._entries.space()

    # ------------------------------------------------------------------ tiers

    @cached_property
    def incidents(self) -> Incidents:
        return Incidents(self, self._documents)

    @cached_property
    def runbooks(self) -> Runbooks:
        return Runbooks(self)

    @cached_property
    def ledger(self) -> Ledger:
        return Ledger(self, self._documents)

    @cached_property
    def catalog(self) -> Catalog:
        return Catalog(self._documents)

    @cached_property
    def settings(self) -> OrgSettings:
        """The organization's settings (re-ranking weights)."""
        return OrgSettings(self._documents)

    @cached_property
    def keys(self) -> Keys:
        """The organization's API keys (hashes only)."""
        return Keys(self, self._documents)

    @cached_property
    def webhook_secrets(self) -> WebhookSecrets:
        return WebhookSecrets(self._documents)

    @cached_property
    def alerts(self) -> Alerts:
        """Alerts the webhooks received, each with its recall result."""
        return Alerts(self._documents)

    @cached_property
    def profile(self) -> Profiles:
        return Profiles(self._documents)

    @cached_property
    def learning(self) -> Learning:
        """Edit signals and learned notes, classified by the configured LLM (GRANDBO_LLM_*) or the rules."""
        return self.learning_with(client_from(self._settings))

    def learning_with(self, llm: LLMClient | None) -> Learning:
        """Edit signals and learned notes, classified by `llm` (None: the rules alone)."""
        return Learning(self, self._documents, llm)

    def context(
        self, *, content_type: str | None = None, topic: str | None = None, budget: int = 4000, k: int = 5
    ) -> ContextBlock:
        """The block an agent's system prompt gets: profile and learned notes; with `topic`, recall after it."""
        return build(self, content_type=content_type, topic=topic, budget=budget, k=k)

    def import_file(self, path: Path, *, strict: bool = False, actor: str = "import") -> ImportReport:
        """Import a JSONL file of entries; bad lines and ids that already exist are reported, not fatal."""
        return import_file(self, path, strict=strict, actor=actor)

    def export_file(self, path: Path) -> int:
        """Write the active entries with their vectors as JSONL; return how many."""
        return export_file(self, path)

    # ------------------------------------------------------------------ writes

    def remember(self, entry: NewEntry | Mapping[str, Any], *, actor: str = "api") -> Entry:
        """Store one entry; its vector follows after commit."""
        return self.remember_many([entry], actor=actor)[0]

    def remember_many(
        self,
        entries: Iterable[NewEntry | Mapping[str, Any]],
        *,
        actor: str = "api",
        strict: bool = False,
        vectors: Sequence[npt.ArrayLike | None] | None = None,
    ) -> list[Entry]:
        """Store entries in one transaction, then embed them.

        With `strict`, anything short of a vector for every entry raises StrictModeError (the entries
        are stored all the same); without it, embedding problems are logged and left to backfill.
        `vectors` (aligned with `entries`, None where absent) are precomputed vectors of the store's
        embedding space, written in the same transaction instead of being computed again; use them
        only for vectors that space's provider produced (an export of a store with the same space).
        """
        now = utcnow()
        items = entries if isinstance(entries, Sequence) else list(entries)
        events = [self._remembered(parse_entry(item), now, actor) for item in items]
        given = self._checked_vectors(events, vectors) if vectors is not None else {}
        stored = self._entries.append(events, given)
        if len(given) < len(stored):
            self._after_write(strict=strict, expected=len(stored))
        return stored

    def _checked_vectors(
        self, events: Sequence[NewEvent], vectors: Sequence[npt.ArrayLike | None]
    ) -> dict[str, npt.NDArray[np.float32]]:
        space = self._entries.space()
        if len(vectors) != len(events) or space is None:
            raise InvalidInputError(
                f"{len(vectors)} vectors for {len(events)} entries: give one per entry (None where absent).",
                detail={"vectors": len(vectors), "entries": len(events)},
            )
        present = [(position, vector) for position, vector in enumerate(vectors) if vector is not None]
        if not present:
            return {}
        try:  # the common case, checked as one matrix
            matrix = np.asarray([vector for _, vector in present], dtype=np.float32)
            valid = matrix.shape == (len(present), space.dimension) and bool(np.isfinite(matrix).all())
        except (TypeError, ValueError):  # ragged or not numbers: find the culprit below
            valid = False
        if not valid:
            for position, vector in present:
                try:
                    array = np.asarray(vector, dtype=np.float32)
                    shape = str(array.shape)
                    fine = array.shape == (space.dimension,) and bool(np.isfinite(array).all())
                except (TypeError, ValueError):
                    shape, fine = "unknown (not numbers)", False
                if not fine:
                    raise InvalidInputError(
                        f"Vector {position} has shape {shape} or non-finite values; this store's space is "
                        f"{space}, so each vector must be {space.dimension} finite numbers.",
                        detail={"position": position, "dimension": space.dimension},
                    )
            raise InvalidInputError(  # unreachable: some vector above is the culprit
                f"The vectors do not form a {len(present)} x {space.dimension} matrix of finite numbers.",
                detail={"dimension": space.dimension},
            )
        return {events[position].entry_id: row for (position, _), row in zip(present, matrix, strict=True)}

    def correct(self, entry_id: str, changes: Mapping[str, Any], *, reason: str = "", actor: str = "api") -> Entry:
        """Supersede an entry with a corrected one; the old one stays in the history.

        `changes` holds the fields that differ (title, body, kind, tags, services, severity,
        occurred_at, meta, id); the rest are carried over from the entry being corrected.
        """
        old = self.get(entry_id)
        carried = old.model_dump(
            include={"title", "body", "kind", "tags", "services", "severity", "occurred_at", "meta"}
        )
        unknown = set(changes) - set(carried) - {"id"}
        if unknown:
            raise InvalidInputError(
                f"Cannot correct field(s) {sorted(unknown)}; correctable fields are {sorted(set(carried) | {'id'})}.",
                detail={"fields": sorted(unknown)},
            )
        replacement = parse_entry({**carried, **changes, "source": Source.CORRECTION})
        now = utcnow()
        new_event = self._remembered(replacement, now, actor, supersedes=entry_id, reason=reason)
        supersede = NewEvent(
            entry_id, EventType.CORRECTED, {"superseded_by": new_event.entry_id, "reason": reason}, actor, now
        )
        touched = self._entries.append([new_event, supersede])
        self._after_write(strict=False, expected=1)
        return next(entry for entry in touched if entry.id == new_event.entry_id)

    def retire(self, entry_id: str, *, reason: str = "", actor: str = "api") -> Entry:
        """Tombstone an entry: it leaves recall, its history stays."""
        self.get(entry_id)
        (entry,) = self._entries.append([NewEvent(entry_id, EventType.RETIRED, {"reason": reason}, actor, utcnow())])
        return entry

    def _remembered(
        self, entry: NewEntry, now: Any, actor: str, *, supersedes: str | None = None, reason: str = ""
    ) -> NewEvent:
        payload = entry.model_dump(mode="json", exclude={"id"})
        payload["occurred_at"] = (entry.occurred_at or now).isoformat()
        if supersedes:
            payload["supersedes"] = supersedes
            payload["reason"] = reason
        return NewEvent(entry.id or new_entry_id(), EventType.REMEMBERED, payload, actor, now)

    def _after_write(self, *, strict: bool, expected: int) -> None:
        if self._background and not strict:
            self._worker().wake()
            return
        try:
            report = self._worker().drain(self._org)
        except Exception as error:  # the entries are committed; embedding is retried later
            if strict:
                raise
            log.warning("memory.embedding_deferred", org_id=self._org, error=str(error))
            return
        if strict:
            stats = self.stats()
            missing = stats.pending + stats.failed + stats.unreadable
            if missing:
                raise StrictModeError(
                    f"Strict mode: {stats.unreadable} of {stats.total} entries have no vector "
                    f"({stats.pending} pending, {stats.failed} failed; last error: "
                    f"{report.errors[-1] if report.errors else 'none'}). The entries are stored; fix the "
                    "provider and run `grandbo backfill`.",
                    detail={**stats.model_dump(mode="json"), "errors": report.errors[-3:], "expected": expected},
                )

    # ------------------------------------------------------------------ reads

    def defer(self, task: Callable[[], None]) -> None:
        """Run work that must not block or fail the caller (a write-behind): on a background thread in a
        long-running process, right away otherwise; a failure is logged, never raised."""
        self._defer(task)

    def get(self, entry_id: str) -> Entry:
        entry = self.find(entry_id)
        if entry is None:
            raise NotFoundError(
                f"No entry {entry_id!r} in org {self._org!r}.", detail={"entry_id": entry_id, "org_id": self._org}
            )
        return entry

    def find(self, entry_id: str) -> Entry | None:
        """The entry (any status), or None."""
        return self.get_many([entry_id]).get(entry_id)

    def get_many(self, entry_ids: Sequence[str]) -> dict[str, Entry]:
        """Those of the entries that exist (any status), by id."""
        return self._search.entries(self._search.view(), entry_ids)

    def entries(self, *, include_inactive: bool = False) -> list[Entry]:
        """Every entry, oldest first (active ones only unless `include_inactive`)."""
        return self._entries.entries(include_inactive=include_inactive)

    def vectors(self, entry_ids: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        """The current vectors of those entries that have one."""
        return self._entries.vectors(entry_ids)

    def examples(self, content_type: str, limit: int = 5) -> list[Entry]:
        """The newest examples of a content type (entries of kind `example` with meta.content_type).

        No query, so no search: they come back newest first, as entries, with no score at all.
        """
        if not content_type.strip():
            raise InvalidInputError("Name the content type of the examples wanted.", detail={})
        if not 1 <= limit <= MAX_K:
            raise InvalidInputError(f"limit must be between 1 and {MAX_K}, got {limit}.", detail={"limit": limit})
        return self._entries.examples(content_type.strip(), limit)

    def changed_since(self, seq: int) -> tuple[int, list[Entry]]:
        """The entries (any status) that events after sequence number `seq` touched, and the newest event's
        sequence number (`seq` itself when nothing changed): how a cache of entries catches up."""
        events = self._entries.events(None, since_seq=seq)
        if not events:
            return seq, []
        touched = list(dict.fromkeys(event.entry_id for event in events))
        return max(event.seq for event in events), list(self.get_many(touched).values())

    def history(self, entry_id: str) -> list[Event]:
        """Every event that shaped the entry, oldest first."""
        return self._entries.events(entry_id)

    def stats(self) -> CorpusStats:
        return self._entries.stats(self._settings.embed_max_attempts)

    def backfill(self) -> DrainReport:
        """Embed whatever is pending for this org, failed jobs included."""
        self._entries.retry_failed()
        self._entries.enqueue_missing()
        return self._worker().drain(self._org)

    def rebuild(self) -> tuple[int, bool]:
        """Recompute the projection from the event log; return the entry count and whether it matched."""
        before = [e.model_dump(mode="json") for e in self._entries.entries(include_inactive=True)]
        count = self._entries.rebuild()
        after = [e.model_dump(mode="json") for e in self._entries.entries(include_inactive=True)]
        return count, before == after

    def recall(
        self,
        topic: str,
        k: int = 10,
        *,
        arm: Arm | str = Arm.RERANKED,
        services: Sequence[str] | None = None,
        severity: str | Severity | None = None,
        now: datetime | None = None,
    ) -> RecallResult:
        """Ranked, explained memories about `topic`: "has this happened before, and what worked?"

        `topic` must describe the problem in a sentence (mechanism, component, symptom); slugs and
        two-word identifiers are refused. Hybrid recall fuses the lexical and vector arms by RRF;
        re-ranked recall (the default) then orders the fused candidates by the composite score
        (similarity, service topology, severity, runbook win rate, age), says whether anything close
        enough was seen before, and labels each match frequent or rare. `services` and `severity`
        describe the situation (services named in the topic count when `services` is None). Slicing
        to `k` happens last. A failing embedding provider degrades recall to the lexical arm with a
        note; it never fails it.
        """
        return self._recall(topic, k, arm, services, severity, now)
