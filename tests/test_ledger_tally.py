"""The analytics page's ledger counted by the store (`tiers.ledger_tally`) against the straightforward computation
over every outcome read whole (`tests.plain_ledger.every_outcome`), on both backends: the same records, time
to mitigate series and count, to the bit. And a first view reads no outcome whole: it took 3.4-6 s (2.2-2.7 s of
CPU) of the shared process at 100,000 outcomes (probe 23b)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from grandbo.memory import OrgMemory
from grandbo.ports import DocumentWrite
from grandbo.service import Grandbo
from grandbo.tiers.effectiveness import Effectiveness, Outcome, OutcomeKind, posterior_mean, summarize
from grandbo.tiers.incident_model import PastIncident
from grandbo.tiers.operations import OUTCOMES
from grandbo.web import analytics
from tests.plain_ledger import every_outcome, loaded  # noqa: F401  (a fixture)


def _fill(memory: OrgMemory) -> None:
    """Outcomes of every kind over 24 runbooks (more than the page shows, some tied), times written with several UTC
    offsets (one at a month's end that is the next month in UTC), equal times, times to mitigate of 0, none and of 17
    digits, ratings up and down, a result replaced, one withdrawn, and successes of incidents the org holds."""
    for n in range(24):
        memory.runbooks.add(f"RB-{n:02d}", f"Runbook {n}", ["check", "mitigate"])
    memory.incidents.open("orders database lag", services=["orders-db"], incident_id="INC-HELD")
    start = datetime(2024, 1, 1, tzinfo=UTC)
    offsets = ["Z", "+02:00", "-05:00", "+05:30"]
    records = []
    for n in range(400):
        runbook = f"RB-{(n * 7) % 24:02d}" if n % 11 else "RB-00"
        kind = ["succeeded", "failed", "succeeded", "recommended", "rated", "executed"][n % 6]
        slot = (n * 37) % 400 // 2  # not in the order of the ids; two by two at one time
        at = (start + timedelta(hours=slot * 5)).strftime("%Y-%m-%dT%H:%M:%S")
        record = {"runbook_id": runbook, "kind": kind, "at": at + offsets[n % 4], "service": f"svc-{n % 9}",
                  "incident_id": "INC-HELD" if n % 13 == 0 else f"INC-{n}"}  # fmt: skip
        if kind == "succeeded":
            record["time_to_mitigate_s"] = [0, None, 0.1 + 0.2 + n, 123.45678901234567 * n, 600 + n % 50][n % 5]
        if kind == "rated":
            record["rating"] = 1 if n % 4 else -1
        if n % 17 == 0:
            record.pop("service")
        records.append(record)
    records.append({"runbook_id": "RB-23", "kind": "succeeded", "time_to_mitigate_s": 61.5, "service": "svc-edge",
                    "at": "2024-01-31T23:30:00-05:00"})  # fmt: skip
    memory.ledger.import_outcomes(records, prefix="past")
    memory.ledger.record("RB-01", "failed", incident_id="INC-LIVE", service="svc-1")
    memory.ledger.record("RB-01", "succeeded", incident_id="INC-LIVE", service="svc-1", time_to_mitigate_s=42.0)
    memory.ledger.record("RB-02", "rated", rating=-1, comment="vote on INC-9")
    memory.ledger.withdraw("RB-02", "vote on INC-9")
    memory.ledger.record("RB-02", "succeeded", service="svc-2", time_to_mitigate_s=0.30000000000000004)


def _expected(outcomes: list[Outcome], incidents: list[PastIncident]) -> tuple[object, ...]:
    """The page's ledger numbers computed plainly from every outcome (oldest first)."""
    by_runbook: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        by_runbook[outcome.runbook_id].append(outcome)
    records = {runbook_id: summarize(runbook_id, held) for runbook_id, held in by_runbook.items()}

    def rank(record: Effectiveness) -> tuple[int, float, str]:
        failures = record.attempts - record.successes
        return -record.attempts, -round(posterior_mean(record.successes, failures), 4), record.runbook_id

    ranked = [(r.runbook_id, r) for r in sorted(records.values(), key=rank)][: analytics.TOP_RUNBOOKS]
    samples: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    for incident in incidents:  # none of them closed: the outcomes' samples alone
        assert incident.closed_at is None
    held = {incident.id for incident in incidents}
    for o in outcomes:
        if o.kind is OutcomeKind.SUCCEEDED and o.time_to_mitigate_s and o.service and o.incident_id not in held:
            samples[o.service].append((o.at, o.time_to_mitigate_s / 60))
    busiest = sorted(samples, key=lambda s: (-len(samples[s]), s))[: analytics.TOP_SERVICES]
    mttr = {}
    for service in busiest:
        months: dict[datetime, list[float]] = defaultdict(list)
        for at, minutes in samples[service]:
            months[datetime(at.year, at.month, 1, tzinfo=UTC)].append(minutes)
        mttr[service] = [(month, statistics.median(values)) for month, values in sorted(months.items())]
    return ranked, mttr, len(outcomes)


def test_the_ledger_counted_by_the_store_gives_what_every_outcome_gives(grandbo, memory):
    _fill(grandbo.org("beta", create=True))  # another org's outcomes, of the same runbook ids, never counted
    _fill(memory)
    memory.ledger.record("RB-05", "succeeded", service="svc-1", time_to_mitigate_s=7.0)
    incidents = memory.incidents.summaries()
    figures = memory.figures([incident.id for incident in incidents])
    assert figures is not None
    built = analytics.build(memory, figures, incidents)
    outcomes = every_outcome(memory)
    assert (built.runbooks, built.mttr, built.outcomes) == _expected(outcomes, incidents)
    assert built.outcomes == 404 and len(built.runbooks) == analytics.TOP_RUNBOOKS  # 24 runbooks, 20 shown
    tally = memory.ledger.tally()
    for runbook_id in {outcome.runbook_id for outcome in outcomes}:
        assert tally.effectiveness(runbook_id) == summarize(runbook_id, memory.ledger.outcomes([runbook_id]))
    january = [m for m in tally.mitigated if m.service == "svc-edge"]
    assert [(m.at.month, m.seconds) for m in january] == [(1, 61.5)]  # its own offset's month, as `at.month` reads


def test_a_first_view_in_a_fresh_process_reads_no_outcome_whole(settings, loaded):  # noqa: F811
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        _fill(grandbo.org("acme", create=True))
    loaded[0] = 0
    with Grandbo.open(settings) as fresh:
        data = analytics.AnalyticsCache().get(fresh.org("acme"))
        assert data.outcomes == 403 and loaded[0] == 0  # the old page read every outcome into the org's snapshot
        fresh.org("acme").ledger.effectiveness("RB-01")  # a runbook's record is counted by the store too
        assert loaded[0] == 0


def test_an_outcome_the_ledger_cannot_read_is_left_out_of_the_counts_not_an_error(memory):
    """A whole read left out an outcome it could not read (`records.unreadable`); the store's tally turned its values
    into numbers and times as they came (`float("fast")`: ValueError), so one such outcome (a replayed export's, an
    older release's) made the org's analytics page fail. Left out of the durations now, the page shown."""
    memory.runbooks.add("RB-1", "Runbook 1", ["check", "mitigate"])
    memory.ledger.record("RB-1", "succeeded", service="svc-1", time_to_mitigate_s=30.0)
    at = "2024-01-01T00:00:00+00:00"
    crafted = [
        {"runbook_id": "RB-1", "kind": "succeeded", "at": at, "time_to_mitigate_s": "fast", "service": "svc-1"},
        {"runbook_id": "RB-1", "kind": "succeeded", "at": "yesterday", "time_to_mitigate_s": 5, "service": "svc-1"},
        {"runbook_id": "RB-1", "kind": "succeeded", "at": "2024-01-01", "time_to_mitigate_s": 5, "service": "svc-1"},
        {"runbook_id": "RB-1", "kind": "rated", "at": at, "rating": "up"},
    ]
    memory._documents.put([DocumentWrite(OUTCOMES, f"crafted-{n}", data, "outcome.imported", ref="RB-1")
                           for n, data in enumerate(crafted)], "test")  # fmt: skip
    incidents = memory.incidents.summaries()
    figures = memory.figures([incident.id for incident in incidents])
    assert figures is not None
    built = analytics.build(memory, figures, incidents)
    (record,) = [record for runbook_id, record in built.runbooks if runbook_id == "RB-1"]
    # 30 s, and 5 s at "2024-01-01" (a time without a zone is UTC, as `Outcome` reads it); the others left out
    assert record.mttr_median_s == 17.5 and record.thumbs_up == record.thumbs_down == 0
    assert [m.seconds for m in memory.ledger.tally().mitigated] == [5.0, 30.0]  # by time
