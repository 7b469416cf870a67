"""What the triage console shows for one alert or open incident: the sentence recall is asked, the ranked
matches with each part of their score as a bar, the findings they cite, and the runbooks with their record.

Recall runs again when the page is drawn (through the same seam as every caller), so a vote recorded a
moment ago is already in the runbook's win rate and in the re-ranker's runbook component; the answer the
webhook stored when the alert arrived stays on the alert.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import structlog

from grandbo.errors import ConflictError, GrandboError
from grandbo.memory import OrgMemory
from grandbo.model import NO_VECTOR_VERDICT, PENDING_VERDICT, Hit, Kind, RecallResult, Severity
from grandbo.retrieval.rerank import runbook_of
from grandbo.tiers.effectiveness import Effectiveness, OutcomeKind
from grandbo.tiers.incident_model import Incident, IncidentStatus
from grandbo.triage import TriagePlan

log = structlog.get_logger(__name__)

MATCHES = 8
ARM_DEPTH = 25  # the arms' default candidate lists: a rank is drawn against this depth
SubjectKind = Literal["alert", "incident"]


@dataclass(frozen=True)
class Subject:
    """The alert or open incident on screen."""

    kind: SubjectKind
    id: str
    title: str
    service: str | None
    severity: Severity | None
    query: str
    at: datetime
    state: str
    services: tuple[str, ...] = ()

    @property
    def marker(self) -> str:
        """What the ledger's outcome comment says, so that one subject gets one vote per runbook."""
        return f"console {self.kind} {self.id}"


@dataclass(frozen=True)
class Bar:
    label: str
    value: float  # 0..1, the bar's length
    text: str
    negative: bool = False


@dataclass
class Match:
    hit: Hit
    bars: list[Bar]
    runbook: str | None


@dataclass
class RunbookCard:
    id: str
    title: str
    known: bool
    overall: Effectiveness
    local: Effectiveness | None
    cited_by: list[int]
    vote: str | None = None


@dataclass
class Triage:
    subject: Subject
    result: RecallResult | None
    matches: list[Match] = field(default_factory=list)
    findings: list[Hit] = field(default_factory=list)
    runbooks: list[RunbookCard] = field(default_factory=list)
    error: str | None = None
    plan: TriagePlan | None = None

    @property
    def verdict(self) -> str:
        if self.result is None:
            return "unavailable"
        if self.result.calibration == NO_VECTOR_VERDICT:  # before "novel": no lexical match is no verdict either
            return "unjudged"
        if self.result.calibration == PENDING_VERDICT:  # the same: the match may be one still waiting
            return "pending"
        if not self.result.hits or self.result.seen_before is False:
            return "novel"
        if self.result.seen_before is None:
            return "uncalibrated"
        return "seen"


def alert_subject(memory: OrgMemory, alert_id: str) -> Subject:
    stored = memory.alerts.get(alert_id)
    alert = stored.alert
    return Subject(
        "alert",
        stored.id,
        alert.summary,
        alert.service,
        alert.severity,
        stored.query,
        alert.received_at,
        f"{alert.status}, {stored.state.replace('_', ' ')}",
        (alert.service,) if alert.service else (),
    )


def incident_query(incident: Incident) -> str:
    """The sentence for an open incident: its title, its symptoms, and its services when not named."""
    text = incident.title.strip().rstrip(".")
    if incident.symptoms:
        text += "; " + "; ".join(s.strip().rstrip(".") for s in incident.symptoms if s.strip())
    missing = [s for s in incident.services if s not in text.lower()]
    if missing:
        text += " on " + ", ".join(missing)
    if len(re.findall(r"\w+", text)) < 3:
        text += " incident under investigation"
    return text


def incident_subject(memory: OrgMemory, incident_id: str) -> Subject:
    incident = memory.incidents.get(incident_id)
    return Subject(
        "incident",
        incident.id,
        incident.title,
        incident.services[0] if incident.services else None,
        incident.severity,
        incident_query(incident),
        incident.started_at,
        incident.status.value,
        tuple(incident.services),
    )


def queue(memory: OrgMemory, limit: int = 30) -> tuple[list[Subject], list[Subject]]:
    """The alerts received (newest first) and the open incidents (newest first)."""
    alerts = [
        Subject(
            "alert",
            s.id,
            s.alert.summary,
            s.alert.service,
            s.alert.severity,
            s.query,
            s.alert.received_at,
            s.alert.status,
        )
        for s in memory.alerts.recent(limit)
    ]
    open_ = sorted(memory.incidents.find(IncidentStatus.OPEN), key=lambda i: i.started_at, reverse=True)[:limit]
    incidents = [
        Subject(
            "incident",
            i.id,
            i.title,
            i.services[0] if i.services else None,
            i.severity,
            "",
            i.started_at,
            i.status.value,
        )
        for i in open_
    ]
    return alerts, incidents


