"""The numbers behind the analytics page, from one organization's handle: runbook records, time to mitigate
per service over time, incidents per service, how memory grew, and how much of it the vector arm can read.

They are built from every outcome and incident of the org and from what its entries add up to, counted by the store
(`OrgMemory.figures`: no entry is read), so the process keeps them (`AnalyticsCache`) and builds them again only
once one of those changed: a read key polling the page cost a build a view (about 0.5 s of CPU at 20,000 entries
and 100,000 outcomes, probe 19), four of them another org's recall p95 11 -> 730 ms. The entries were read whole,
once per org and process: 26-57 s of the shared process at 228,000 entries (probe 20a).

A build that took over REBUILD_FROM_SECONDS is not made again sooner than REBUILD_EVERY times as long after it: the
views meanwhile show the numbers kept, and say how old they are (never past an erasure: they name services). An org
that wrote an outcome before each view (its own data changed every time) had a build a view: 0.27 s of CPU at
100,000 outcomes, four such loops held another org's recall p50 7 -> 83 ms and p95 28 -> 172 ms (probe 23b); now its
builds take at most a tenth of the process's time."""

from __future__ import annotations

import statistics
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime

from grandbo.memory import OrgMemory
from grandbo.model import CorpusStats
from grandbo.ports import EntryFigures
from grandbo.tiers.effectiveness import Effectiveness, posterior_mean
from grandbo.tiers.erasure import COLLECTION as ERASURES
from grandbo.tiers.incident_model import INCIDENTS, PastIncident
from grandbo.tiers.ledger_tally import LedgerTally, Mitigated
from grandbo.tiers.operations import OUTCOMES

TOP_SERVICES = 6
TOP_RUNBOOKS = 20
READS = (OUTCOMES, INCIDENTS, ERASURES)  # the collections the numbers are made of (an erasure rewrites in place)
MAX_ORGS = 16  # kept at once, as the console's entries; the least recently viewed go first
STATS_SECONDS = 10.0  # the embedding counts change with no write of the org's (the worker embeds): read this often
REBUILD_FROM_SECONDS = 0.05  # a build shorter than this is made again at the next change: a write shows at once
REBUILD_EVERY = 10  # a longer one, not before this many times as long after it (its org's builds: a tenth at most)


@dataclass
class Analytics:
    runbooks: list[tuple[str, Effectiveness]]  # the TOP_RUNBOOKS most tried, the most attempts first
    mttr: dict[str, list[tuple[datetime, float]]]  # service -> (month, median minutes)
    incidents: list[tuple[str, int]]
    growth: dict[str, list[tuple[datetime, float]]]
    stats: CorpusStats
    entries: int
    outcomes: int
    held_s: float = 0.0  # how long ago these numbers were built, when shown without a look for changes since


def _month(at: datetime) -> datetime:
    return datetime(at.year, at.month, 1, tzinfo=UTC)


def _mttr(incidents: list[PastIncident], mitigated: list[Mitigated]) -> dict[str, list[tuple[datetime, float]]]:
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
    for success in mitigated:
        if success.service and success.incident_id not in known:
            samples[success.service].append((success.at, success.seconds / 60))
    busiest = sorted(samples, key=lambda s: (-len(samples[s]), s))[:TOP_SERVICES]
    series = {}
    for service in busiest:
        by_month: dict[datetime, list[float]] = defaultdict(list)
        for at, minutes in samples[service]:
            by_month[_month(at)].append(minutes)
        series[service] = [(month, statistics.median(values)) for month, values in sorted(by_month.items())]
    return series


def _ranked(tally: LedgerTally) -> list[tuple[str, Effectiveness]]:
    """The records of the TOP_RUNBOOKS runbooks of most attempts (then win rate, then id), from the ledger as the store
    counted it; only those shown are summarized."""

    def rank(runbook_id: str) -> tuple[int, float, str]:
        won, lost = tally.counts[runbook_id][:2]
        return -(won + lost), -round(posterior_mean(won, lost), 4), runbook_id  # the win rate, as summarized

    shown = sorted(tally.counts, key=rank)[:TOP_RUNBOOKS]  # untried ones have no record
    return [(rid, tally.effectiveness(rid)) for rid in shown]


def build(memory: OrgMemory, figures: EntryFigures, incidents: list[PastIncident]) -> Analytics:
    """The page's numbers from the org's handle, what its entries add up to and its incidents (`figures` counted
    with those incidents' ids linked)."""
    ledger = memory.ledger.tally()  # counted by the store: not every outcome read into the org's snapshot
    busiest = sorted(_per_service(incidents, figures).items(), key=lambda r: (-r[1], r[0]))
    stored, happened = _cumulative(figures.stored), _cumulative(figures.happened)
    growth = {"by the day it was stored": stored, "by the day it happened": happened}
    return Analytics(
        _ranked(ledger), _mttr(incidents, ledger.mitigated), busiest[:15], growth, memory.stats(), figures.entries,
        ledger.outcomes,
    )  # fmt: skip


def _per_service(incidents: list[PastIncident], figures: EntryFigures) -> dict[str, int]:
    """Service -> the incidents it had: those the incident tier holds and those its findings and post-mortems
    tell (each its incident, else its own), each counted once."""
    counts = dict(figures.incidents)
    told: dict[str, set[str]] = defaultdict(set)  # of the incidents below, those the service's entries tell too
    for service, incident_id in figures.linked:
        told[service].add(incident_id)
    held: dict[str, set[str]] = defaultdict(set)
    for incident in incidents:
        for service in incident.services:
            held[service].add(incident.id)
    for service, ids in held.items():
        counts[service] = counts.get(service, 0) + len(ids - told[service])
    return counts


