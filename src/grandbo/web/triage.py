"""What the triage console shows for one alert or open incident: the sentence recall is asked, the ranked
matches with each part of their score as a bar, the findings they cite, and the runbooks with their record.

Recall runs again when the page is drawn (through the same seam as every caller), so a vote recorded a
moment ago is already in the runbook's win rate and in the re-ranker's runbook component; the answer the
webhook stored when the alert arrived stays on the alert.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal
from urllib.parse import urlencode

import structlog

from grandbo.errors import ConflictError, GrandboError, NotFoundError
from grandbo.memory import OrgMemory
from grandbo.model import NO_VECTOR_VERDICT, PENDING_VERDICT, Hit, Kind, RecallResult, Severity
from grandbo.names import service_name
from grandbo.retrieval.rerank import runbook_of
from grandbo.tiers.alerts import LISTED, StoredAlert
from grandbo.tiers.effectiveness import Effectiveness, OutcomeKind
from grandbo.tiers.grouping import AlertGroup
from grandbo.tiers.incident_model import Incident, IncidentStatus
from grandbo.triage import TriagePlan
from grandbo.web.links import web_link

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
    links: tuple[tuple[str, str], ...] = ()  # (what it is, an http(s) URL): the source incident, panel, runbook
    group: str | None = None  # the alert group an alert joined (`tiers.grouping`)

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
        links_of([stored]),
    )


LINK_NAMES = {
    "incident": "PagerDuty incident",
    "source": "Source (the alert's graph or rule)",
    "panel": "Grafana panel",
    "dashboard": "Grafana dashboard",
    "runbook": "Runbook",
}


def links_of(alerts: list[StoredAlert]) -> tuple[tuple[str, str], ...]:
    """The links the alerts' payloads carried, named, each URL once, only http(s) ones."""
    out: dict[str, str] = {}
    for stored in alerts:
        for kind, url in stored.alert.links.items():
            if kind in LINK_NAMES and web_link(url) and url not in out:
                suffix = f" ({stored.alert.source})" if kind == "source" else ""
                out[url] = LINK_NAMES[kind] + suffix
    return tuple((name, url) for url, name in out.items())


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
        links_of([a for ref in incident.alerts[:10] if (a := memory.alerts.find(ref)) is not None]),
    )


SOURCES = ("alertmanager", "grafana", "pagerduty", "opsgenie", "manual")
FIRING_READ = 200  # firing alerts read to order by severity: a queue longer than this says so
RESOLVED_SHOWN = 30


@dataclass(frozen=True)
class QueueFilters:
    """The queue's filters, as the page's query parameters: alert status, severity, service and source."""

    status: str = ""
    severity: str = ""
    service: str = ""
    source: str = ""

    @classmethod
    def read(cls, asked: Mapping[str, str]) -> QueueFilters:
        """The filters a query string asks for (the page's own, or the one a form carries back); a value the
        queue does not know reads as no filter."""
        status, severity, source = (asked.get(name, "") for name in ("status", "severity", "source"))
        return cls(
            status if status in ("firing", "resolved") else "",
            severity if severity in {s.value for s in Severity} else "",
            service_name(asked.get("service", "")[:200]),
            source if source in SOURCES else "",
        )

    @property
    def query(self) -> str:
        """The filters as a query string's pairs (empty ones left out), for the queue's links."""
        pairs = {"status": self.status, "severity": self.severity, "service": self.service, "source": self.source}
        return urlencode({name: value for name, value in pairs.items() if value})


@dataclass(frozen=True)
class GroupRow:
    """Firing alerts of one alert group, folded under one row of the queue (at its most urgent alert's place)."""

    group: AlertGroup
    alerts: list[Subject]

    @property
    def title(self) -> str:
        return min(self.alerts, key=lambda s: (s.at, s.id)).title  # the first alert names it, as its incident

    @property
    def services(self) -> str:
        return ", ".join(self.group.services) or "no service"


@dataclass
class Queue:
    """Open incidents, firing alerts (worst severity first, then newest; the alerts of one group folded under
    one row), then resolved alerts (newest first)."""

    incidents: list[Subject]
    firing: list[Subject]
    resolved: list[Subject]
    more_firing: bool = False
    rows: list[Subject | GroupRow] = field(default_factory=list)  # the firing alerts as drawn

    @property
    def first(self) -> Subject | None:
        return next(iter(self.incidents + self.firing + self.resolved), None)


