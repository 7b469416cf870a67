"""The numbers behind the analytics page, from one organization's handle: runbook records, time to mitigate
per service over time, incidents per service, how memory grew, and how much of it the vector arm can read."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime

from grandbo.memory import OrgMemory
from grandbo.model import CorpusStats, Entry, Kind
from grandbo.tiers.effectiveness import Effectiveness, Outcome, OutcomeKind, summarize
from grandbo.tiers.incident_model import PastIncident
from grandbo.triage.evidence import incident_of

TOP_SERVICES = 6
TOP_RUNBOOKS = 20


@dataclass
class Analytics:
    runbooks: list[tuple[str, Effectiveness]]
    mttr: dict[str, list[tuple[datetime, float]]]  # service -> (month, median minutes)
    incidents: list[tuple[str, int]]
    growth: dict[str, list[tuple[datetime, float]]]
    stats: CorpusStats
    entries: int
    outcomes: int


def _month(at: datetime) -> datetime:
    return datetime(at.year, at.month, 1, tzinfo=UTC)


def _mttr(incidents: list[PastIncident], outcomes: list[Outcome]) -> dict[str, list[tuple[datetime, float]]]:
    """Median minutes to mitigate per service and month: closed incidents, then ledger successes of incidents
    the organization did not run here (imported history), never both for one incident."""
    samples: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    known = set()
    for incident in incidents:
        known.add(incident.id)
        if incident.closed_at is None or not incident.services:
            continue
        seconds = incident.time_to_mitigate_s
        if seconds is None:
            seconds = (incident.closed_at - incident.started_at).total_seconds()
        samples[incident.services[0]].append((incident.closed_at, seconds / 60))
    for outcome in outcomes:
        mitigated = outcome.kind is OutcomeKind.SUCCEEDED and outcome.time_to_mitigate_s and outcome.service
        if mitigated and outcome.service and outcome.time_to_mitigate_s and outcome.incident_id not in known:
            samples[outcome.service].append((outcome.at, outcome.time_to_mitigate_s / 60))
    busiest = sorted(samples, key=lambda s: (-len(samples[s]), s))[:TOP_SERVICES]
    series = {}
    for service in busiest:
        by_month: dict[datetime, list[float]] = defaultdict(list)
        for at, minutes in samples[service]:
            by_month[_month(at)].append(minutes)
        series[service] = [(month, statistics.median(values)) for month, values in sorted(by_month.items())]
    return series


def build(memory: OrgMemory, entries: list[Entry]) -> Analytics:
    """The page's numbers from the org's handle and its entries (every status, from the console's entry cache)."""
    outcomes = memory.ledger.every_outcome()
    by_runbook: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        by_runbook[outcome.runbook_id].append(outcome)
    records = [(rid, summarize(rid, tried)) for rid, tried in by_runbook.items()]  # untried ones have no record
    records.sort(key=lambda r: (-r[1].attempts, -r[1].win_rate, r[0]))

    incidents = memory.incidents.summaries()  # services and times, kept by the process: not every finding
    per_service: dict[str, set[str]] = defaultdict(set)
    for incident in incidents:
        for service in incident.services:
            per_service[service].add(incident.id)
    for entry in entries:
        if entry.kind in (Kind.FINDING, Kind.POSTMORTEM) and entry.status.value != "superseded":
            incident_id = incident_of(entry) or entry.id  # its findings and post-mortem are one incident
            for service in entry.services:
                per_service[service].add(incident_id)
    busiest = sorted(((s, len(ids)) for s, ids in per_service.items()), key=lambda r: (-r[1], r[0]))

    stored = Counter(e.created_at.date() for e in entries)
    happened = Counter(e.occurred_at.date() for e in entries)
    growth = {"by the day it was stored": _cumulative(stored), "by the day it happened": _cumulative(happened)}
    return Analytics(
        records, _mttr(incidents, outcomes), busiest[:15], growth, memory.stats(), len(entries), len(outcomes)
    )


def _cumulative(counts: Counter[date]) -> list[tuple[datetime, float]]:
    total, out = 0, []
    for day in sorted(counts):
        total += counts[day]
        out.append((datetime(day.year, day.month, day.day, tzinfo=UTC), float(total)))
    if len(out) > 120:  # keep the chart light: one point per stretch, the last one always
        step = len(out) // 120 + 1
        out = out[::step] + ([out[-1]] if (len(out) - 1) % step else [])
    return out
