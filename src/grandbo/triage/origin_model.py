"""What a plan says about what changed and where it started: the changes before the alert, ranked and explained,
what followed earlier changes like each, the probable origin, open incidents on related services, and the outlier
label. Value types only; `triage.changes` builds them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

# PagerDuty's Outlier Incident labels (docs/architecture.md, "Outlier labels").
Outlier = Literal["frequent", "rare", "anomalous"]


class ScorePart(BaseModel):
    """One component of a change's score: its value, its weight, what it adds, and why."""

    value: float
    weight: float
    contribution: float
    note: str


class RunbookRecord(BaseModel):
    """How a runbook did on the incidents that followed earlier changes like this one (the ledger's results)."""

    id: str
    worked: int
    tried: int


class ChangeRecord(BaseModel):
    """What followed the latest earlier changes of the same kind on the same service."""

    text: str = Field(description="The claim in a sentence, every id in it cited.")
    earlier: list[str] = Field(description="Ids of the earlier changes counted, newest first.")
    followed: list[str] = Field(description="Incidents that started within the window after one of them.")
    runbooks: list[RunbookRecord] = Field(default_factory=list)
    cites: list[str] = Field(description="The change and incident ids the claim rests on.")


class PlanChange(BaseModel):
    """A change before the alert, on its service or one it depends on, ranked by time and topology."""

    id: str
    source: str
    service: str
    kind: str
    summary: str
    version: str | None = None
    at: datetime
    url: str | None = None
    hops: int = Field(description="Dependency hops from the alert's service to the changed one (0: the same).")
    minutes_before: float = Field(description="Minutes between the change and the alert.")
    score: float = Field(description="Sum of the parts' contributions (weights: the ranking policy's `changes`).")
    why: dict[str, ScorePart] = Field(description="recency, topology and alerted: each part of the score.")
    record: ChangeRecord | None = Field(None, description="What followed earlier changes like it, when known.")


class ProbableOrigin(BaseModel):
    """The upstream service where the trouble most likely started: the one whose alert or change came first."""

    service: str
    hops: int = Field(description="Hops upstream of the alert's service (0: the alert's own service).")
    at: datetime | None = Field(None, description="Its first signal: the change or the alert, whichever came first.")
    change_id: str | None = Field(None, description="The change blamed, when a ranked change is on the path.")
    alert_id: str | None = Field(None, description="Its first alert in the window, when it alerted.")
    why: str
    cites: list[str] = Field(default_factory=list)


class RelatedIncident(BaseModel):
    """An open incident on a service related to the alert's (the same, or a few hops away either way)."""

    id: str
    title: str
    services: list[str]
    hops: int
    started_at: datetime
