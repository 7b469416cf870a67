"""What the agent tools do, over the org-bound handle; the same six tools whatever carries them (MCP over
stdio or HTTP, or an LLM's function calling through `grandbo tools`)."""

from __future__ import annotations

from typing import Any

from grandbo.errors import InvalidInputError
from grandbo.memory import OrgMemory
from grandbo.model import Hit, RecallResult
from grandbo.retrieval.recall import MAX_K
from grandbo.tiers.context import DEFAULT_BUDGET, verdict
from grandbo.tiers.effectiveness import OutcomeKind, ReportedOutcome
from grandbo.tiers.incident_model import FindingWord
from grandbo.tiers.keys import Scope

QUERY_DESCRIPTION = (
    "Ask the organization's memory whether this has happened before and what worked. `topic` must be a real "
    "sentence describing what you have found so far: the suspected mechanism, the affected component and the "
    "symptom pattern, e.g. 'Redis connection resets during a key eviction spike; auth-service p99 above "
    "1200ms'. Never pass an incident's title, a slug or a bare keyword (a lone identifier such as "
    "ERR_CONN_RESET or INC-044 is looked up exactly instead). Returns ranked past incidents, "
    "findings, runbooks and post-mortems, each with a compact explanation you can cite (its id, why it "
    "matched, the runbook's win rate), and an honest verdict: 'no similar past incident' when even the best "
    "match is weak."
)
FINDING_DESCRIPTION = (
    "Record a finding of an open incident: a hypothesis while you investigate, corroborated once evidence "
    "confirms it, refuted when ruled out. Only corroborated findings become memory, when the incident closes."
)
OUTCOME_DESCRIPTION = (
    "Report what a runbook did on an incident (recommended, executed, succeeded or failed, with the time to "
    "mitigate): the effectiveness ledger that ranks runbooks learns from it."
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

TOOLS: dict[str, tuple[Scope, str]] = {
    "query_org_memory": (Scope.READ, QUERY_DESCRIPTION),
    "record_finding": (Scope.WRITE, FINDING_DESCRIPTION),
    "report_outcome": (Scope.WRITE, OUTCOME_DESCRIPTION),
    "get_context_block": (Scope.READ, CONTEXT_DESCRIPTION),
    "triage_alert": (Scope.READ, TRIAGE_DESCRIPTION),
    "record_edit": (Scope.WRITE, EDIT_DESCRIPTION),
}


def _why(hit: Hit) -> str:
    """One line an agent can quote: which arms found it and what moved it."""
    why, parts = hit.why, []
    if why.lexical:
        shares = why.lexical.terms
        terms = ", ".join(sorted(shares, key=lambda t: -shares[t])[:4])
        parts.append(f"lexical #{why.lexical.rank} ({terms})")
    if why.vector:
        parts.append(f"vector #{why.vector.rank} (cos {why.vector.similarity:.2f})")
    if why.rerank:
        r = why.rerank
        moved = [
            f"{name} {component.contribution:+.2f} ({component.note})"
            for name, component in (("service", r.service), ("runbook", r.effectiveness))
            if component.note and abs(component.contribution) >= 0.005
        ]
        parts.extend(moved)
    return "; ".join(parts)


def compact(result: RecallResult) -> dict[str, Any]:
    """The recall result as an agent needs it: citable ids, a one-line reason each, and the verdict."""
    return {
        "verdict": verdict(result),
        "evidence": result.evidence,
        "memories": [
            {
                "rank": hit.rank,
                "id": hit.entry.id,
                "kind": hit.entry.kind.value,
                "title": hit.entry.title,
                "summary": hit.entry.body[:400],
                "services": hit.entry.services,
                "severity": hit.entry.severity.value if hit.entry.severity else None,
                "occurred_at": hit.entry.occurred_at.date().isoformat(),
                "label": hit.label,
                "sort_score": round(hit.sort_score, 4),  # falls with rank
                "composite": round(hit.composite, 4) if hit.composite is not None else None,  # re-ranked only
                "score": round(hit.sort_score, 4),  # sort_score's old name, for agents written before it
                "why": _why(hit),
            }
            for hit in result.hits
        ],
        "notes": result.notes,
    }


def query_org_memory(memory: OrgMemory, topic: str, k: int = 5) -> dict[str, Any]:
    return compact(memory.recall(topic, max(1, min(k, MAX_K))))  # one limit on k, as over REST


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
) -> dict[str, Any]:
    finding = memory.incidents.add_finding(
        incident_id, summary, status=status, mechanism=mechanism, component=component, symptom=symptom,
        root_cause=root_cause, remediation=remediation, runbook_id=runbook_id, actor="mcp",
    )  # fmt: skip
    return {"incident_id": incident_id, "finding": finding.model_dump(mode="json")}


def report_outcome(
    memory: OrgMemory,
    runbook_id: str,
    outcome: ReportedOutcome,
    incident_id: str | None = None,
    service: str | None = None,
    time_to_mitigate_s: float | None = None,
    comment: str = "",
) -> dict[str, Any]:
    recorded = memory.ledger.record(
        runbook_id, OutcomeKind(outcome), incident_id=incident_id, service=service,
        time_to_mitigate_s=time_to_mitigate_s, comment=comment, actor="mcp",
    )  # fmt: skip
    record = memory.ledger.effectiveness(runbook_id)
    return {
        "recorded": recorded.model_dump(mode="json", exclude={"org_id", "seq"}),
        "runbook": {"attempts": record.attempts, "win_rate": record.win_rate, "interval": record.interval},
    }


def get_context_block(
    memory: OrgMemory, content_type: str | None = None, topic: str | None = None, budget: int = DEFAULT_BUDGET
) -> dict[str, Any]:
    block = memory.context(content_type=content_type, topic=topic, budget=budget)
    return {"context": block.text, **block.model_dump(mode="json", include={"verdict", "overridden", "truncated"})}


def triage_alert(
    memory: OrgMemory,
    summary: str | None = None,
    service: str | None = None,
    severity: str | None = None,
    description: str = "",
    alert_id: str | None = None,
) -> dict[str, Any]:
    if alert_id:
        alert: Any = memory.alerts.get(alert_id).alert
    elif summary:
        alert = {"summary": summary, "service": service, "severity": severity, "description": description}
    else:
        raise InvalidInputError("Give the alert's summary (what fired, in a sentence) or a received alert's id.",
                                detail={})  # fmt: skip
    return memory.triage(alert).model_dump(mode="json", exclude={"created_at"})


def record_edit(memory: OrgMemory, draft: str, edited: str, content_type: str, author: str) -> dict[str, Any]:
    """The edit signal as stored (without the texts the agent already holds) and the rule it taught, if any."""
    signal, note = memory.learning.record_edit(draft, edited, content_type=content_type, author=author, actor="mcp")
    return {
        "signal": signal.model_dump(mode="json", exclude={"draft", "edited"}),
        "note": note.model_dump(mode="json") if note else None,
    }
