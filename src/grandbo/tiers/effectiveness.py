"""The effectiveness ledger's arithmetic: what a runbook did when it was tried.

Outcomes are events (recommended, executed, succeeded, failed, rated). Win rate is the mean of a Beta
posterior over success with a uniform Beta(1, 1) prior, so that 3 of 3 does not read as certainty and
an untried runbook reads as an even chance; the 90% credible interval and the sample size go with it.
These numbers change with every outcome, so they are never embedded into memory text: they join the
candidates at query time.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from grandbo.errors import InvalidInputError
from grandbo.names import ServiceName, service_name
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.values import utc
from grandbo.words import Vocabulary

PRIOR_SUCCESS, PRIOR_FAILURE = DEFAULT_POLICY.rerank.win_rate_prior  # the ranking policy's
INTERVAL = 0.90


def time_to_mitigate(seconds: float | None) -> float | None:
    """`seconds` as a time to mitigate, or InvalidInputError: a number of seconds, 0 or more (no NaN, no
    infinity, which no JSON answer could carry and no median could use)."""
    if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
        raise InvalidInputError(
            f"A time to mitigate is a number of seconds, 0 or more; got {seconds}.",
            detail={"time_to_mitigate_s": str(seconds)},
        )
    return seconds


class OutcomeKind(Vocabulary):
    RECOMMENDED = "recommended"
    EXECUTED = "executed"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RATED = "rated"


# The outcomes a caller reports for a run of a runbook (a rating comes through feedback), as REST and MCP take them.
ReportedOutcome = Literal["recommended", "executed", "succeeded", "failed"]


class Outcome(BaseModel):
    """One line of the ledger."""

    seq: int = 0
    org_id: str
    runbook_id: str
    kind: OutcomeKind
    incident_id: str | None = None
    service: ServiceName | None = None
    time_to_mitigate_s: float | None = Field(default=None, ge=0)
    rating: int | None = Field(default=None, description="+1 (thumbs up) or -1 (thumbs down).")
    comment: str = ""
    actor: str = "api"
    at: Annotated[datetime, AfterValidator(utc)] = Field(
        description="When it happened; a time given (or stored by an older release) without a zone is UTC."
    )


def zoned(at: Any) -> Any:
    """An outcome's stored time as this release writes it: one written without a zone ("2024-01-01T00:00:00", as
    an import kept "2024-01-01" before) with UTC's; anything else as it is. Compared with the zoned times of the
    other outcomes, it failed every recall that ranked the runbook (a TypeError, review 24)."""
    try:
        parsed = datetime.fromisoformat(at) if isinstance(at, str) else None
    except ValueError:
        return at
    return utc(parsed).isoformat() if parsed is not None and parsed.tzinfo is None else at


class Effectiveness(BaseModel):
    """A runbook's record, for all services or one."""

    runbook_id: str
    service: str | None = None
    recommended: int = 0
    attempts: int = Field(0, description="Outcomes known: succeeded + failed.")
    successes: int = 0
    win_rate: float = Field(description="Beta posterior mean of success.")
    interval: tuple[float, float] = Field(description="90% credible interval of the success rate.")
    mttr_median_s: float | None = None
    mttr_trend: str = Field("unknown", description="improving, worsening, steady or unknown.")
    thumbs_up: int = 0
    thumbs_down: int = 0


@functools.lru_cache(maxsize=4096)  # most runbooks share a few small counts (never tried: 0 and 0)
def posterior(successes: int, failures: int) -> tuple[float, tuple[float, float]]:
    """Mean (`posterior_mean`) and central credible interval of Beta(1 + successes, 1 + failures)."""
    from scipy.special import betaincinv  # here: scipy costs every CLI start a quarter of a second

    a, b = PRIOR_SUCCESS + successes, PRIOR_FAILURE + failures
    tail = (1 - INTERVAL) / 2
    low, high = float(betaincinv(a, b, tail)), float(betaincinv(a, b, 1 - tail))
    return posterior_mean(successes, failures), (round(low, 4), round(high, 4))


def posterior_mean(successes: int, failures: int) -> float:
    """The win rate's posterior mean, without the interval (whose quantiles cost a ranking of many runbooks)."""
    a, b = PRIOR_SUCCESS + successes, PRIOR_FAILURE + failures
    return a / (a + b)


def trend(durations: Sequence[float]) -> str:
    """Compare the median time to mitigate of the older and the newer half (at least 4 results)."""
    if len(durations) < 4:
        return "unknown"
    half = len(durations) // 2
    older, newer = statistics.median(durations[:half]), statistics.median(durations[-half:])
    if newer < older * 0.85:
        return "improving"
    if newer > older * 1.15:
        return "worsening"
    return "steady"


def summarize(runbook_id: str, outcomes: Iterable[Outcome], service: str | None = None) -> Effectiveness:
    """The record of one runbook from its outcomes (oldest first), optionally for one service. One pass, the kinds
    held in locals: six passes, each reading an enum member off its class per outcome, took 13 ms at 5,000 outcomes
    (a runbook's record is summarized again after each of its outcomes)."""
    succeeded, failed, recommended, rated = (OutcomeKind.SUCCEEDED, OutcomeKind.FAILED, OutcomeKind.RECOMMENDED,
                                             OutcomeKind.RATED)  # fmt: skip
    successes = failures = recommendations = thumbs_up = thumbs_down = 0
    durations: list[float] = []
    service = service_name(service) if service is not None else None  # as outcomes keep it
    for o in outcomes:
        if o.runbook_id != runbook_id or (service is not None and o.service != service):
            continue
        kind = o.kind
        if kind is succeeded:
            successes += 1
            if o.time_to_mitigate_s:
                durations.append(o.time_to_mitigate_s)
        elif kind is failed:
            failures += 1
        elif kind is recommended:
            recommendations += 1
        elif kind is rated:
            thumbs_up += (o.rating or 0) > 0
            thumbs_down += (o.rating or 0) < 0
    return record(runbook_id, service, (successes, failures, recommendations, thumbs_up, thumbs_down), durations)


def record(
    runbook_id: str, service: str | None, counts: tuple[int, int, int, int, int], durations: Sequence[float]
) -> Effectiveness:
    """The record of these counts (successes, failures, recommendations, thumbs up, thumbs down) and the times to
    mitigate of the successes that have one (oldest first): `summarize`'s arithmetic, once for every caller."""
    successes, failures, recommendations, thumbs_up, thumbs_down = counts
    mean, interval = posterior(successes, failures)
    return Effectiveness(
        runbook_id=runbook_id,
        service=service,
        recommended=recommendations,
        attempts=successes + failures,
        successes=successes,
        win_rate=round(mean, 4),
        interval=interval,
        mttr_median_s=statistics.median(durations) if durations else None,
        mttr_trend=trend(durations),
        thumbs_up=thumbs_up,
        thumbs_down=thumbs_down,
    )
