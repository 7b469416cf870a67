"""What the agent tools do, over the org-bound handle; the same thirteen tools whatever carries them (MCP over
stdio or HTTP, `POST /v1/tools/{name}`, or an LLM's function calling through `grandbo tools`). A tool that is one
call of its tier with the same arguments (`get_incident`, `close_incident`) makes that call where it is registered
(`mcp/incident_tools.py`), so the tier's signature is not written again here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from grandbo.errors import InvalidInputError
from grandbo.mcp import answers
from grandbo.mcp.answers import (
    ChangeList,
    ChangeSeen,
    ContextAnswer,
    Detail,
    EditRecorded,
    FindingRecorded,
    IncidentList,
    LedgerRecord,
    MemoryRead,
    OutcomeReported,
    Recalled,
    RunbookRead,
    clip,
)
from grandbo.memory import OrgMemory
from grandbo.pages import MAX_PAGE_BYTES, decode, encode, filled
from grandbo.retrieval.recall import MAX_K
from grandbo.tiers.alert_groups import refuse_what_alerts_give
from grandbo.tiers.change_model import ChangeKind
from grandbo.tiers.context import DEFAULT_BUDGET
from grandbo.tiers.effectiveness import OutcomeKind, ReportedOutcome
from grandbo.tiers.incident_model import FindingWord, Incident, IncidentStatus
from grandbo.tiers.incidents import LARGEST_INCIDENT
from grandbo.tiers.runbooks import steps_of
from grandbo.triage.plan import TriagePlan

QUERY_DESCRIPTION = (
    "Ask the organization's memory whether this has happened before and what worked. `topic` must be a real "
    "sentence describing what you have found so far: the suspected mechanism, the affected component and the "
    "symptom pattern, e.g. 'Redis connection resets during a key eviction spike; auth-service p99 above "
    "1200ms'. Never pass an incident's title, a slug or a bare keyword (a lone identifier such as "
    "ERR_CONN_RESET or INC-044 is looked up exactly instead). Returns ranked past incidents, "
    "findings, runbooks and post-mortems, each with its id to cite and the sentence of it that matched, and an "
    "honest verdict: 'no similar past incident' when even the best match is weak. Compact by default; "
    "detail='full' adds summaries, scores and the arms that found each; get_memory reads one whole."
)
FINDING_DESCRIPTION = (
    "Record a finding of an open incident: a hypothesis while you investigate, corroborated once evidence "
    "confirms it, refuted when ruled out. Only corroborated findings become memory, when the incident closes."
)
OUTCOME_DESCRIPTION = (
    "Report what a runbook did on an incident (recommended, executed, succeeded or failed, with the time to "
    "mitigate in seconds): the effectiveness ledger that ranks runbooks learns from it. Idempotent per (incident "
    "or alert, runbook): reporting the same result again, or closing the incident with it, counts once; the "
    "other result (failed, then succeeded) replaces the first."
)
CONTEXT_DESCRIPTION = (
    "The organization's context block for a system prompt: who it is, how it writes (voice, preferred "
    "words, learned rules); with `topic`, memories recalled about it in a separate block."
)

EDIT_DESCRIPTION = (
    "Report how a person edited your draft before it went out: pass the draft you wrote and the text they "
    "sent, the content type (status-update, post-mortem, customer-notice...) and who edited it. The edit is "
    "stored at once; with an LLM configured, its classification follows the answer (awaiting_llm). Every third "
    "edit of a kind teaches the organization a writing rule, shown in get_context_block once a human approves it."
)

BUDGET_DESCRIPTION = "Characters the profile part may take; learned lines are dropped before typed ones (1-100000)."

TRIAGE_DESCRIPTION = (
    "Turn an alert into a short, cited action plan from this organization's memory: the likely mechanism(s), "
    "the runbooks to try in order with their win rate, credible interval and attempts, the past incidents and "
    "findings behind each (ids you can cite), a calibrated confidence per suggestion, and, when nothing "
    "similar happened before, what to collect first and which services to look at. Pass the alert's summary "
    "(what fired, in a sentence) and its service and severity, or the id of an alert Grandbo received."
)

INCIDENT_OPEN_DESCRIPTION = (
    "Open an incident to investigate: its title, services, severity, symptoms and the alert ids behind it; or, "
    "with from_alerts, from alerts Grandbo received (an alert group's), which give it all but the title. "
    "Returns the incident with its id: record findings on it, then close it with what fixed it."
)
INCIDENT_LIST_DESCRIPTION = "List this organization's incidents, newest first: open ones to work on, or closed ones."
INCIDENT_GET_DESCRIPTION = "Read one incident whole: its findings, their statuses, and the memories its close wrote."
INCIDENT_CLOSE_DESCRIPTION = (
    "Close an incident: the resolution, the runbook used, whether it worked and the time to mitigate in seconds. "
    "Its corroborated findings become memory, and the runbook's outcome enters its record once, however many "
    "times it was also reported."
)
CHANGES_DESCRIPTION = (
    "List what changed (deploys, rollbacks, config pushes, flag flips) as the change sources reported it, the "
    "latest first: for one service, one kind, or a time window (e.g. the hour before an alert fired)."
)
MEMORY_DESCRIPTION = "Read one memory whole by its id (any status), with the history of events that shaped it."
RUNBOOK_DESCRIPTION = (
    "Read a runbook: its steps in order and its record (attempts, win rate with its 90% credible interval, "
    "median time to mitigate), for all services or one."
)


def query_org_memory(memory: OrgMemory, topic: str, k: int = 5, detail: Detail = "compact") -> Recalled:
    result = memory.recall(topic, max(1, min(k, MAX_K)))
    return answers.full(result) if detail == "full" else answers.compact(result, topic)


def record_finding(
    memory: OrgMemory,
    incident_id: str,
    summary: str,
    status: FindingWord = "hypothesis",
    mechanism: str = "",
    component: str = "",
    symptom: str = "",
    root_cause: str = "",
    remediation: str = "",
    runbook_id: str | None = None,
) -> FindingRecorded:
    finding = memory.incidents.add_finding(
        incident_id, summary, status=status, mechanism=mechanism, component=component, symptom=symptom,
        root_cause=root_cause, remediation=remediation, runbook_id=runbook_id, actor="mcp",
    )  # fmt: skip
    return FindingRecorded(incident_id=incident_id, finding=finding)


def _record(memory: OrgMemory, runbook_id: str) -> LedgerRecord:
    record = memory.ledger.effectiveness(runbook_id)
    return LedgerRecord(attempts=record.attempts, successes=record.successes, win_rate=record.win_rate,
                         interval=record.interval)  # fmt: skip


def report_outcome(
    memory: OrgMemory,
    runbook_id: str,
    outcome: ReportedOutcome,
    incident_id: str | None = None,
    service: str | None = None,
    time_to_mitigate_s: float | None = None,
    comment: str = "",
) -> OutcomeReported:
    """Idempotent per (incident or alert, runbook): the ledger keys such an outcome by them."""
    recorded = memory.ledger.record(
        runbook_id, OutcomeKind(outcome), incident_id=incident_id, service=service,
        time_to_mitigate_s=time_to_mitigate_s, comment=comment, actor="mcp",
    )  # fmt: skip
    return OutcomeReported(recorded=recorded, runbook=_record(memory, runbook_id))


def get_context_block(
    memory: OrgMemory, content_type: str | None = None, topic: str | None = None, budget: int = DEFAULT_BUDGET
) -> ContextAnswer:
    block = memory.context(content_type=content_type, topic=topic, budget=budget)
    return ContextAnswer(context=block.text, verdict=block.verdict, overridden=block.overridden,
                         truncated=block.truncated)  # fmt: skip


def triage_alert(
    memory: OrgMemory,
    summary: str | None = None,
    service: str | None = None,
    severity: str | None = None,
    description: str = "",
    alert_id: str | None = None,
) -> TriagePlan:
    if alert_id:
        alert: Any = memory.alerts.get(alert_id).alert
    elif summary and summary.strip():
        alert = {"summary": summary, "service": service, "severity": severity, "description": description}
    else:
        raise InvalidInputError(
            "triage_alert needs `summary` (what fired, in a sentence) or `alert_id` (an alert Grandbo received); "
            "neither was given.",
            detail={"needs": ["summary", "alert_id"]},
        )
    return memory.triage(alert)


def record_edit(memory: OrgMemory, draft: str, edited: str, content_type: str, author: str) -> EditRecorded:
    """The edit signal as stored (without the texts the agent already holds) and the rule it taught, if any."""
    signal, note = memory.learning.record_edit(draft, edited, content_type=content_type, author=author, actor="mcp")
    return EditRecorded(signal=signal.model_dump(mode="json", exclude={"draft", "edited"}), note=note)


def open_incident(
    memory: OrgMemory,
    title: str | None,
    services: Sequence[str] = (),
    severity: str | None = None,
    symptoms: Sequence[str] = (),
    alerts: Sequence[str] = (),
    started_at: datetime | None = None,
    incident_id: str | None = None,
    from_alerts: Sequence[str] = (),
) -> Incident:
    """By hand, or from received alerts (`from_alerts`): the rules and errors of `POST /v1/incidents`."""
    if from_alerts:
        refuse_what_alerts_give(services=services, severity=severity, started_at=started_at, symptoms=symptoms,
                                alerts=alerts)  # fmt: skip
        return memory.alert_groups.open_from_alerts(from_alerts, title=title, incident_id=incident_id, actor="mcp")
    if title is None:
        raise InvalidInputError("An incident needs a title (what is happening), or from_alerts.", detail={})
    return memory.incidents.open(
        title, services=services, severity=severity, symptoms=symptoms, alerts=alerts, started_at=started_at,
        incident_id=incident_id, actor="mcp",
    )  # fmt: skip


def list_incidents(
    memory: OrgMemory, status: str | None = "open", limit: int = 20, cursor: str | None = None
) -> IncidentList:
    """The most recently changed first, after `cursor`: at most `limit`, and as many as hold half of a page's bytes
    (the answer carries them twice, as structured content and as text). Reads those, not the org's whole list."""
    wanted = IncidentStatus(status) if status else None
    _, found, more = filled(lambda n, after: memory.incidents.page(n, after=after, status=wanted), limit,
                            decode(cursor), LARGEST_INCIDENT, budget=MAX_PAGE_BYTES // 2)  # fmt: skip
    return IncidentList(incidents=found, more=more is not None, next_cursor=encode(more))


def get_memory(memory: OrgMemory, memory_id: str, history: bool = True) -> MemoryRead:
    return MemoryRead(entry=memory.get(memory_id), history=memory.history(memory_id) if history else None)


def get_runbook(memory: OrgMemory, runbook_id: str, service: str | None = None) -> RunbookRead:
    entry = memory.runbooks.get(runbook_id)
    record = memory.ledger.effectiveness(runbook_id, service)
    return RunbookRead(runbook=entry, steps=steps_of(entry), effectiveness=record)


def list_changes(
    memory: OrgMemory,
    service: str | None = None,
    kind: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 20,
) -> ChangeList:
    found, _ = memory.changes.find(service=service, kind=ChangeKind(kind) if kind else None, since=since,
                                   until=until, limit=limit + 1)  # fmt: skip
    seen = [
        ChangeSeen(id=f"{c.source}:{c.id}", service=c.service, kind=c.kind.value, summary=clip(c.summary, 200),
                   version=c.version, at=c.at.isoformat(), url=c.url)
        for c in found[:limit]
    ]  # fmt: skip
    return ChangeList(changes=seen, more=len(found) > limit)
