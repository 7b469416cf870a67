"""Triage plans: alert -> recall -> a ranked, cited action plan with confidence, optionally narrated by an
LLM, always inside its time budgets (`OrgMemory.triage`)."""

from grandbo.triage.origin_model import ChangeRecord, PlanChange, ProbableOrigin, RelatedIncident
from grandbo.triage.plan import (
    Citation,
    Mechanism,
    Narrative,
    NarrativeStep,
    NoPrecedent,
    RunbookSuggestion,
    TriagePlan,
    TriageTimings,
    alert_from,
)
from grandbo.triage.run import Triage

__all__ = [
    "ChangeRecord",
    "Citation",
    "Mechanism",
    "Narrative",
    "NarrativeStep",
    "NoPrecedent",
    "PlanChange",
    "ProbableOrigin",
    "RelatedIncident",
    "RunbookSuggestion",
    "Triage",
    "TriagePlan",
    "TriageTimings",
    "alert_from",
]
