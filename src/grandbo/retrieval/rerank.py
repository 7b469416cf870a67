"""The composite re-ranker: operational evidence on top of textual similarity.

    final = w_sim * S_similarity + w_svc * S_service + w_sev * S_severity + w_eff * E_runbook
            - lambda * age_penalty

* S_similarity: the evidence both arms found, each on an absolute scale: half the vector arm's cosine
  rescaled from the provider's floor to 1, half the lexical arm's idf coverage. Rank fusion decided
  which candidates to consider; this says how close each one is.
* S_service: 1.0 when the memory names a service of the question, 0.5 when it names a direct
  upstream or downstream dependency of one, 0 otherwise (and 0 for all when the question names none).
* S_severity: 1 - |tier difference| / 4, 0.5 when either severity is unknown.
* E_runbook: the win rate (Beta posterior mean) of the runbook the memory used or is, from the
  effectiveness ledger, for the question's service when that pair has 3 or more results; the prior
  0.5 when the runbook was never tried or the memory names none.
* age_penalty: 0 for the first 180 days, then growing linearly to 1 over the following year.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from grandbo.model import Component, Entry, Kind, RerankEvidence, RerankWeights, Severity
from grandbo.topology import Topology

NEUTRAL = 0.5
AGE_GRACE_DAYS = 180
AGE_FULL_DAYS = 365


@dataclass(frozen=True, slots=True)
class Candidate:
    entry: Entry
    cosine: float | None
    coverage: float | None


@dataclass(frozen=True, slots=True)
class Context:
    """What the question says about the situation."""

    services: Sequence[str]
    severity: Severity | None
    now: datetime
    vector_floor: float


def runbook_of(entry: Entry) -> str | None:
    """The runbook a memory used (meta.runbook_id) or is."""
    if entry.kind is Kind.RUNBOOK:
        return entry.id
    value = entry.meta.get("runbook_id")
    return str(value) if value else None


def score(
    candidate: Candidate,
    context: Context,
    weights: RerankWeights,
    topology: Topology,
    win_rates: Mapping[str, tuple[float, str]],
) -> RerankEvidence:
    """The composite score of one candidate, with every component explained."""
    entry = candidate.entry
    vector_part = 0.0
    if candidate.cosine is not None:
        vector_part = min(1.0, max(0.0, (candidate.cosine - context.vector_floor) / (1.0 - context.vector_floor)))
    lexical_part = candidate.coverage or 0.0
    similarity = 0.5 * vector_part + 0.5 * lexical_part
    sim_note = f"cosine {candidate.cosine:.3f}" if candidate.cosine is not None else "no vector match"
    sim_note += f", idf coverage {candidate.coverage:.2f}" if candidate.coverage is not None else ", no lexical match"

    service_value, service_note = 0.0, "the question names no service"
    if context.services:
        hops = topology.closest(context.services, entry.services)
        if hops == 0:
            service_value, service_note = 1.0, "same service"
        elif hops == 1:
            service_value, service_note = 0.5, "direct dependency"
        else:
            service_value = 0.0
            service_note = "unrelated service" if hops is None else f"{hops} hops away"

    if context.severity is not None and entry.severity is not None:
        gap = abs(context.severity.tier - entry.severity.tier)
        severity_value, severity_note = 1.0 - gap / 4.0, f"{entry.severity.value} vs {context.severity.value}"
    else:
        severity_value, severity_note = NEUTRAL, "severity unknown"

    runbook = runbook_of(entry)
    effect_value, effect_note = NEUTRAL, "no runbook"
    if runbook is not None:
        effect_value, effect_note = win_rates.get(runbook, (NEUTRAL, f"{runbook}: never tried"))

    days = max(0.0, (context.now - entry.occurred_at).total_seconds() / 86_400)
    age_value = min(1.0, max(0.0, (days - AGE_GRACE_DAYS) / AGE_FULL_DAYS))

    def component(value: float, weight: float, note: str, sign: float = 1.0) -> Component:
        return Component(value=round(value, 4), weight=weight, contribution=round(sign * weight * value, 4), note=note)

    parts = {
        "similarity": component(similarity, weights.similarity, sim_note),
        "service": component(service_value, weights.service, service_note),
        "severity": component(severity_value, weights.severity, severity_note),
        "effectiveness": component(effect_value, weights.effectiveness, effect_note),
        "age": component(age_value, weights.age, f"{days:.0f} days old", sign=-1.0),
    }
    final = (
        weights.similarity * similarity
        + weights.service * service_value
        + weights.severity * severity_value
        + weights.effectiveness * effect_value
        - weights.age * age_value
    )
    return RerankEvidence(final=round(final, 6), **parts)
