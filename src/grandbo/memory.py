"""OrgMemory: the org-bound handle, the one door to an organization's memory (`Grandbo.org(ORG)`).

The read seam (`recall`), the write seam (`remember`, `correct`, `retire`, `purge`) and every tier as an attribute. It
holds no store and takes no organization anywhere: it works through repositories bound to its org (`grandbo.ports`),
so one org's handle cannot reach another's memory. Every interface and tier goes through it: a change happens once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog

from grandbo.background import Background, Kind
from grandbo.config import Settings
from grandbo.embeddings.base import Provider
from grandbo.errors import ConfigError, InvalidInputError, NotFoundError
from grandbo.incarnation import Incarnation
from grandbo.llm import LLMClient, RedactingClient
from grandbo.model import (
    Arm,
    CorpusStats,
    EmbeddingSpace,
    EmbeddingState,
    Entry,
    Event,
    EventType,
    NewEntry,
    RecallResult,
    Severity,
    utcnow,
)
from grandbo.pools import Seats
from grandbo.ports import EntryFigures, Listing, NewEvent, OrgDocuments, OrgEntries, OrgWork, RebuildResult
from grandbo.redrive import Leases, run_work
from grandbo.retrieval.policy import RankingPolicy
from grandbo.retrieval.recall import MAX_K, Recall
from grandbo.retrieval.search import OrgSearch
from grandbo.retrieval.shared import SharedRecalls
from grandbo.tiers.alert_groups import AlertGroups
from grandbo.tiers.alerts import Alerts
from grandbo.tiers.catalog import Catalog
from grandbo.tiers.changes import Changes
from grandbo.tiers.context import DEFAULT_BUDGET, ContextBlock, build
from grandbo.tiers.erasure import Erasure
from grandbo.tiers.eventlog import EXPORT_PAGE, ReplayReport, export_log, replay_log
from grandbo.tiers.incidents import Incidents
from grandbo.tiers.key_cache import VerifiedKeys
from grandbo.tiers.keys import Keys, WebhookSecrets
from grandbo.tiers.learning import Learning
from grandbo.tiers.ledger import Ledger
from grandbo.tiers.operations import Snapshot, Snapshots
from grandbo.tiers.org_settings import OrgSettings
from grandbo.tiers.profile import Profiles
from grandbo.tiers.runbooks import Runbooks
from grandbo.tiers.transfer import ImportReport, export_file, import_file
from grandbo.triage.run import Triage
from grandbo.unerased import Unerased
from grandbo.words import folded_content_type
from grandbo.worker import DrainReport, EmbedWorker, embedding_state
from grandbo.writes import Writes

log = structlog.get_logger(__name__)


class OrgMemory:
    """One organization's memory. Construct through `Grandbo.org()`."""

    def __init__(
        self,
        org: str,
        process_settings: Settings,
        policy: RankingPolicy,
        entries: OrgEntries,
        documents: OrgDocuments,
        search: OrgSearch,
        snapshots: Snapshots,
        provider: Callable[[], Provider],
        worker: Callable[[], EmbedWorker],
        *,
        background: bool = False,
        embed_here: bool = True,
        pools: Background,
        llm: Callable[[], LLMClient | None],
        work: OrgWork,
        verified: VerifiedKeys | None = None,
        incarnation: Incarnation | None = None,
        unerased: Unerased,
    ) -> None:
        self._org, self._process_settings, self._policy, self._search = org, process_settings, policy, search
        self._entries, self._documents, self._work = entries, documents, work
        self._worker, self._background, self._embed_here = worker, background, embed_here
        self._pools, self._llm, self._verified, self._incarnation = pools, llm, verified, incarnation
        self.unerased = unerased  # work that copies the org's text into other records runs in it (`grandbo.unerased`)
        self._recall = Recall(org, search, policy, provider, partial(snapshots.get, org, documents),
                              entries.unembeddable)  # fmt: skip
        self._snapshot: Callable[[], Snapshot] = lambda: snapshots.get(org, documents)
        self._kept, self._keeps = partial(snapshots.kept, org, documents), partial(snapshots.keeps, org, documents)
        self._due, self._due_again = partial(snapshots.due, org), partial(snapshots.due_again, org)

    @cached_property
    def _writes(self) -> Writes:
        redactor = lambda: self.org_settings.redactor()  # noqa: E731 (read at each write: an admin's change applies)
        return Writes(self._org, self._entries, self._worker, self._background, redactor, embed_here=self._embed_here)

    @property
    def org(self) -> str:
        """The organization this handle is bound to."""
        return self._org

    def pin(self) -> None:
        """Fix the organization's incarnation this handle writes to now (a read), not at its first write: for work
        that writes long after its handle was opened (a REST import uploads first). `grandbo.incarnation`."""
        if self._incarnation is not None:
            self._incarnation.pin()

    @property
    def incarnation(self) -> int | None:  # the incarnation of the org this handle acts for, once known (else None)
        return self._incarnation.number if self._incarnation is not None else None

    @property
    def space(self) -> EmbeddingSpace | None:
        """The store's embedding space (every vector of the store is of it)."""
        return self._entries.space()

    # ------------------------------------------------------------------ tiers

    @cached_property
    def incidents(self) -> Incidents:
        return Incidents(self, self._documents, self._kept)

    @cached_property
    def runbooks(self) -> Runbooks:
        return Runbooks(self)

    @cached_property
    def erasure(self) -> Erasure:
        return Erasure(self, self._documents, self._entries, self._search.purged)

    @cached_property
    def ledger(self) -> Ledger:
        return Ledger(self, self._documents, self._snapshot, self._entries)

    @cached_property
    def catalog(self) -> Catalog:
        return Catalog(self._documents, lambda: self._snapshot().topology, self._process_settings.services_per_org)

    @cached_property
    def org_settings(self) -> OrgSettings:
        """The organization's own stored settings (re-ranking weights, redaction, calibration, language); the
        process's settings (`GRANDBO_*`) are the `Grandbo`'s."""
        return OrgSettings(self._documents, self._entries)

    def ranking_policy(self) -> RankingPolicy:
        """How this organization's recall ranks: the process's ranking policy with the organization's own
        re-rank weights (`grandbo settings policy`)."""
        return self._policy.with_weights(self.org_settings.rerank())

    @cached_property
    def keys(self) -> Keys:
        """The organization's API keys (hashes only)."""
        return Keys(self, self._documents, self._verified, most=self._process_settings.keys_per_org)

    @cached_property
    def webhook_secrets(self) -> WebhookSecrets:
        return WebhookSecrets(self._documents)

    @cached_property
    def alerts(self) -> Alerts:
        """Alerts the webhooks received, each with its recall result."""
        return Alerts(
            self._documents,
            lambda: self.org_settings.redactor(),
            self._process_settings.alert_retention_days,
            lambda: self._due("alerts.prune", 3600),
            org=self._org,
            upkeep=self.defer,
            due_again=lambda: self._due_again("alerts.prune"),
            topology=lambda: self._snapshot().topology,
            group_window_minutes=self._process_settings.group_window_minutes,
        )

    alert_groups = cached_property(AlertGroups)  # candidate incidents: alerts close in time on related services

    @cached_property
    def changes(self) -> Changes:  # deploys, config pushes, flag flips: what changed, and when (`tiers.changes`)
        return Changes(self._documents, lambda: self.org_settings.redactor(), lambda: self._snapshot().topology,
                       self._process_settings.alert_retention_days, partial(self._due, "changes.prune", 3600),
                       partial(self._due_again, "changes.prune"), self.defer, self._org)  # fmt: skip

    @cached_property
    def profile(self) -> Profiles:
        return Profiles(self._documents)

    @cached_property
    def triage(self) -> Triage:
        """`triage(alert)`: a ranked, cited action plan, narrated by the configured LLM if any (`grandbo.triage`)."""
        return Triage(self, self._process_settings, self._snapshot, self._kept, self._pools, self._llm, self._keeps,
                      self._due)  # fmt: skip

    @cached_property
    def learning(self) -> Learning:
        """Edit signals and learned notes, classified by the configured LLM (GRANDBO_LLM_*) or the rules (also when
        the LLM's configuration is incomplete: reviewing notes and recording edits never depend on it)."""
        try:
            llm = self._llm()  # the process's one client
        except ConfigError as error:
            log.warning("learning.llm_not_configured", org_id=self._org, error=error.message)
            llm = None
        return self.learning_with(llm)

    def learning_with(self, llm: LLMClient | None) -> Learning:
        """Edit signals and learned notes classified by `llm` (None: the rules alone), what it is sent masked first."""
        return Learning(self, self._documents, RedactingClient(llm, self.org_settings.redactor()) if llm else None,
                        self._process_settings.notes_per_org)  # fmt: skip

    def context(
        self, *, content_type: str | None = None, topic: str | None = None, budget: int = DEFAULT_BUDGET, k: int = 5
    ) -> ContextBlock:
        """The block an agent's system prompt gets: profile and learned notes; with `topic`, recall after it."""
        return build(self, content_type=content_type, topic=topic, budget=budget, k=k)

    def import_file(
        self, path: Path, *, strict: bool = False, actor: str = "import",
        progress: Callable[[int, int], None] | None = None,
    ) -> ImportReport:  # fmt: skip
        """Import a JSONL file of entries: every storable line is stored, every other reported with its number
        and reason; lines already imported are skipped, so a rerun resumes (see `tiers.transfer`)."""
        return import_file(self, path, strict=strict, actor=actor, progress=progress)

    def export_file(self, path: Path, *, page: int = EXPORT_PAGE) -> int:
        """Write the active entries with their vectors as JSONL (for `import_file`), `page` at a time; how many."""
        return export_file(self, path, self._entries.consistent_read(), page=page)

    def export_log(self, path: Path, *, with_secrets: bool = False) -> dict[str, int]:
        """Write the organization's whole log (entry events with history, vectors, every tier's documents and
        their history; webhook signing secrets only `with_secrets`) as JSONL with a checksum line; return the
        counts (see `tiers.eventlog`)."""
        return export_log(self._org, self._entries, self._documents, path, with_secrets=with_secrets)

    def import_log(self, path: Path, *, reembed: bool = False, skip_bad_outcomes: bool = False) -> ReplayReport:
        """Replay an `export_log` file into this organization, which must be empty (`eventlog.replay_log`)."""
        fields, embedded = (lambda: self.org_settings.redactor().fields), (lambda: self.backfill().embedded)
        return replay_log(self._entries, self._documents, path, reembed=reembed, mask=fields, embed=embedded,
                          skip_bad_outcomes=skip_bad_outcomes)  # fmt: skip

    # ------------------------------------------------------------------ writes

    def remember(
        self, entry: NewEntry | Mapping[str, Any], *, actor: str = "api", idempotency_key: str | None = None,
        carried: bool = False,
    ) -> Entry:  # fmt: skip
        """Store one entry; its vector follows after commit. `idempotency_key` (the client's, unique per intended
        write) makes a retry safe: a write under a key already recorded writes nothing and returns the first
        write's entry (a caller that lost the answer retries with the same key; another entry under it conflicts).
        A look-alike service name is refused (`names.refuse_added`) unless `carried`: the services come from a
        record kept before (an incident's sync, an export), which carries its names forward."""
        return self.remember_many([entry], actor=actor, idempotency_key=idempotency_key, carried=carried)[0]

    def remember_many(
        self,
        entries: Iterable[NewEntry | Mapping[str, Any]],
        *,
        actor: str = "api",
        strict: bool = False,
        vectors: Sequence[npt.ArrayLike | None] | None = None,
        idempotency_key: str | None = None,
        carried: bool = False,
    ) -> list[Entry]:
        """Store entries in one transaction, then embed them (`idempotency_key`, `carried`: see `remember`).
        With `strict`, anything short of a vector for every entry raises StrictModeError (the entries are stored
        all the same); without it, embedding problems are logged and left to backfill. `vectors` (aligned with
        `entries`, None where absent) are precomputed vectors of the store's embedding space, written in the same
        transaction instead of being computed again; use them only for vectors that space's provider produced
        (an export of a store with the same space)."""
        return self._writes.remember_many(entries, actor, strict, vectors, idempotency_key, carried)

    def redact(self, entries: Sequence[NewEntry]) -> list[NewEntry]:  # masked by the org's patterns (or as is)
        return self._writes.redact(entries)

    def correct(
        self, entry_id: str, changes: Mapping[str, Any], *, reason: str = "", actor: str = "api", carried: bool = False
    ) -> Entry:
        """Supersede an entry with a corrected one; the old one stays in the history. `changes` holds the fields that
        differ (title, body, kind, tags, services, severity, occurred_at, meta, id); the rest are carried over from
        the entry being corrected. A look-alike service it adds is refused unless `carried` (as `remember`)."""
        return self.correct_many([(entry_id, changes, reason)], actor=actor, carried=carried)[0]

    def correct_many(
        self, corrections: Sequence[tuple[str, Mapping[str, Any], str]], *, actor: str, carried: bool = False
    ) -> list[Entry]:
        """`correct` each (entry id, changes, reason), in one transaction: all or none (EntryStateError when one is no
        longer active, or is given twice); the entries corrected into, in the order given."""
        ids = [entry_id for entry_id, _, _ in corrections]
        found = self.get_many(ids)
        found |= {entry_id: self.get(entry_id) for entry_id in ids if entry_id not in found}  # NotFoundError
        return self._writes.correct_many([(found[i], c, reason) for i, c, reason in corrections], actor, carried)

    def retire(self, entry_id: str, *, reason: str = "", actor: str = "api") -> Entry:
        """Tombstone an entry: it leaves recall, its history stays."""
        self.get(entry_id)
        (entry,) = self._entries.append([NewEvent(entry_id, EventType.RETIRED, {"reason": reason}, actor, utcnow())])
        return entry

    def purge(self, entry_id: str, *, reason: str, actor: str) -> Entry:
        """Erase an entry's text for good (a secret or personal data stored by mistake): it is redacted in every
        event of the log and in the projection, its vector and embed job are dropped, and the purge is logged
        with `actor` and `reason`. The entry leaves recall; `get`, `history` and exports show only that it was
        purged. An admin's act: interfaces must check the caller's right before calling it."""
        if not reason.strip():
            raise InvalidInputError("Say why the entry is purged (--reason): the purge is audited.", detail={})
        before = self.get(entry_id)
        entry = self._entries.purge(entry_id, reason.strip(), actor)  # purged already: only copies made since
        if entry.seq != before.seq:  # the org's index image went with it: saved again without the entry's words
            self._search.purged()
        log.warning("memory.purged", org_id=self._org, entry_id=entry_id, actor=actor)
        return entry

    # ------------------------------------------------------------------ reads

    def defer(self, task: Callable[[], None], *, waits_on_llm: bool = False) -> bool:
        """Run work that must not block or fail the caller (a write-behind): on a background thread in a long-running
        process, right away otherwise; a failure is logged, never raised. True when it has run here, False when a
        background thread has it. The pools, their bounds and each org's share: `grandbo.background`."""
        return self._pools.later(self._org, task, "llm_behind" if waits_on_llm else "behind")

    def defer_work(self, kind: str, subject: str, task: Callable[[], Any], *, waits_on_llm: bool = False) -> bool:
        """`defer` a write-behind recorded with its write (`ports.NewWork` of `kind` and `subject`): leased and
        run, then deleted; a failure counts an attempt and leaves it to the re-driver (`grandbo.redrive`)."""

        def run() -> None:
            self.run_work(kind, subject, task)

        return self.defer(run, waits_on_llm=waits_on_llm)

    def run_work(self, kind: str, subject: str, task: Callable[[], Any]) -> bool:
        """Run the recorded write-behind (`kind`, `subject`) here, unless another process has it leased."""
        return run_work(self._work, self._process_settings, kind, subject, task)

    def leases(self, kind: str, subjects: Sequence[str]) -> Leases:
        """The recorded write-behinds of `kind` on `subjects` this process will run in order, leased a few at once."""
        return Leases(self._work, self._process_settings, kind, subjects)

    def admit(self, kind: Kind) -> None:
        """Raise OrgOverloadedError (429) or OverloadedError (503), with a Retry-After, when the pool `kind` has no
        room for this organization ("alerts": a large delivery's read, `Background.admit`): checked before a write."""
        self._pools.admit(self._org, kind)

    def reserve_alerts(self, alerts: int) -> Seats | None:
        """`admit` a large delivery's `alerts` triages at once, a place each, for its tasks (None: no threads here)."""
        return self._pools.reserve_alerts(self._org, alerts)

    def get(self, entry_id: str) -> Entry:
        entry = self.find(entry_id)
        if entry is None:
            raise NotFoundError(
                f"No entry {entry_id!r} in org {self._org!r}.", detail={"entry_id": entry_id, "org_id": self._org}
            )
        return entry

    def find(self, entry_id: str) -> Entry | None:  # the entry (any status), or None
        return self.get_many([entry_id]).get(entry_id)

    def get_many(self, entry_ids: Sequence[str]) -> dict[str, Entry]:  # those that exist (any status), by id
        return self._search.entries(self._search.view(), entry_ids)

    def entries(self, *, include_inactive: bool = False, listing: Listing | None = None) -> list[Entry]:
        """Every entry, oldest first (active ones only unless `include_inactive`); with `listing`, that page."""
        return self._entries.entries(include_inactive=include_inactive, listing=listing)

    def writers(self) -> set[str]:
        """Every actor of the organization's entry and document events: who has written to it."""
        return {event.actor for event in self._entries.events(None)} | {e.actor for e in self._documents.log().events}

    def vectors(self, entry_ids: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        """The current vectors of those entries that have one."""
        return self._entries.vectors(entry_ids)

    def embedding(self, entry_id: str) -> EmbeddingState:
        """Where the entry's vector stands: embedded, pending (attempts, next try), failed, unembeddable, unqueued."""
        return embedding_state(self._entries, entry_id, self._process_settings.embed_max_attempts)

    def examples(self, content_type: str, limit: int = 5) -> list[Entry]:
        """The newest examples of a content type (kind `example`, meta.content_type), newest first, unscored."""
        if not content_type.strip():
            raise InvalidInputError("Name the content type of the examples wanted.", detail={})
        if not 1 <= limit <= MAX_K:
            raise InvalidInputError(f"limit must be between 1 and {MAX_K}, got {limit}.", detail={"limit": limit})
        return self._entries.examples(folded_content_type(content_type), limit)

    def generation(self) -> int | None:
        """The org's generation: a store-wide number it is given when created (and again when its derived data is
        rebuilt), never given twice, so an org created again under a dropped one's name has another; None while
        no such org exists. What a cache of the org's data kept between requests is keyed by, never the name."""
        return self._documents.stamp([])[0]

    def changed_since(self, seq: int) -> tuple[int, list[Entry]]:
        """The entries (any status) events after sequence number `seq` touched, and the newest one's (else `seq`)."""
        events = self._entries.events(None, since_seq=seq)
        if not events:
            return seq, []
        touched = list(dict.fromkeys(event.entry_id for event in events))
        return max(event.seq for event in events), list(self.get_many(touched).values())

    def history(self, entry_id: str) -> list[Event]:  # every event that shaped the entry, oldest first
        return self._entries.events(entry_id)

    def stats(self) -> CorpusStats:
        waiting, failed = self._work.counts(self._process_settings.write_behind_max_attempts)
        stats, unfinished = self._entries.stats(self._process_settings.embed_max_attempts), self.erasure.unfinished()
        return stats.model_copy(update={"write_behinds": waiting, "write_behinds_failed": failed,
                                        "erasures_unfinished": unfinished})  # fmt: skip

    def stored(self) -> tuple[int, int | None]:  # stored bytes and the limit, without `stats`' corpus join
        return self._entries.stored()

    def figures(self, linked: Sequence[str] = (), since: int | None = None) -> EntryFigures | None:  # `ports`'
        return self._entries.figures(linked, since)

    def backfill(self) -> DrainReport:
        """Embed whatever is pending for this org, failed jobs included."""
        self._entries.retry_failed()
        self._entries.enqueue_missing()
        return self._worker().drain(self._org)

    def rebuild(self, *, replace: bool = False) -> RebuildResult:
        """Recompute the projection from the event log and compare it with the live one. Nothing is written unless
        they differ and `replace` trusts the log: a damaged log is reported (missing, extra, changed), never obeyed."""
        return self._entries.rebuild(replace=replace)

    def recall(
        self, topic: str, k: int = 10, *, arm: Arm | str = Arm.RERANKED, services: Sequence[str] | None = None,
        severity: str | Severity | None = None, now: datetime | None = None, shared: SharedRecalls | None = None,
    ) -> RecallResult:  # fmt: skip
        """Ranked, explained memories about `topic`: "has this happened before, and what worked?"

        `topic` is the problem in a sentence (slugs and two-word identifiers are refused). Hybrid recall fuses
        the lexical and vector arms by RRF; re-ranked recall (the default) orders them by the composite score of
        the ranking policy (`retrieval.policy`), says whether anything close enough was seen before and labels
        each match frequent or rare. `services` and `severity` describe the situation (services named in the
        topic count when `services` is None). A failing embedding provider degrades recall to the lexical arm
        with a note; it never fails it. `shared`: the answers a webhook delivery's alike alerts share.
        """
        return self._recall(topic, k, arm, services, severity, now, shared)
