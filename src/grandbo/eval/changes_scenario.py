"""A seeded scenario of an organization's week: about 50 services, a stream of deploys and config changes, outages
with a known cause, and background noise alerts; and the measure of how the plan's `changes` and `origin` find the
cause (`benchmarks/changes.py`).

The topology is layered (edge -> api -> core -> platform -> data), each service calling one to three services of
the layers below it, so paths run two to four hops deep. Changes arrive on every service at random (deploys most,
then config, flags, infra). An outage starts with its cause, one of:

* `bad_deploy`: a deploy on a service of the api, core or platform layer;
* `config_push`: a config change on such a service;
* `dependency_outage`: an infra change (a failover, a node pool upgrade) on a data or platform service.

Its first alert fires 2 to 15 minutes after the cause, on the changed service (or, when that one is silent, which
is 30% of bad deploys and config pushes and half the dependency outages, on its first callers), then the callers
alert hop by hop, each 1 to 6 minutes after the one it calls. Noise alerts fire on random services all week. Every
alert keeps its true outage id (None for noise): what alert grouping is measured against.

Same seed, same scenario: everything is drawn from one `random.Random(seed)`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from grandbo.eval.metrics import percentile
from grandbo.ingest.alert import summary_marks
from grandbo.retrieval.policy import DEFAULT_POLICY, ChangePolicy
from grandbo.tiers.change_model import Change, ChangeKind
from grandbo.tiers.topology import Service, Topology
from grandbo.triage import changes as plan_changes
from grandbo.triage.evidence import Seen

LAYERS = (("edge", 5), ("api", 10), ("core", 14), ("platform", 12), ("data", 9))
CAUSES = ("bad_deploy", "config_push", "dependency_outage")
START = datetime(2026, 3, 2, tzinfo=UTC)
DAYS = 7
CHANGES_PER_HOUR = 10.0
NOISE_PER_HOUR = 3.0
OUTAGES = 24
_NOISE = ("p99 latency above SLO", "error rate above 2%", "pod restarts", "disk usage above 85%", "cpu throttling",
          "queue depth growing", "certificate expires in 7 days", "5xx responses rising")  # fmt: skip
_SYMPTOM = ("5xx error rate above 5%", "p99 latency above 2s", "connection pool exhausted", "timeouts calling upstream")


@dataclass(frozen=True)
class ScenarioAlert:
    """An alert of the scenario, with its true outage (None: noise)."""

    id: str
    service: str
    summary: str
    fingerprint: str
    at: datetime
    outage: str | None

    def seen(self) -> Seen:
        return Seen(self.id, self.fingerprint, self.service, summary_marks(self.summary), self.at, self.at)


@dataclass(frozen=True)
class Outage:
    """An injected outage: its cause (a change), the service it started on, its alerts in order."""

    id: str
    cause: str
    change_id: str
    origin: str
    alerts: tuple[str, ...]


@dataclass
class Scenario:
    seed: int
    services: list[Service]
    changes: list[Change]
    alerts: list[ScenarioAlert]
    outages: list[Outage]
    topology: Topology = field(init=False)
    between: plan_changes.Between = field(init=False)
    latest: plan_changes.Latest = field(init=False)

    def __post_init__(self) -> None:
        self.topology = Topology(self.services)
        self.between, self.latest = plan_changes.reads_of(self.changes)  # as a triage reads the org's changes


def _topology(rng: random.Random) -> list[Service]:
    layers = [[f"{name}-{n:02d}" for n in range(1, count + 1)] for name, count in LAYERS]
    services = []
    for depth, names in enumerate(layers):
        below = [s for layer in layers[depth + 1 :] for s in layer]
        following = layers[depth + 1] if depth + 1 < len(layers) else []
        for name in names:
            calls: set[str] = set()
            for _ in range(rng.randint(1, 3) if below else 0):
                # Mostly the next layer down; sometimes one further (a core service calling a data store).
                calls.add(rng.choice(following) if rng.random() < 0.75 else rng.choice(below))
            services.append(Service(name=name, depends_on=sorted(calls)))
    return services


def _change(rng: random.Random, n: int, service: str, kind: ChangeKind, at: datetime, summary: str) -> Change:
    version = f"v{rng.randint(1, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}" if kind is ChangeKind.DEPLOY else None
    return Change(
        id=f"chg-{n:05d}", service=service, kind=kind, summary=summary, version=version, at=at,
        url=f"https://deploys.example/{service}/{n}", source="generic", received_at=at,
    )  # fmt: skip


def _background(rng: random.Random, names: Sequence[str], start: datetime, hours: float) -> list[Change]:
    kinds = [ChangeKind.DEPLOY] * 14 + [ChangeKind.CONFIG] * 4 + [ChangeKind.FLAG] * 1 + [ChangeKind.INFRA] * 1
    out: list[Change] = []
    at = start
    while True:
        at += timedelta(hours=rng.expovariate(CHANGES_PER_HOUR))
        if at >= start + timedelta(hours=hours):
            return out
        kind, service = rng.choice(kinds), rng.choice(names)
        out.append(_change(rng, len(out), service, kind, at, f"{kind.value} of {service}"))


def generate(seed: int, *, outages: int = OUTAGES, days: int = DAYS) -> Scenario:
    """The scenario of `seed` (deterministic)."""
    rng = random.Random(seed)
    services = _topology(rng)
    topology = Topology(services)
    names = [s.name for s in services]
    hours = days * 24.0
    changes = _background(rng, names, START, hours)
    alerts: list[ScenarioAlert] = []
    found: list[Outage] = []
    slot = hours / outages
    for number in range(outages):
        cause = CAUSES[number % len(CAUSES)]
        layers = ("data", "platform") if cause == "dependency_outage" else ("api", "core", "platform")
        origin = rng.choice([n for n in names if n.split("-")[0] in layers])
        kind = {"bad_deploy": ChangeKind.DEPLOY, "config_push": ChangeKind.CONFIG}.get(cause, ChangeKind.INFRA)
        at = START + timedelta(hours=slot * number + rng.uniform(2, slot - 2))
        change = _change(rng, 100_000 + number, origin, kind, at, f"{kind.value} of {origin}")
        changes.append(change)
        outage_id = f"outage-{number:02d}"
        silent = rng.random() < (0.5 if cause == "dependency_outage" else 0.3)
        fired = _cascade(rng, topology, origin, at + timedelta(minutes=rng.uniform(2, 15)), silent)
        ids = []
        for position, (service, when) in enumerate(fired):
            symptom = rng.choice(_SYMPTOM)
            alert_id = f"{outage_id}-a{position}"
            alerts.append(
                ScenarioAlert(alert_id, service, f"{service} {symptom}", f"{service}:{symptom}", when, outage_id)
            )
            ids.append(alert_id)
        found.append(Outage(outage_id, cause, change.id, origin, tuple(ids)))
    at, noise = START, 0
    while True:
        at += timedelta(hours=rng.expovariate(NOISE_PER_HOUR))
        if at >= START + timedelta(hours=hours):
            break
        service, what = rng.choice(names), rng.choice(_NOISE)
        alerts.append(ScenarioAlert(f"noise-{noise:04d}", service, f"{service} {what}", f"{service}:{what}", at, None))
        noise += 1
    changes.sort(key=lambda c: (c.at, c.id))
    alerts.sort(key=lambda a: (a.at, a.id))
    return Scenario(seed, services, changes, alerts, found)


def _cascade(
    rng: random.Random, topology: Topology, origin: str, first: datetime, silent: bool
) -> list[tuple[str, datetime]]:
    """(service, time) of an outage's alerts: the origin (unless silent), then callers hop by hop, up to 3 hops and
    two callers a hop (an outage that would fire nowhere fires on the origin after all)."""
    fired: list[tuple[str, datetime]] = [] if silent else [(origin, first)]
    frontier = [(origin, first)]
    for _ in range(3):
        following = []
        for service, when in frontier:
            callers = sorted(topology.downstream(service).items())
            direct = [name for name, hops in callers if hops == 1]
            for caller in rng.sample(direct, min(len(direct), 2)):
                if caller not in {s for s, _ in fired}:
                    at = when + timedelta(minutes=rng.uniform(1, 6))
                    fired.append((caller, at))
                    following.append((caller, at))
        frontier = following
    return sorted(fired, key=lambda f: f[1]) or [(origin, first)]


@dataclass
class Score:
    """The counts behind the report, over the outages' alerts."""

    alerts: int = 0
    first: int = 0
    top3: int = 0
    innocent_first: int = 0
    listed: int = 0
    origin_right: int = 0
    noise_alerts: int = 0
    noise_blamed: int = 0
    ranks: list[int] = field(default_factory=list)

    def add(self, other: Score) -> None:
        for name in ("alerts", "first", "top3", "innocent_first", "listed", "origin_right", "noise_alerts",
                     "noise_blamed"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.ranks += other.ranks

    def report(self) -> dict[str, Any]:
        def share(n: int, of: int) -> float | None:
            return round(n / of, 4) if of else None

        return {
            "outage_alerts": self.alerts,
            "true_cause_first": share(self.first, self.alerts),
            "true_cause_top3": share(self.top3, self.alerts),
            "innocent_first": share(self.innocent_first, self.alerts),
            "true_cause_listed": share(self.listed, self.alerts),
            "origin_right": share(self.origin_right, self.alerts),
            "true_cause_rank_p90": percentile([float(r) for r in self.ranks], 90) if self.ranks else None,
            "noise_alerts": self.noise_alerts,
            "noise_change_blamed": share(self.noise_blamed, self.noise_alerts),
        }


def measure(scenario: Scenario, policy: ChangePolicy = DEFAULT_POLICY.changes, window_minutes: int = 120) -> Score:
    """Each alert of the scenario triaged for its changes and origin (`triage.changes.what_changed`, what every plan
    runs), with only what had happened by then: the changes and the alerts received up to it."""
    window, score = timedelta(minutes=window_minutes), Score()
    causes = {o.id: o for o in scenario.outages}
    seen = [a.seen() for a in scenario.alerts]
    for position, alert in enumerate(scenario.alerts):
        changed = plan_changes.what_changed(
            alert.service, alert.at, window, topology=scenario.topology, recent=seen[: position + 1], incidents=(),
            outcomes=lambda _: {}, between=scenario.between, latest=scenario.latest, policy=policy,
        )  # fmt: skip
        ids = [c.id for c in changed.changes]
        if alert.outage is None:
            score.noise_alerts += 1
            score.noise_blamed += bool(changed.origin and changed.origin.change_id)
            continue
        outage = causes[alert.outage]
        score.alerts += 1
        score.first += ids[:1] == [outage.change_id]
        score.top3 += outage.change_id in ids[:3]
        score.innocent_first += bool(ids) and ids[0] != outage.change_id
        score.listed += outage.change_id in ids
        score.origin_right += bool(changed.origin and changed.origin.service == outage.origin)
        score.ranks.append(ids.index(outage.change_id) + 1 if outage.change_id in ids else len(ids) + 1)
    return score


def grouped_together(scenario: Scenario, groups: Iterable[Iterable[str]]) -> float | None:
    """The share of outages whose alerts (two or more) all fall in one group of `groups` (alert ids): the measure
    of alert grouping against the scenario's true outage ids."""
    where = {alert_id: n for n, group in enumerate(groups) for alert_id in group}
    several = [o for o in scenario.outages if len(o.alerts) > 1]
    together = sum(len({where.get(a, f"alone:{a}") for a in o.alerts}) == 1 for o in several)
    return round(together / len(several), 4) if several else None


def run(
    seeds: Iterable[int], policy: ChangePolicy = DEFAULT_POLICY.changes, window_minutes: int = 120,
    group: Callable[[Scenario], Iterable[Iterable[str]]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The report over `seeds`: `measure` summed, and alert grouping's measure when a grouping is given."""
    total, grouping = Score(), []
    for seed in seeds:
        scenario = generate(seed)
        total.add(measure(scenario, policy, window_minutes))
        if group is not None:
            share = grouped_together(scenario, group(scenario))
            if share is not None:
                grouping.append(share)
    report = total.report()
    report["grouping_together"] = round(sum(grouping) / len(grouping), 4) if grouping else None
    return report
