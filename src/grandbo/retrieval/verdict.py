"""The verdict "seen before / no similar past incident": one calibrated score, not a bar on raw scores.

A recall's candidates give a few features (the best cosine similarity of the vector arm, the best idf
coverage of the lexical arm); a logistic model fit on labelled queries of the provider and model in use
turns them into a probability that the question was seen before. Raw cosines mean different things for
different models, so a calibration belongs to one provider and model: the organization's own
(`grandbo calibrate`) first, else the one shipped with Grandbo (`retrieval/calibrations/`), else none,
and then recall says "uncalibrated" and gives no verdict. The features, the order calibrations are chosen
in and the backlog that withholds a verdict are the ranking policy's (`retrieval/policy.py`, `VerdictPolicy`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from grandbo.model import Calibration, Entry
from grandbo.retrieval.policy import DEFAULT_POLICY, VerdictPolicy

FEATURES = DEFAULT_POLICY.verdict.features
SHIPPED = Path(__file__).parent / "calibrations"


def features(cosines: Iterable[float | None], coverages: Iterable[float | None]) -> dict[str, float]:
    """The verdict's features of one recall: the best cosine and the best idf coverage among its
    candidates (0 when an arm found nothing)."""
    return {
        "top_cosine": max((c for c in cosines if c is not None), default=0.0),
        "top_coverage": max((c for c in coverages if c is not None), default=0.0),
    }


def each_alone(
    calibration: Calibration, cosines: Iterable[float | None], coverages: Iterable[float | None]
) -> list[float]:
    """The probability of each candidate's own features (its cosine and coverage as the best of a recall): whether
    it alone is a strong match. `probability`'s sum, term by term in the calibration's order, without a dict for
    each of a re-ranked recall's few dozen candidates."""
    at = {"top_cosine": 0, "top_coverage": 1}  # in each candidate's row; any other feature reads its 0.0 (2)
    terms = [(weight, at.get(name, 2)) for name, weight in zip(calibration.features, calibration.coefficients,
                                                                strict=True)]  # fmt: skip
    alone = []
    for cosine, coverage in zip(cosines, coverages, strict=True):
        row = (0.0 if cosine is None else cosine, 0.0 if coverage is None else coverage, 0.0)
        alone.append(_logistic(calibration.intercept + sum(weight * row[place] for weight, place in terms)))
    return alone


def probability(calibration: Calibration, values: Mapping[str, float]) -> float:
    """P(seen before) under the calibration."""
    return _logistic(calibration.intercept + sum(
        weight * values.get(name, 0.0)
        for name, weight in zip(calibration.features, calibration.coefficients, strict=True)
    ))  # fmt: skip


def _logistic(z: float) -> float:
    """The probability of log-odds `z` (`probability`'s and `each_alone`'s: the same sum, reduced alike, gives the
    same bits in both)."""
    return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


def recurrence(entry: Entry, recent: Sequence[Entry], policy: VerdictPolicy) -> Literal["frequent", "rare"]:
    """Frequent when at least `policy.frequent_at` (3) strong matches of the last `policy.recent_days`
    (`recent`, this one included) share a service with it (or, for memories without services, its kind);
    rare otherwise."""
    services = set(entry.services)
    alike = 0
    for match in recent:
        if (not services.isdisjoint(match.services)) if services else match.kind is entry.kind:
            alike += 1
            if alike == policy.frequent_at:
                return "frequent"
    return "rare"


def path_for(provider: str) -> Path:
    return SHIPPED / f"{provider}.json"


@lru_cache(maxsize=32)
def shipped(provider: str, model: str) -> Calibration | None:
    """The calibration shipped for this provider and model, if any."""
    path = path_for(provider)
    if not path.is_file():
        return None
    found = Calibration.model_validate(json.loads(path.read_text(encoding="utf-8")))
    return found if found.model == model else None


def choose(organization: Calibration | None, provider: str, model: str) -> Calibration | None:
    """The organization's calibration when it is for this provider and model, else the shipped one."""
    if organization is not None and (organization.provider, organization.model) == (provider, model):
        return organization
    return shipped(provider, model)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Seen before or not, from the calibrated probability; no verdict without a calibration."""

    calibration: Calibration | None
    probability: float | None
    seen_before: bool | None
    space: str

    @classmethod
    def of(cls, calibration: Calibration | None, values: Mapping[str, float], space: str) -> Verdict:
        if calibration is None:
            return cls(None, None, None, space)
        p = probability(calibration, values)
        return cls(calibration, round(p, 4), p >= calibration.threshold, space)

    @property
    def label(self) -> str:
        """The answer's calibration as `RecallResult.calibration` names it."""
        return self.calibration.label if self.calibration else "uncalibrated"

    def note(self) -> str | None:
        """What a recall's note says of this verdict on its hits: None where the question was seen before."""
        if self.calibration is None:
            return (
                f"uncalibrated: no verdict calibration for {self.space}, so no seen-before verdict; "
                "calibrate on labelled queries with `grandbo calibrate DIR`"
            )
        if self.seen_before:
            return None
        if self.probability is None:
            return "no similar past incident"
        return (
            f"no similar past incident: the calibrated probability {self.probability:.2f} is below "
            f"{self.calibration.threshold:.2f}; the hits are the nearest memories, not known recurrences"
        )
