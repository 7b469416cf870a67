"""`OrgMemory.triage(alert)`: alert -> recall -> the deterministic plan -> (optionally) the LLM's narration,
each step inside its budget, so a plan is always returned on time.

* Recall (re-ranked) gets `GRANDBO_TRIAGE_RECALL_BUDGET_MS`. Past it (a slow embedding provider or
  store), the lexical arm alone answers, which embeds nothing, and the plan says so.
* The plan's own reads (runbooks, ledger, catalog, recent alerts) get what is left of the whole budget;
  past it the plan is built from recall's hits alone (win rates read as the prior) and says so.
* The LLM gets `GRANDBO_TRIAGE_LLM_BUDGET_MS` (never more than what is left of `GRANDBO_TRIAGE_BUDGET_MS`);
  slow, down, garbage or uncited answers leave the deterministic plan, marked with the reason.

Work that misses its deadline is not waited for: it finishes (or times out) on a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from grandbo.config import Settings
from grandbo.errors import GrandboError
from grandbo.ingest.alert import Alert
from grandbo.llm import LLMClient, RedactingClient, client_from
from grandbo.model import NO_VECTOR_VERDICT, PENDING_VERDICT, Arm, RecallResult, utcnow
from grandbo.ports import Document
from grandbo.tiers.alerts import ALERTS
from grandbo.tiers.operations import Snapshot
from grandbo.tiers.topology import Topology
from grandbo.triage import evidence, narrate
from grandbo.triage.plan import TriagePlan, TriageTimings, alert_from

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)
T = TypeVar("T")
K = 10  # memories recalled per alert
# Two pools, so that LLM calls left running past their budget can never queue a later triage's recall.
_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="grandbo-triage")
_LLM_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="grandbo-triage-llm")


def _within(future: Future[T], seconds: float) -> T | None:
    """The future's value, or None when it is not done within `seconds` (it goes on, unwaited)."""
    try:
        return future.result(timeout=max(seconds, 0.0))
    except FutureTimeout:
        return None


class Triage:
    """Triage for one organization (`OrgMemory.triage`)."""

    def __init__(
        self,
        memory: OrgMemory,
        settings: Settings,
        snapshot: Callable[[], Snapshot],
        kept: Callable[[str, Callable[[Document], evidence.Seen]], list[evidence.Seen]],
    ) -> None:
        self._memory = memory
        self._settings = settings
        self._snapshot = snapshot  # the catalog and ledger recall joins, reread only when one of them changed
        self._kept = kept  # the org's received alerts, each read once per process (`Snapshots.kept`)

    @cached_property
    def configured(self) -> LLMClient | None:
        """The configured LLM client (GRANDBO_LLM_*), built once; None when there is none."""
        return client_from(self._settings)

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
    ) -> tuple[TriagePlan, RecallResult | None]:
        """The plan and the recall result it rests on (None when no memory could be read in time)."""
        started = time.perf_counter()
        deadline = started + self._settings.triage_budget_ms / 1000
        checked = alert_from(alert)
        query = checked.query()
        notes: list[str] = []
        timings = TriageTimings()
        result, arm = self._recall(checked, query, deadline, notes, now)
        timings.recall_ms = (time.perf_counter() - started) * 1000
        mark = time.perf_counter()
        plan = self._plan(checked, query, result, arm, deadline, notes, now or utcnow())
        timings.plan_ms = (time.perf_counter() - mark) * 1000
        try:
            client = (llm or self.configured) if narrate else None
        except GrandboError as error:  # a misconfigured LLM costs the narration, never the plan
            client = None
            plan.notes.append(f"no LLM narration: {error.message}")
        if client is not None:
            mark = time.perf_counter()
            self._narrate(plan, RedactingClient(client, self._memory.settings.redactor()), result, deadline)
            timings.llm_ms = (time.perf_counter() - mark) * 1000
        timings.total_ms = (time.perf_counter() - started) * 1000
        plan.timings = timings
        return plan, result

    def _recall(
        self, alert: Alert, query: str, deadline: float, notes: list[str], now: datetime | None
    ) -> tuple[RecallResult | None, str]:
        services = [alert.service] if alert.service else None

        def ask(arm: Arm) -> Callable[[], RecallResult]:
            return lambda: self._memory.recall(query, K, arm=arm, services=services, severity=alert.severity, now=now)

        budget = min(self._settings.triage_recall_budget_ms / 1000, deadline - time.perf_counter())
        result = _within(_POOL.submit(ask(Arm.RERANKED)), budget)
        if result is not None:
            return result, Arm.RERANKED.value
        notes.append(
            f"recall missed its budget of {self._settings.triage_recall_budget_ms:.0f} ms (embedding provider or "
            "store too slow): the plan rests on the lexical arm alone"
        )
        log.warning("triage.recall_past_budget", org_id=self._memory.org, budget_ms=budget * 1000)
        result = _within(_POOL.submit(ask(Arm.LEXICAL)), deadline - time.perf_counter())
        if result is None:
            notes.append("the lexical arm missed the whole triage's budget too: no memory could be read")
        return result, Arm.LEXICAL.value

    def _plan(
        self, alert: Alert, query: str, result: RecallResult | None, arm: str, deadline: float, notes: list[str],
        now: datetime,
    ) -> TriagePlan:  # fmt: skip
        hits = evidence.qualifying(result) if result is not None else []
        runbook_ids = list(evidence.backing(hits))
        facts = _within(_POOL.submit(lambda: self._facts(runbook_ids)), deadline - time.perf_counter())
        if facts is None:
            notes.append("the ledger, catalog and recent alerts were not read within the budget: runbook records "
                         "read as untried and the recurrence label as novel")  # fmt: skip
            facts = evidence.Facts({h.entry.id: h.entry for h in hits}, [], Topology(), [])
        label, alike = evidence.recurrence(alert, facts.recent, now)
        runbooks, skipped = evidence.runbooks(hits, facts.entries, facts.outcomes, alert.service)
        notes += skipped
        plan = TriagePlan(
            alert_id=alert.id, query=query, service=alert.service,
            severity=alert.severity.value if alert.severity else None, recurrence=label, similar_alerts=alike,
            seen_before=result.seen_before if result else None, evidence=result.evidence if result else None,
            mechanisms=evidence.mechanisms(hits), runbooks=runbooks, citations=evidence.citations(hits),
            recall_arm=arm, notes=[*notes, *(result.notes if result else [])],
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

    def _facts(self, runbook_ids: list[str]) -> evidence.Facts:
        snapshot = self._snapshot()
        seen = self._kept(ALERTS, evidence.seen)
        outcomes = [outcome for runbook in runbook_ids for outcome in snapshot.outcomes.get(runbook, [])]
        entries = self._memory.get_many(runbook_ids) if runbook_ids else {}
        return evidence.Facts(entries, outcomes, snapshot.topology, seen)

    def _narrate(self, plan: TriagePlan, client: LLMClient, result: RecallResult | None, deadline: float) -> None:
        budget = min(self._settings.triage_llm_budget_ms / 1000, deadline - time.perf_counter())
        if budget <= 0.05:
            plan.notes.append("no time left for the LLM: deterministic plan")
            return
        bodies = {hit.entry.id: hit.entry.body for hit in result.hits} if result else {}

        def ask() -> Any:
            system = narrate.system_text(self._memory.context().profile)
            answer = client.complete(system, narrate.evidence_text(plan, bodies), timeout=budget)
            return narrate.checked(answer, plan, client.name)

        future = _LLM_POOL.submit(ask)
        try:
            narrative = future.result(timeout=budget)
        except FutureTimeout:
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