def _cumulative(counts: Mapping[date, int]) -> list[tuple[datetime, float]]:
    total, out = 0, []
    for day in sorted(counts):
        total += counts[day]
        out.append((datetime(day.year, day.month, day.day, tzinfo=UTC), float(total)))
    if len(out) > 120:  # keep the chart light: one point per stretch, the last one always
        step = len(out) // 120 + 1
        out = out[::step] + ([out[-1]] if (len(out) - 1) % step else [])
    return out


Stamp = tuple[int | None, ...]  # the org's generation and the versions of READS


@dataclass
class _Kept:
    mark: Stamp
    seq: int  # the newest entry event its figures counted
    linked: list[str]  # the ids of the incidents they were counted with (the same while the mark's are)
    analytics: Analytics
    stats_at: float  # when its stats were read (the cache's clock)
    built_at: float = 0.0  # when its build ended (the cache's clock)
    took: float = 0.0  # the CPU its build and the one before it took, the lesser (0: the org's first)
    cost: float = 0.0  # the CPU its build took


@dataclass
class _Gate:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


class AnalyticsCache:
    """Each org's numbers as last built, reused while the org's data they were built from is unchanged: kept by its
    generation (an org dropped and created again under its name is built afresh), the versions of its outcomes,
    incidents and erasures and the newest entry event counted, so a view right after a write shows it. One view of
    an org builds at a time; the others wait for that build and take it (an org's viewers cost one build per change
    of its data, not one a view). At most MAX_ORGS orgs' numbers (each a few series of the page's points), the least
    recently viewed going first."""

    def __init__(
        self, max_orgs: int = MAX_ORGS, clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:  # fmt: skip
        self.max_orgs = max_orgs
        self._clock, self._cpu = clock, cpu  # what a build costs is its thread's CPU: not the machine's load
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._gates: dict[str, _Gate] = {}

    def get(self, memory: OrgMemory) -> Analytics:
        """The organization's numbers as of now (the embedding counts as of STATS_SECONDS ago at most)."""
        org = memory.org
        with self._lock:
            gate = self._gates.setdefault(org, _Gate())
            gate.users += 1
        try:
            with gate.lock:  # one build an org at a time: a view that waited takes what the one before it built
                return self._current(memory)
        finally:
            with self._lock:
                gate.users -= 1
                if not gate.users:
                    self._gates.pop(org, None)

    def _current(self, memory: OrgMemory) -> Analytics:
        # The mark is read before what is built from it: the numbers are as new as it says, or newer.
        epoch, versions = memory.ledger.documents.stamp(READS)
        mark: Stamp = (epoch, *versions)
        with self._lock:
            kept = before = self._kept.get(memory.org)
        now = self._clock()
        if kept is not None and _held_back(kept.mark, mark) and _too_soon(kept, now):  # shown, saying how old
            return replace(kept.analytics, held_s=now - kept.built_at)
        figures, started = None, self._cpu()
        if kept is not None and _covers(kept.mark, mark):  # its incidents are the same: so are their ids
            figures = memory.figures(kept.linked, since=kept.seq)  # None: no entry changed since
            if figures is None and now - kept.stats_at >= STATS_SECONDS:
                kept = replace(kept, analytics=replace(kept.analytics, stats=memory.stats()), stats_at=now)
        else:
            kept = None
        if kept is None or figures is not None:
            incidents = memory.incidents.summaries()
            linked = kept.linked if kept is not None else [incident.id for incident in incidents]
            figures = figures or memory.figures(linked)
            assert figures is not None  # counted, since nothing was given to compare with
            built = build(memory, figures, incidents)  # its stats read last: as old as the build's end
            ended = self._clock()
            cost = self._cpu() - started  # the process's first build also loads what it uses (scipy: 0.25 s)
            took = min(cost, before.cost) if before is not None and before.mark[:1] == mark[:1] else 0.0
            kept = _Kept(mark, figures.seq, linked, built, ended, ended, took, cost)
        with self._lock:
            self._kept[memory.org] = kept
            self._kept.move_to_end(memory.org)
            while len(self._kept) > self.max_orgs:
                self._kept.popitem(last=False)
        return kept.analytics


def _held_back(kept: Stamp, asked: Stamp) -> bool:
    """Whether numbers built at `kept` may be shown for `asked` within their build's stretch: the same generation,
    and no erasure since (the numbers name services: an erased name is never shown once its erasure answered)."""
    erasures = 1 + READS.index(ERASURES)
    return kept[:1] == asked[:1] and kept[erasures] == asked[erasures]


def _too_soon(kept: _Kept, now: float) -> bool:
    """Whether numbers whose build took a while were built too short a while ago to be built again."""
    return kept.took >= REBUILD_FROM_SECONDS and now - kept.built_at < REBUILD_EVERY * kept.took


def _covers(kept: Stamp, asked: Stamp) -> bool:
    """Whether numbers built at `kept` are as new as `asked` wants: the same generation, and each version at least
    as far (a view that waited for another's build read its mark before that build read its own)."""
    return kept[:1] == asked[:1] and all(
        have is not None and want is not None and have >= want for have, want in zip(kept[1:], asked[1:], strict=True)
    )