def bars(hit: Hit) -> list[Bar]:
    """The parts of a hit's score: where each arm ranked it, then the re-ranker's components."""
    why, out = hit.why, []
    if why.lexical:
        lex = why.lexical
        out.append(
            Bar(
                "lexical rank",
                _rank_value(lex.rank),
                f"#{lex.rank} · BM25 {lex.score:.2f}, {lex.coverage:.0%} of the query's weight",
            )
        )
    else:
        out.append(Bar("lexical rank", 0.0, "not matched by its words"))
    if why.vector:
        out.append(
            Bar("vector rank", _rank_value(why.vector.rank), f"#{why.vector.rank} · cosine {why.vector.similarity:.2f}")
        )
    else:
        out.append(Bar("vector rank", 0.0, "not matched by meaning"))
    if why.rerank:
        r = why.rerank
        for label, part, negative in (
            ("service", r.service, False),
            ("severity", r.severity, False),
            ("runbook win rate", r.effectiveness, False),
            ("age", r.age, True),
        ):
            text = f"{part.value:.2f} × {part.weight:.2f} = {part.contribution:+.3f} · {part.note}"
            out.append(Bar(label, max(0.0, min(1.0, part.value)), text, negative))
    return out


def _rank_value(rank: int) -> float:
    return max(0.04, 1.0 - (rank - 1) / max(ARM_DEPTH, rank))


def build(memory: OrgMemory, subject: Subject) -> Triage:
    """Recall for the subject now and gather what the page draws."""
    try:
        result = memory.recall(
            subject.query, MATCHES, services=list(subject.services) or None, severity=subject.severity
        )
    except GrandboError as error:
        return Triage(subject, None, error=error.message)
    view = Triage(subject, result, plan=_plan(memory, subject))
    cards: dict[str, RunbookCard] = {}
    for hit in result.hits:
        runbook = runbook_of(hit.entry)
        view.matches.append(Match(hit, bars(hit), runbook))
        if hit.entry.kind in (Kind.FINDING, Kind.POSTMORTEM):
            view.findings.append(hit)
        if runbook is not None:
            if runbook not in cards:
                cards[runbook] = _card(memory, runbook, subject)
            cards[runbook].cited_by.append(hit.rank)
    view.runbooks = list(cards.values())  # in the order of the best match that is or cites each
    return view


def _plan(memory: OrgMemory, subject: Subject) -> TriagePlan | None:
    """The plan kept with an alert (as the webhook made it, or as the LLM narrated it later); an open incident's
    plan is made now, without an LLM."""
    if subject.kind == "alert":
        stored = memory.alerts.find(subject.id)
        if stored is None or (stored.plan is None and stored.state != "recalled"):
            return None
        if stored.plan is None:  # kept in a shape this release cannot read: made again, as for an incident
            log.warning("console.kept_plan_unreadable", org_id=memory.org, alert_id=stored.id)
            return memory.triage(stored.alert, narrate=False)
        return memory.triage.current(stored.plan)  # its runbooks' records as the ledger holds them now
    alert = {"summary": subject.query, "service": subject.service, "severity": subject.severity}
    return memory.triage(alert, narrate=False)


def _card(memory: OrgMemory, runbook_id: str, subject: Subject) -> RunbookCard:
    entry = memory.find(runbook_id)
    known = entry is not None and entry.kind is Kind.RUNBOOK
    outcomes = memory.ledger.outcomes([runbook_id])
    vote = next((o.kind for o in reversed(outcomes) if o.comment == subject.marker), None)
    local = memory.ledger.effectiveness(runbook_id, subject.service) if subject.service else None
    return RunbookCard(
        id=runbook_id,
        title=entry.title if known and entry else runbook_id,
        known=known,
        overall=memory.ledger.effectiveness(runbook_id),
        local=local if local and local.attempts else None,
        cited_by=[],
        vote={OutcomeKind.SUCCEEDED: "worked", OutcomeKind.FAILED: "did not work"}.get(vote) if vote else None,
    )


def vote(memory: OrgMemory, subject: Subject, runbook_id: str, worked: bool, actor: str) -> tuple[float, float, int]:
    """Record what the runbook did for the subject (succeeded or failed, with its service); return the win
    rate before and after and the attempts now. One vote per subject and runbook: a second is refused."""
    before = memory.ledger.effectiveness(runbook_id)
    if any(o.comment == subject.marker for o in memory.ledger.outcomes([runbook_id])):
        raise ConflictError(
            f"An outcome of {runbook_id} for this {subject.kind} is already recorded; the ledger keeps one per "
            f"{subject.kind}. Report a later result through `POST /v1/runbooks/{runbook_id}/outcomes`.",
            detail={"runbook_id": runbook_id},
        )
    memory.ledger.record(
        runbook_id,
        OutcomeKind.SUCCEEDED if worked else OutcomeKind.FAILED,
        service=subject.service,
        incident_id=subject.id if subject.kind == "incident" else None,
        comment=subject.marker,
        actor=actor,
    )
    after = memory.ledger.effectiveness(runbook_id)
    return before.win_rate, after.win_rate, after.attempts
