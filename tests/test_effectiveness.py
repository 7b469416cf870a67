from datetime import UTC, datetime, timedelta

import pytest

from grandbo.tiers.effectiveness import Outcome, OutcomeKind, posterior, summarize, trend

START = datetime(2026, 1, 1, tzinfo=UTC)


def outcome(kind, n=0, ttm=None, service="redis-sessions", rating=None):
    return Outcome(
        org_id="acme",
        runbook_id="RB-1",
        kind=kind,
        service=service,
        time_to_mitigate_s=ttm,
        rating=rating,
        at=START + timedelta(days=n),
    )


def test_win_rate_is_the_beta_posterior_mean_with_a_credible_interval():
    from scipy.stats import beta  # here: scipy.stats cost each worker's collection a second of CPU

    mean, (low, high) = posterior(47, 3)
    assert mean == pytest.approx(48 / 52)
    assert low == pytest.approx(beta.ppf(0.05, 48, 4), abs=1e-4)
    assert high == pytest.approx(beta.ppf(0.95, 48, 4), abs=1e-4)
    untried, interval = posterior(0, 0)
    assert untried == 0.5 and interval == (0.05, 0.95)


def test_three_of_three_is_not_certainty():
    mean, (low, _) = posterior(3, 0)
    assert mean == pytest.approx(0.8) and low < 0.5


def test_summary_counts_and_scopes_by_service():
    outcomes = [
        outcome(OutcomeKind.RECOMMENDED),
        outcome(OutcomeKind.SUCCEEDED, 1, 600),
        outcome(OutcomeKind.FAILED, 2),
        outcome(OutcomeKind.SUCCEEDED, 3, 300, service="auth-service"),
        outcome(OutcomeKind.RATED, 4, rating=1),
        outcome(OutcomeKind.RATED, 5, rating=-1),
    ]
    record = summarize("RB-1", outcomes)
    assert (record.recommended, record.attempts, record.successes) == (1, 3, 2)
    assert (record.thumbs_up, record.thumbs_down) == (1, 1)
    assert record.mttr_median_s == 450
    only_redis = summarize("RB-1", outcomes, "redis-sessions")
    assert (only_redis.attempts, only_redis.successes) == (2, 1)


@pytest.mark.parametrize(
    ("durations", "expected"),
    [
        ([900, 880, 600, 500], "improving"),
        ([300, 320, 600, 700], "worsening"),
        ([500, 510, 505, 495], "steady"),
        ([500, 400], "unknown"),
    ],
)
def test_mttr_trend_compares_older_and_newer_halves(durations, expected):
    assert trend(durations) == expected
