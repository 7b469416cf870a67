"""The composite re-ranker: operational evidence on top of textual similarity.

    final = w_sim Every constant below is a field of the ranking policy (`retrieval/policy.py`, `RerankPolicy`), shown
with its default:

* S_similarity: the candidate's fused (RRF) score, scaled between the weakest a candidate can have
  (last place in one arm) and the strongest candidate (1 for the best fused match). Relevance stays
  the backbone: without operational context the re-ranked order is the fused order, up to the small
  runbook and age terms.
* S_service: `same_service` (1.0) when the memory names a service of the question, `direct_dependency`
  (0.5) when it names a direct upstream or downstream dependency of one, times `hop_decay` (0.5) for each
  hop further (0.25 two hops away: `RerankPolicy.by_hops`), 0 when unrelated (and 0 for all when the
  question names none, or the organization has no service catalog yet to find them in).
* S_severity: 1 - |tier difference| / `severity_tiers` (4), `neutral` (0.5) when either is unknown.
* E_runbook: the win rate (Beta posterior mean, prior `win_rate_prior`) of the runbook the memory used or
  is, from the effectiveness ledger, for the question's service when that pair has `min_service_results`
  (3) or more results; `neutral` when the runbook was never tried or the memory names none.
* age_penalty: 0 for the first `age_grace_days` (180), then growing linearly to 1 over the following
  `age_full_days` (three years).

The composite score reorders candidates of comparable relevance only (`order`): the next place goes to
the best composite score among the candidates the strongest remaining fused candidate does not clearly
beat, where clearly beating means a cosine similarity more than `cosine_band` (0.05) higher or an idf
coverage more than `coverage_band` (0.10) higher (each arm's own score, 0 when the arm did not find it).
So a bonus for topology, severity, win rate or age can lift a near tie, never a clearly weaker match over
a stronger one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from grandbo.model import Calibration, Entry, Kind, RerankWeights, Severity
from grandbo.retrieval.policy import RerankPolicy

FOREVER = datetime.max.replace(tzinfo=UTC)  # an answer no later time changes (`steady_until`)
HALF_DAY = timedelta(hours=12)
_NO_TIME = timedelta(0)
NO_CATALOG = (
    "no service catalog yet, so the question's services cannot be recognized or related: import one with "
    "`grandbo catalog import FILE` (or PUT /v1/catalog)"
)


class Hops(Protocol):
    """The service catalog as the re-ranker reads it (the topology tier's `Topology`)."""

    def closest(self, ours: Iterable[str], theirs: Iterable[str]) -> int | None:
        """The fewest dependency hops between any of `ours` and any of `theirs` (None: unrelated)."""
        ...

    def mentioned_in(self, text: str) -> list[str]:
        """The catalog's services named in `text`."""
        ...

    @property
    def names(self) -> list[str]:
        """Every service of the catalog."""
        ...


class Facts(Protocol):
    """An organization's operational facts as of one documents version (`tiers.operations.Snapshot`)."""

    @property
    def topology(self) -> Hops: ...
    @property
    def weights(self) -> RerankWeights: ...
    @property
    def calibration(self) -> Calibration | None:
        """The organization's own verdict calibration, if any."""
        ...

    @property
    def problems(self) -> Sequence[str]:
        """Settings that could not be read, each with what was used instead and the remedy (for the notes)."""
        ...

    @property
    def read_at(self) -> Hashable:
        """The versions it was read at (the org's epoch, each collection it is made of): equal, the same facts."""
        ...

    def win_rates(self, runbook_ids: Sequence[str], services: Sequence[str] = ()) -> dict[str, tuple[float, str]]: ...
    def used_on(self, runbook_id: str) -> Sequence[str]:
        """The services a runbook was used on (its outcomes and the incidents that cited it)."""
        ...


@dataclass(slots=True)  # read-only; not frozen, whose __init__ costs 4x (hundreds per recall)
class Candidate:
    entry: Entry
    fused: float
    fused_rank: int
    cosine: float | None
    coverage: float | None


def similarities(candidates: Sequence[Candidate], weakest: float) -> list[float]:
    """Each candidate's fused score scaled to [0, 1] between the weakest possible fused score
    (`weakest`: last place in one arm only), or the weakest candidate if lower, and the strongest."""
    if not candidates:
        return []
    low, high = min(weakest, *(c.fused for c in candidates)), max(c.fused for c in candidates)
    if high - low < 1e-12:
        return [1.0 for _ in candidates]
    return [(c.fused - low) / (high - low) for c in candidates]


@dataclass(frozen=True, slots=True)
class Context:
    """What the question says about the situation."""

    services: Sequence[str]
    severity: Severity | None
    now: datetime
    catalog: bool = True  # whether the organization has a service catalog to find services and hops in


def runbook_of(entry: Entry) -> str | None:
    """The runbook a memory used (meta.runbook_id) or is."""
    if entry.kind is Kind.RUNBOOK:
        return entry.id
    value = entry.meta.get("runbook_id")
    return str(value) if value else None


@dataclass(slots=True)  # read-only; not frozen, whose __init__ costs 4x (hundreds per recall)
class Scored:
    """A candidate's composite score and its parts as plain numbers (cheap for every candidate); the
    explanation, with its sentences, is built only for the hits that are returned."""

    final: float
    values: tuple[float, float, float, float, float]  # similarity, service, severity, effectiveness, age
    weights: RerankWeights
    candidate: Candidate
    context: Context
    hops: int | None
    runbook_note: str
    days: float

    def evidence(self) -> dict[str, Any]:
        """A `RerankEvidence`'s fields (validated with the recall result, in one call)."""
        c, ctx, w = self.candidate, self.context, self.weights
        sim_note = f"fused rank {c.fused_rank} (rrf {c.fused:.4f})"
        sim_note += f", cosine {c.cosine:.3f}" if c.cosine is not None else ", no vector match"
        sim_note += f", idf coverage {c.coverage:.2f}" if c.coverage is not None else ", no lexical match"
        if self.hops == 0:
            service_note = "same service"
        elif not ctx.catalog:  # the question is not to blame: nothing could be recognized in it, nor related
            service_note = NO_CATALOG
        elif not ctx.services:
            service_note = "the question names no service"
        elif self.hops == 1:
            service_note = "direct dependency"
        else:
            service_note = "unrelated service" if self.hops is None else f"{self.hops} hops away"
        severity_note = "severity unknown"
        if ctx.severity is not None and c.entry.severity is not None:
            severity_note = f"{c.entry.severity.value} vs {ctx.severity.value}"
        notes = (sim_note, service_note, severity_note, self.runbook_note, f"{self.days:.0f} days old")
        weights = (w.similarity, w.service, w.severity, w.effectiveness, w.age)
        names = ("similarity", "service", "severity", "effectiveness", "age")
        signs = (1.0, 1.0, 1.0, 1.0, -1.0)
        return {
            "final": round(self.final, 6),
            **{
                name: {
                    "value": round(value, 4),
                    "weight": weight,
                    "contribution": round(sign * weight * value, 4),
                    "note": note,
                }
                for name, value, weight, sign, note in zip(names, self.values, weights, signs, notes, strict=True)
            },
        }


def score(
    candidate: Candidate,
    similarity: float,
    context: Context,
    policy: RerankPolicy,
    topology: Hops,
    win_rates: Mapping[str, tuple[float, str]],
    runbook: str | None,
    used_on: Sequence[str] = (),
) -> Scored:
    """The composite score of one candidate (explained by `Scored.evidence`) that used or is `runbook`
    (`runbook_of`, which the caller has already read for the win rates); a runbook's services include the
    ones it was used on (`used_on`); the weights and each component's constants are the policy's."""
    entry, weights, neutral = candidate.entry, policy.weights, policy.neutral
    services = [*entry.services, *used_on] if used_on else entry.services
    hops = topology.closest(context.services, services) if context.services else None
    service_value = policy.by_hops(hops)
    if context.severity is not None and entry.severity is not None:
        severity_value = 1.0 - abs(context.severity.tier - entry.severity.tier) / policy.severity_tiers
    else:
        severity_value = neutral
    effect_value, runbook_note = neutral, "no runbook"
    if runbook is not None:
        effect_value, runbook_note = win_rates.get(runbook, (neutral, f"{runbook}: never tried"))
    days = max(0.0, (context.now - entry.occurred_at).total_seconds() / 86_400)
    age_value = min(1.0, max(0.0, (days - policy.age_grace_days) / policy.age_full_days))
    final = (
        weights.similarity * similarity
        + weights.service * service_value
        + weights.severity * severity_value
        + weights.effectiveness * effect_value
        - weights.age * age_value
    )
    values = (similarity, service_value, severity_value, effect_value, age_value)
    return Scored(final, values, weights, candidate, context, hops, runbook_note, days)


def order(scored: Sequence[Scored], policy: RerankPolicy, places: int | None = None) -> list[Scored]:
    """The re-ranked order: place after place, the best composite score among the remaining candidates
    that the strongest remaining fused candidate does not clearly beat by the policy's bands (ties: the
    fused order). The first `places` only when given: each place depends only on those before it, so they are
    the whole order's first ones, without filling the places no one reads (each place scans all remaining)."""
    remaining = sorted(scored, key=lambda s: s.candidate.fused_rank)
    finals = [s.final for s in remaining]
    cosines = [s.candidate.cosine or 0.0 for s in remaining]
    coverages = [s.candidate.coverage or 0.0 for s in remaining]
    ranked: list[Scored] = []
    wanted = len(remaining) if places is None else places
    while remaining and len(ranked) < wanted:
        # A candidate the head clearly beats (cosine or coverage more than a band lower) cannot take its place.
        low_cosine, low_coverage = cosines[0] - policy.cosine_band, coverages[0] - policy.coverage_band
        best = 0
        for position in range(1, len(remaining)):
            if (
                finals[position] > finals[best]
                and cosines[position] >= low_cosine
                and coverages[position] >= low_coverage
            ):
                best = position
        ranked.append(remaining.pop(best))
        del finals[best], cosines[best], coverages[best]
    return ranked


def steady_until(occurred: Iterable[datetime], now: datetime, policy: RerankPolicy) -> datetime:
    """Until when a re-ranking at `now` of candidates that `occurred` at these times is the same at any later time
    (`retrieval.shared`): each one's age penalty (none in its grace, whole past it), the whole days of its age (the
    verdict's recent matches) and its age in days as a hit's note rounds it, as at `now`. `now` itself when a
    candidate's penalty grows by the second (between its grace and the whole penalty) or it is exactly on a half day
    (the note's rounding)."""
    # Each candidate's time left, from `now`, until its first change: one remainder of its age, and no datetime made
    # for a candidate (a re-ranked recall has a few dozen).
    least, grace = None, timedelta(days=policy.age_grace_days)
    whole = grace + timedelta(days=policy.age_full_days)
    for at in occurred:
        age = now - at
        if age < _NO_TIME:  # not yet occurred: 0 days old until it does
            left = -age
        else:
            rest = age % HALF_DAY
            if not rest or grace <= age <= whole:
                return now
            left = HALF_DAY - rest  # to its next half day of age
            if age < grace:
                left = min(left, grace - age)
        if least is None or left < least:
            least = left
    return FOREVER if least is None else now + least
