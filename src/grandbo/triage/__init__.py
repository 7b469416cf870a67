"""Triage plans: alert -> recall -> a ranked, cited action plan with confidence, optionally narrated by an
LLM, always inside its time budgets (`OrgMemory.triage`)."""

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
    "Citation",
    "Mechanism",
    "Narrative",
    "NarrativeStep",
    "NoPrecedent",
    "RunbookSuggestion",
    "Triage",
    "TriagePlan",
    "TriageTimings",
    "alert_from",
]