def folded(memory: OrgMemory, firing: list[Subject]) -> list[Subject | GroupRow]:
    """The firing alerts (in queue order) with each group of two or more of them folded under one row, placed
    where its most urgent alert was; each such group read once."""
    members: dict[str, list[Subject]] = {}
    for subject in firing:
        if subject.group:
            members.setdefault(subject.group, []).append(subject)
    rows: list[Subject | GroupRow] = []
    drawn: set[str] = set()
    for subject in firing:
        gid = subject.group
        if gid is None or len(members[gid]) < 2:
            rows.append(subject)
        elif gid not in drawn:
            drawn.add(gid)
            group = memory.alert_groups.find(gid)
            rows += [GroupRow(group, members[gid])] if group else members[gid]
    return rows


def _urgency(subject: Subject) -> tuple[int, float]:
    return (subject.severity.tier if subject.severity else 6, -subject.at.timestamp())


def _alert_row(stored: StoredAlert) -> Subject:
    alert = stored.alert
    return Subject(
        "alert", stored.id, alert.summary, alert.service, alert.severity, stored.query, alert.received_at, alert.status,
        group=stored.group_id,
    )  # fmt: skip


def queue(memory: OrgMemory, filters: QueueFilters | None = None, limit: int = 30) -> Queue:
    """What the on-call engineer works through, filtered: open incidents (an alert's source filter leaves them
    out, as does asking for resolved alerts), firing alerts by severity then newest, resolved ones newest first."""
    f = filters or QueueFilters()
    service, source, severity = f.service or None, f.source or None, f.severity or None
    firing: list[Subject] = []
    more = False
    if f.status in ("", "firing"):
        stored, after = memory.alerts.page(
            FIRING_READ, status="firing", service=service, source=source, severity=severity, keys=LISTED
        )
        firing, more = sorted(map(_alert_row, stored), key=_urgency), after is not None
    resolved: list[Subject] = []
    if f.status in ("", "resolved"):
        stored, _ = memory.alerts.page(
            RESOLVED_SHOWN, status="resolved", service=service, source=source, severity=severity, keys=LISTED
        )
        resolved = sorted(map(_alert_row, stored), key=lambda s: s.at, reverse=True)
    incidents: list[Subject] = []
    if not f.source and f.status != "resolved":
        for i in memory.incidents.summaries():  # kept by the process: not every open incident read on each view
            if not i.open or (f.service and f.service not in i.services) or (f.severity and i.severity != f.severity):
                continue
            incidents.append(Subject(
                "incident", i.id, i.title, i.services[0] if i.services else None, i.severity, "", i.started_at,
                IncidentStatus.OPEN.value,
            ))  # fmt: skip
        incidents = sorted(incidents, key=_urgency)[:limit]
    return Queue(incidents, firing, resolved, more, folded(memory, firing))


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
    # One order on the page: the plan's (runbooks with a record before untried ones), then those only a match
    # cites, in the order of the best match that is or cites each.
    planned = [rb.id for rb in view.plan.runbooks] if view.plan else []
    for runbook in planned:
        if runbook not in cards:
            cards[runbook] = _card(memory, runbook, subject)
    view.runbooks = sorted(cards.values(), key=lambda c: planned.index(c.id) if c.id in planned else len(planned))
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
    marked = memory.ledger.marked(runbook_id, subject.marker)
    vote = marked[-1].kind if marked else None
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
    if memory.ledger.marked(runbook_id, subject.marker):
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


def undo(memory: OrgMemory, subject: Subject, runbook_id: str, actor: str) -> tuple[float, float, int]:
    """Take back the console's vote on the runbook for the subject: its outcome leaves the ledger, so the record
    moves back once; a second undo finds nothing to take back and is refused."""
    before = memory.ledger.effectiveness(runbook_id)
    if not memory.ledger.withdraw(runbook_id, subject.marker, actor=actor):
        raise NotFoundError(
            f"No vote on {runbook_id} for this {subject.kind} to take back: it was never recorded here, or was "
            "already undone.",
            detail={"runbook_id": runbook_id},
        )
    after = memory.ledger.effectiveness(runbook_id)
    return before.win_rate, after.win_rate, after.attempts
