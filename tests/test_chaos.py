"""One short run of the chaos script (benchmarks/chaos.py) in CI: importers and workers killed with SIGKILL
at random moments, a provider failing 30% of calls and stalling past its timeout on 10% more; nothing
acknowledged is lost, nothing is stored twice, every embedding drains. The 20-run tables are in
docs/evaluation.md."""

from __future__ import annotations

import pytest
from benchmarks import chaos


def _holds(result):
    assert result["acknowledged"] > 0 and result["kills"] > 0, result  # it did write, and it was hurt
    assert result["provider_calls"] > 0, result
    assert (result["lost"], result["duplicates"], result["drained"]) == (0, 0, True), result


def test_a_short_chaos_run_loses_nothing_and_stores_nothing_twice():
    (result,) = chaos.run("sqlite", runs=1, seconds=4, seed=7, drain_batch=128)  # a drain of ~4,000 in seconds
    _holds(result)


@pytest.mark.slow
@pytest.mark.postgres
def test_a_short_chaos_run_on_postgres_survives_a_crash_restart_too():
    (result,) = chaos.run("postgres", runs=1, seconds=16, seed=7)
    _holds(result)
    assert result["postgres_restarts"] == 1
