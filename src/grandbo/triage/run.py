"""`OrgMemory.triage(alert)`: alert -> recall -> the deterministic plan -> (optionally) the LLM's narration,
each step inside its budget, so a plan is always returned on time.

* Recall (re-ranked) gets `GRANDBO_TRIAGE_RECALL_BUDGET_MS`. Past it (a slow embedding provider or
  store), the lexical arm alone answers, which embeds nothing, and the plan says so.
* The plan's own reads (runbooks, ledger, catalog, recent alerts) get what is left of the whole budget;
  past it the plan is built from recall's hits alone (win rates read as the prior) and says so.
* The LLM gets `GRANDBO_TRIAGE_LLM_BUDGET_MS` (never more than what is left of `GRANDBO_TRIAGE_BUDGET_MS`);
  slow, down, garbage or uncited answers leave the deterministic plan, marked with the reason.

Every step runs on the process's bounded pools (`grandbo.background`: `triage`, and `narration` for the LLM),
each organization held to its share. A triage that finds no room for its recall is refused (OrgOverloadedError,
429, or OverloadedError, 503, with Retry-After); one that finds none for a later step degrades as past a
budget (the plan says so). Work that misses its deadline is not waited for: a step already running finishes (or
times out) on its thread, one still waiting is skipped, never run for nobody.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from grandbo.config import Settings
from grandbo.errors import GrandboError, OverloadedError
from grandbo.ingest.alert import Alert, fired_at
from grandbo.llm import LLMClient, RedactingClient
from grandbo.model import NO_VECTOR_VERDICT, PENDING_VERDICT, Arm, RecallResult, utcnow
from grandbo.ports import Document
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.retrieval.shared import SharedRecalls
from grandbo.tiers.change_model import Change
from grandbo.tiers.changes import CHANGES
from grandbo.tiers.operations import ALERTS, Kept, Snapshot
from grandbo.tiers.topology import Topology
from grandbo.triage import changes, evidence, narrate, past_alerts
from grandbo.triage.plan import PlanGroup, TriagePlan, TriageTimings, alert_from
from grandbo.writes import run_guarded

if TYPE_CHECKING:
    from grandbo.background import Background
    from grandbo.memory import OrgMemory
    from grandbo.pools import BoundedPool

log = structlog.get_logger(__name__)
T = TypeVar("T")
K = 10  # memories recalled per alert


# Changes an org's triage keeps in memory at most; past them each triage reads the window's from the store. A
# change takes about 1.5 KB kept: a write key's storm (38,000 in 20 s) took hundreds of MB of the shared process.
KEPT_CHANGES = 20_000
# Received alerts an org's triage keeps in memory at most; past them each triage reads the alerts that can count
# from the store (`triage.past_alerts`). One takes about 2.2 KB kept, at most 7 KB (its summary's marks, at most
# WORD_MARKS: a 2,000-character summary's 666 words took 67 KB before they were marks): at most 70 MB an org.
KEPT_ALERTS = 10_000
# How often a process reads an org's alerts whole to keep them, at most: a triage of an org whose alerts it does not
# keep (its first, or they were let go for other orgs': `Snapshots.KEPT_COLLECTIONS`) reads those that can count from
# the store (`triage.past_alerts`), and leaves the whole read (up to KEPT_ALERTS of them, ordered: 0.3-0.8 s at 5,000
# on these cores; probe 29) to a background thread.
KEEP_ALERTS_EVERY = 60.0
# Alerts of an org a process without background threads reads whole in a triage, at most (`_recent_alerts`).
KEPT_INLINE_ALERTS = 1_000


def _within(future: Future[T], seconds: float) -> T | None:
    """The future's value, or None when it is not done within `seconds`: then it is cancelled if no thread took
    it yet (nobody waits for it any more), and goes on unwaited otherwise."""
    try:
        return future.result(timeout=max(seconds, 0.0))
    except (FutureTimeout, CancelledError):
        future.cancel()
        return None


class Triage:
    """Triage for one organization (`OrgMemory.triage`)."""

    def __init__(
        self,
        memory: OrgMemory,
        settings: Settings,
        snapshot: Callable[[], Snapshot],
        kept: Kept,
        pools: Background,
        llm: Callable[[], LLMClient | None],
        keeps: Callable[[str, Callable[[Document], Any]], bool],
        due: Callable[[str, float], bool],
    ) -> None:
        self._memory = memory
        self._settings = settings
        self._snapshot = snapshot  # the catalog and ledger recall joins, reread only when one of them changed
        self._kept = kept  # the org's received alerts, each read once per process (`Snapshots.kept`)
        self._pools, self._llm = pools, llm
        self._keeps = keeps  # whether the process keeps a collection of the org's (`Snapshots.keeps`)
        self._due = due  # whether the org's upkeep `task` is due in this process (`Snapshots.due`)

    @property
    def llm(self) -> LLMClient | None:
        """The configured LLM client (GRANDBO_LLM_*), one per process; None when there is none."""
        return self._llm()

    def _submit(self, pool: BoundedPool, task: Callable[[], T], deadline: float, patient: bool) -> Future[T]:
        """`task` on `pool` for this org, skipped if no thread took it by `deadline` (a perf_counter time);
        a `patient` caller (background work) waits for room instead of being refused."""
        left = max(deadline - time.perf_counter(), 0.0)
        return pool.submit(self._memory.org, task, deadline=time.monotonic() + left, block=patient)

    def __call__(
        self,
        alert: Alert | Mapping[str, Any],
        *,
        narrate: bool = True,
        llm: LLMClient | None = None,
        now: datetime | None = None,
    ) -> TriagePlan:
        """A ranked, cited action plan for `alert` (a normalized `Alert`, or a mapping with at least
        `summary`), on time whatever the LLM, the provider or the store do. `llm` overrides the configured
        client; with `narrate=False` no LLM is asked. What is sent is masked by the org's redaction first."""
        return self.run(alert, narrate=narrate, llm=llm, now=now)[0]

    def run(
        self,
        alert: Alert | Mapping[str, Any],
        *,
        narrate: bool = True,
        llm: LLMClient | None = None,
        now: datetime | None = None,
        patient: bool = False,
        group: PlanGroup | None = None,
        shared: SharedRecalls | None = None,
    ) -> tuple[TriagePlan, RecallResult | None]:
        """The plan and the recall result it rests on (None when no memory could be read in time). Refused
        with OrgOverloadedError / OverloadedError when the pools have no room for this organization's recall,
        unless `patient` (background work): then it waits for room. With the alert's `group`, the plan names it
        and recall is asked about the group's services (the alert's first), not the alert's alone. `shared`: the
        recall answers of the alert's delivery, which its alike alerts share (`retrieval.shared`)."""
        started = time.perf_counter()
        deadline = started + self._settings.triage_budget_ms / 1000
        checked = alert_from(alert)
        query = checked.query()
        notes: list[str] = []
        timings = TriageTimings()
        services = list(
            dict.fromkeys([*([checked.service] if checked.service else []), *(group.services if group else [])])
        )
        result, arm = self._recall(checked, query, deadline, notes, now, patient, services or None, shared)
        timings.recall_ms = (time.perf_counter() - started) * 1000
        mark = time.perf_counter()
        plan = self._plan(checked, query, result, arm, deadline, notes, now or utcnow(), patient)
        plan.group = group
        timings.plan_ms = (time.perf_counter() - mark) * 1000
        try:
            client = (llm or self.llm) if narrate else None
        except GrandboError as error:  # a misconfigured LLM costs the narration, never the plan
            client = None
            plan.notes.append(f"no LLM narration: {error.message}")
        if client is not None:
            mark = time.perf_counter()
            self._narrate(
                plan, RedactingClient(client, self._memory.org_settings.redactor()), result, deadline, patient
            )
            timings.llm_ms = (time.perf_counter() - mark) * 1000
        timings.total_ms = (time.perf_counter() - started) * 1000
        plan.timings = timings
        return plan, result

    def _recall(
        self,
        alert: Alert,
        query: str,
        deadline: float,
        notes: list[str],
        now: datetime | None,
        patient: bool,
        services: list[str] | None,
        shared: SharedRecalls | None = None,
    ) -> tuple[RecallResult | None, str]:

        def ask(arm: Arm) -> Callable[[], RecallResult]:
            return lambda: self._memory.recall(
                query, K, arm=arm, services=services, severity=alert.severity, now=now, shared=shared
            )

        budget = min(self._settings.triage_recall_budget_ms / 1000, deadline - time.perf_counter())
        result = _within(self._submit(self._pools.triage, ask(Arm.RERANKED), deadline, patient), budget)
        if result is not None:
            return result, Arm.RERANKED.value
        notes.append(
            f"recall missed its budget of {self._settings.triage_recall_budget_ms:.0f} ms (embedding provider or "
            "store too slow): the plan rests on the lexical arm alone"
        )
        log.warning("triage.recall_past_budget", org_id=self._memory.org, budget_ms=budget * 1000)
        try:
            fallback = self._submit(self._pools.triage, ask(Arm.LEXICAL), deadline, patient)
        except OverloadedError as error:  # the reranked recall still holds this org's share
            notes.append(f"the lexical arm could not be asked: {error.message}")
            return None, Arm.LEXICAL.value
        result = _within(fallback, deadline - time.perf_counter())
        if result is None:
            notes.append("the lexical arm missed the whole triage's budget too: no memory could be read")
        return result, Arm.LEXICAL.value

    def _plan(
        self, alert: Alert, query: str, result: RecallResult | None, arm: str, deadline: float, notes: list[str],
        now: datetime, patient: bool,
    ) -> TriagePlan:  # fmt: skip
        hits = evidence.qualifying(result) if result is not None else []
        runbook_ids = list(evidence.backing(hits))
        at = fired_at(alert.started_at, min(alert.received_at, now))
        try:
            read = self._submit(
                self._pools.triage,
                lambda: self._facts(runbook_ids, alert, at, min(alert.received_at, now), now),
                deadline,
                patient,
            )
            facts = _within(read, deadline - time.perf_counter())
        except OverloadedError:  # this org's share is held by its own steps left running: as past the budget
            facts = None
        # The received alert's id, which `GET /v1/alerts/{id}` answers; none for an alert that was never stored (given
        # inline, or read from a file), as far as the org's received alerts tell (unread past the budget: by source).
        own = alert.id  # a hash: once, not once per alert the org received
        stored = alert.source != "manual" and (facts is None or any(seen.id == own for seen in facts.recent))
        if facts is None:
            notes.append("the ledger, catalog, recent alerts and changes were not read within the budget: runbook "
                         "records read as untried, the recurrence label as first, no change listed")  # fmt: skip
            facts = evidence.Facts({h.entry.id: h.entry for h in hits}, {}, Topology(), [])
        (label, alike), (outlier, share, _) = evidence.labels(alert, facts.recent, now)
        changed = facts.changed or changes.WhatChanged()
        runbooks, skipped = evidence.runbooks(hits, facts.entries, facts.records, alert.service)
        notes += skipped
        plan = TriagePlan(
            alert_id=alert.id if stored else None, query=query, service=alert.service,
            severity=alert.severity.value if alert.severity else None, recurrence=label, similar_alerts=alike,
            seen_before=result.seen_before if result else None, evidence=result.evidence if result else None,
            mechanisms=evidence.mechanisms(hits), runbooks=runbooks, citations=evidence.citations(hits),
            recall_arm=arm, notes=[*notes, *(result.notes if result else [])], outlier=outlier, outlier_share=share,
            changes=changed.changes, origin=changed.origin, related_incidents=changed.related,
        )  # fmt: skip
        if not hits:
            reason = "no memory could be read in time" if result is None else next(
                (n for n in result.notes if n.startswith("no similar")), "no memory matched closely enough"
            )  # fmt: skip
            if result is not None and (result.arm is Arm.LEXICAL or result.calibration == NO_VECTOR_VERDICT):
                reason = ("no memory matched closely enough by its words; without the vector arm's similarity "
                          "this is not a verdict that nothing like it happened before")  # fmt: skip
            elif result is not None and result.calibration == PENDING_VERDICT:
                reason = ("no memory qualified, but many memories still wait for their vector: this is not a "
                          "verdict that nothing like it happened before")  # fmt: skip
            plan.no_precedent = evidence.no_precedent(alert, query, facts.topology, reason)
        return plan

    def current(self, plan: TriagePlan) -> TriagePlan:
        """A kept plan with its runbooks' records as the ledger holds them now (`evidence.current`)."""
        return evidence.current(plan, self._snapshot().source.counted)

    def _facts(
        self, runbook_ids: list[str], alert: Alert, at: datetime, received: datetime, now: datetime
    ) -> evidence.Facts:
        snapshot = self._snapshot()
        window = timedelta(minutes=self._settings.change_window_minutes)
        seen = self._recent_alerts(alert, snapshot.topology, at, received, now, window)
        records = snapshot.source.counted(runbook_ids)  # theirs counted by the store, not every outcome read
        entries = self._memory.get_many(runbook_ids) if runbook_ids else {}
        # The org's changes, each read once per process as alerts are (the window and the records read in memory):
        # reading the window's changes from the store cost a triage 8 ms at 1,000 changes in it. An org of more
        # than KEPT_CHANGES is read from the store: its storm of changes must not fill the process.
        kept = self._kept(CHANGES, changes.kept_change, KEPT_CHANGES) if alert.service else []
        between, latest = changes.reads_of(kept) if kept is not None else self._stored_changes()
        changed = changes.what_changed(
            alert.service, at, window, topology=snapshot.topology,
            recent=seen, incidents=self._memory.incidents.summaries(), outcomes=self._memory.ledger.of_incidents,
            between=between, latest=latest, policy=DEFAULT_POLICY.changes, received=received,
        )  # fmt: skip
        return evidence.Facts(entries, records, snapshot.topology, seen, changed)

    def _recent_alerts(
        self, alert: Alert, topology: Topology, at: datetime, received: datetime, now: datetime, window: timedelta
    ) -> list[evidence.Seen]:
        """The org's received alerts the plan counts: those the process keeps, each read once (then only what was
        written since); else, and when the org holds more than KEPT_ALERTS (a year of storms), those that can count
        read from the store for this alert (`_stored_alerts`: the same plan). Kept none, the whole read is left to a
        background thread (KEEP_ALERTS_EVERY): a process's first triage of the org read them all, up to KEPT_ALERTS,
        as every triage did once its alerts were let go for other orgs' (probe 29). A process without one (no
        `fills` pool) reads them whole in the triage, as often, when the org holds at most KEPT_INLINE_ALERTS."""
        # A `now` after the present (a caller's, never the API's) reads the kept alerts: the store path reads by write
        # time, and such a triage's window may begin after the alerts it counts were written.
        if self._keeps(ALERTS, evidence.seen) or now > utcnow():
            seen = self._kept(ALERTS, evidence.seen, KEPT_ALERTS, evidence.SEEN_KEYS)
            if seen is not None:
                return seen
        elif self._due("triage.keep_alerts", KEEP_ALERTS_EVERY):

            def keep() -> None:
                self._kept(ALERTS, evidence.seen, KEPT_ALERTS, evidence.SEEN_KEYS)

            if (fills := self._pools.fills) is not None:
                fills.offer(self._memory.org, lambda: run_guarded(keep))  # no room: a later triage keeps them
            # No thread to leave it to (the CLI, a library Grandbo without background=True): an org of few alerts is
            # read whole here, and every later triage counts from what is kept (left to the store, each read its
            # alerts: 9.2 against 3.2 ms CPU at 250); a larger one's whole read would cost one triage more than the
            # store's (800 against 107 ms at 5,000 long alerts), told by a count on the store's index.
            elif self._memory.alerts.count_at_most(KEPT_INLINE_ALERTS + 1) <= KEPT_INLINE_ALERTS:
                seen = self._kept(ALERTS, evidence.seen, KEPT_ALERTS, evidence.SEEN_KEYS)
                if seen is not None:
                    return seen
        return self._stored_alerts(alert, topology, at, received, now, window)

    def _stored_alerts(
        self, alert: Alert, topology: Topology, at: datetime, received: datetime, now: datetime, window: timedelta
    ) -> list[evidence.Seen]:
        """The received alerts that can count in `alert`'s plan, read from the store (`past_alerts.stored_recent`),
        with those of its burst when it names a service (`changes.what_changed` reads a burst then only)."""
        documents = self._memory.alerts.documents
        if not alert.service:
            return past_alerts.stored_recent(documents, alert, now)
        path, end = changes.burst_of(alert.service, topology, at, received)
        return past_alerts.stored_recent(documents, alert, now, sorted(path), end - window)

    def _stored_changes(self) -> tuple[changes.Between, changes.Latest]:
        """`Between` and `Latest` as reads of the store (`Changes.between`, `Changes.find`)."""
        stored = self._memory.changes

        def latest(service: str, kind: str, since: datetime, until: datetime, limit: int) -> list[Change]:
            return stored.find(service=service, kind=kind, since=since, until=until, limit=limit)[0]

        return stored.between, latest

    def _narrate(
        self, plan: TriagePlan, client: LLMClient, result: RecallResult | None, deadline: float, patient: bool
    ) -> None:
        budget = min(self._settings.triage_llm_budget_ms / 1000, deadline - time.perf_counter())
        if budget <= 0.05:
            plan.notes.append("no time left for the LLM: deterministic plan")
            return
        bodies = {hit.entry.id: hit.entry.body for hit in result.hits} if result else {}

        def ask() -> Any:
            system = narrate.system_text(self._memory.context().profile)
            answer = client.complete(system, narrate.evidence_text(plan, bodies), timeout=budget)
            return narrate.checked(answer, plan, client.name)

        try:
            future = self._submit(self._pools.narration, ask, deadline, patient)
        except OverloadedError as error:  # the narration is optional: the deterministic plan stands
            plan.notes.append(f"no LLM narration: {error.message} Deterministic plan.")
            return
        try:
            narrative = future.result(timeout=budget)
        except (FutureTimeout, CancelledError):
            future.cancel()
            plan.notes.append(f"the LLM {client.name} missed its budget of {budget * 1000:.0f} ms: deterministic plan")
            log.warning("triage.llm_past_budget", org_id=self._memory.org, llm=client.name, budget_ms=budget * 1000)
            return
        except GrandboError as error:
            plan.notes.append(f"the LLM's answer was not used: {error.message[:240]} Deterministic plan.")
            log.warning("triage.llm_failed", org_id=self._memory.org, llm=client.name, code=error.code)
            return
        except Exception as error:  # a bug in a client must not cost the responder the plan
            plan.notes.append(f"the LLM call failed ({type(error).__name__}): deterministic plan")
            log.exception("triage.llm_error", org_id=self._memory.org, llm=client.name)
            return
        plan.narrative, plan.path = narrative, "llm"
