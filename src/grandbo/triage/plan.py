"""The triage plan: what an alert gets back, validated, with or without an LLM.

Every claim in a plan carries the ids of the memories behind it, and every id is one recall returned
for this organization. The deterministic fields (mechanisms, runbooks, citations, confidence, the "no
precedent" checklist) are always filled; an LLM only adds `narrative`, checked against the same ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from grandbo.errors import InvalidInputError, validation_problems
from grandbo.ingest.alert import Alert, severity_of
from grandbo.model import utcnow
from grandbo.triage.origin_model import Outlier, PlanChange, ProbableOrigin, RelatedIncident

# Of the alert among this org's recent alerts; "first" (none like it), never "novel": that is the word of the
# memory verdict, and an alert first of its kind this month can be `seen_before` in memory.
Recurrence = Literal["frequent", "rare", "first"]


class Citation(BaseModel):
    """A memory the plan rests on (an entry of this organization that recall returned)."""

    id: str
    kind: str
    title: str
    incident_id: str | None = None
    rank: int = Field(description="Its rank in the recall behind the plan.")
    evidence: float = Field(description="max(cosine, lexical idf coverage) of this memory against the alert.")


class Mechanism(BaseModel):
    """A likely mechanism: what happened last time, per past incident."""

    text: str
    incident_id: str | None
    cites: list[str] = Field(description="Ids of the memories that describe it.")
    confidence: float = Field(ge=0, le=1, description="Calibrated probability that this is the alert's mechanism.")


class RunbookSuggestion(BaseModel):
    """A runbook to try, in plan order, with its record from the effectiveness ledger."""

    id: str
    title: str
    steps: list[str] = Field(default_factory=list)
    win_rate: float = Field(description="Beta(1,1) posterior mean of success.")
    interval: tuple[float, float] = Field(description="90% credible interval of the success rate.")
    attempts: int
    successes: int
    mttr_median_s: float | None = None
    scope: str = Field(description="The service the record is for, or 'all services'.")
    cites: list[str] = Field(description="Ids of the memories that used or are this runbook.")
    confidence: float = Field(ge=0, le=1, description="Calibrated probability that this runbook applies.")
    untried: bool = Field(
        default=False,
        description="No record yet (never tried): its win rate is the prior. Listed after every runbook with a "
        "record, and a note says so when recall ranked it higher.",
    )


class NoPrecedent(BaseModel):
    """What to do when memory holds nothing close enough: what to collect first, and where to look."""

    reason: str
    collect: list[str]
    service: str | None = None
    depends_on: list[str] = Field(default_factory=list, description="What the service calls: the first suspects.")
    callers: list[str] = Field(default_factory=list, description="Services that call it and feel it.")


class NarrativeStep(BaseModel):
    text: str = Field(min_length=1, max_length=600)
    cites: list[str] = Field(default_factory=list, max_length=12)


class Narrative(BaseModel):
    """What the LLM wrote, after its citations were checked."""

    summary: str = Field(default="", max_length=1200)
    steps: list[NarrativeStep] = Field(default_factory=list, max_length=10)
    dropped_citations: list[str] = Field(default_factory=list, description="Ids it cited that were not retrieved.")
    model: str = ""


PLAN_GROUP_ALERTS = 50  # alert ids a plan lists of its group: a storm's 500 plans do not each hold 500 ids


class PlanGroup(BaseModel):
    """The alert group the alert joined (`tiers.grouping`): the plan speaks for all of its alerts."""

    id: str = Field(description="`GET /v1/alert-groups/{id}` answers it.")
    alerts: list[str] = Field(
        description=f"The group's alerts when the plan was made, in the order they joined (the first "
        f"{PLAN_GROUP_ALERTS})."
    )
    size: int = Field(0, description="How many alerts the group held when the plan was made.")
    services: list[str] = Field(description="Their services: recall's topology term weighs memories near any of them.")
    first_seen: datetime = Field(description="When the group's first alert fired.")


class TriageTimings(BaseModel):
    recall_ms: float = 0.0
    plan_ms: float = 0.0
    llm_ms: float = 0.0
    total_ms: float = 0.0


class TriagePlan(BaseModel):
    """A ranked, cited action plan for one alert."""

    alert_id: str | None = Field(
        default=None,
        description="The received alert's id (`GET /v1/alerts/{id}`); null for an alert given inline (a summary), "
        "which is not stored.",
    )
    query: str = Field(description="The sentence recall was asked, built from the normalized alert.")
    service: str | None = None
    severity: str | None = None
    recurrence: Recurrence = Field(
        description="Against this organization's alerts of the last 30 days: frequent (3+ like it), rare (1-2), "
        "first (none); whether memory holds a past incident like it is `seen_before`."
    )
    similar_alerts: int = Field(0, description="Alerts of the last 30 days like this one.")
    outlier: Outlier | None = Field(
        None,
        description="PagerDuty's Outlier Incident label: of the alerts on this service in the last 30 days, the "
        "share like this one: frequent (20% or more), rare (5% or less), anomalous (none); null between, or "
        "without a service.",
    )
    outlier_share: float | None = Field(None, description="That share (null when the service had no alert).")
    changes: list[PlanChange] = Field(
        default_factory=list,
        description="Changes on the alert's service and what it depends on (any depth) in the window before it "
        "(GRANDBO_CHANGE_WINDOW_MINUTES), best first, each with its score and what followed earlier ones like it.",
    )
    origin: ProbableOrigin | None = Field(None, description="Where it most likely started, and why.")
    related_incidents: list[RelatedIncident] = Field(
        default_factory=list, description="Open incidents on the same or related services (a few hops either way)."
    )
    seen_before: bool | None = None
    evidence: float | None = None
    mechanisms: list[Mechanism] = Field(default_factory=list)
    runbooks: list[RunbookSuggestion] = Field(default_factory=list)
    citations: list[Citation] = Field(default_factory=list)
    no_precedent: NoPrecedent | None = None
    group: PlanGroup | None = Field(None, description="The alert group it joined, when it joined one.")
    narrative: Narrative | None = None
    path: Literal["deterministic", "llm"] = "deterministic"
    recall_arm: str = Field("reranked", description="reranked, or lexical when recall missed its budget.")
    notes: list[str] = Field(default_factory=list, description="What degraded this plan, if anything.")
    timings: TriageTimings = Field(default_factory=TriageTimings)
    created_at: datetime = Field(default_factory=utcnow)

    @field_validator("recurrence", mode="before")
    @classmethod
    def _first(cls, value: object) -> object:
        return "first" if value == "novel" else value  # a plan stored before the word changed

    def known_ids(self) -> set[str]:
        """Every id the plan may cite: the memories, their incidents, the runbooks, the changes and the incidents
        and earlier changes their records name, the related incidents."""
        ids = {c.id for c in self.citations} | {r.id for r in self.runbooks}
        ids |= {c.id for c in self.changes} | {i.id for i in self.related_incidents}
        ids |= {cited for c in self.changes if c.record for cited in c.record.cites}
        return ids | {c.incident_id for c in self.citations if c.incident_id}


def alert_from(value: Alert | Mapping[str, Any]) -> Alert:
    """A normalized alert from an `Alert` or a mapping with at least `summary` (service, severity,
    description, labels optional); a bad one is refused with the field named."""
    if isinstance(value, Alert):
        return value
    data = dict(value)
    if "severity" in data and data["severity"] is not None and not hasattr(data["severity"], "tier"):
        given = data["severity"]
        data["severity"] = severity_of(given)
        if data["severity"] is None:
            raise InvalidInputError(
                f"Unknown severity {given!r}: use sev1..sev5, P1..P5, critical/high/medium/low/info.",
                detail={"severity": given},
            )
    summary = str(data.get("summary") or "")
    data.setdefault("source", "manual")
    data.setdefault("event_id", f"manual:{summary}:{data.get('service') or ''}")
    data.setdefault("fingerprint", str(data.get("labels", {}).get("alertname") or data["event_id"]))
    try:
        return Alert.model_validate(data)
    except ValidationError as error:
        problems = validation_problems(error)
        raise InvalidInputError(
            f"Invalid alert: {problems}. An alert needs at least a summary (what fired, in a sentence).",
            detail={"problems": problems},
        ) from error
