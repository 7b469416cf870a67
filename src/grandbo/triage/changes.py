"""What changed before an alert, and where it started: pure functions over changes, the topology, the org's
received alerts and incidents, so they are tested and measured on their own (`eval.changes_scenario`).

A change is a candidate when it is on the alert's *path* (its service, or one it depends on at any depth:
`Topology.upstream`) and took effect within the window before the alert (`GRANDBO_CHANGE_WINDOW_MINUTES`). The
alert's *burst* is the path's alerts taken back from it while each is at most `burst_gap_minutes` before the next.
Over the burst's services a change's service is upstream of (or is), its score (weights and constants: the ranking
policy's `changes`, `ChangePolicy`) is

    score = w_recency  * 0.5 ** (lead / half_life)    lead: minutes to the first of their alerts (after: after_start)
          + w_topology * mean by_hops(their hops to it)   1 on the service itself, falling with each hop
          + w_explains * their share of the burst's services

The probable origin is the top change's service when it scores `blame_at` or more and came before the first alert
it could explain, else the path's service that alerted first in the burst. What followed earlier changes like a top
one: incidents that started within the window after one of the latest earlier changes of its kind on its service,
on that service or one that depends on it, and how the runbooks used on them did (the ledger's results).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from grandbo.names import service_name
from grandbo.ports import Document
from grandbo.retrieval.policy import ChangePolicy
from grandbo.tiers.change_model import Change
from grandbo.tiers.effectiveness import Outcome, OutcomeKind
from grandbo.tiers.incident_model import PastIncident
from grandbo.tiers.records import read_record
from grandbo.tiers.topology import Topology
from grandbo.triage.evidence import Seen
from grandbo.triage.origin_model import (
    ChangeRecord,
    PlanChange,
    ProbableOrigin,
    RelatedIncident,
    RunbookRecord,
    ScorePart,
)


def first_alerts(
    recent: Iterable[Seen], path: Mapping[str, int], at: datetime, window: timedelta, gap: timedelta
) -> dict[str, Seen]:
    """The first alert of each service of the burst the alert at `at` ends: the alerts on `path` within `window`
    before it, taken back from it while each is at most `gap` before the one after it (a cascade fires in a burst;
    an alert on the path an hour earlier with nothing between is another story)."""
    on_path = sorted(  # ties by id: the same firsts whatever order the alerts were read in
        (s for s in recent if s.service in path and at - window <= s.began <= at),
        key=lambda s: (s.began, s.id),
        reverse=True,
    )
    firsts: dict[str, Seen] = {}
    edge = at
    for seen in on_path:
        if edge - seen.began > gap:
            break
        firsts[str(seen.service)] = seen  # walking back: the last one kept of a service is its first
        edge = seen.began
    return firsts


def _first_of_path(firsts: Mapping[str, Seen], path: Mapping[str, int]) -> str | None:
    """The service of the path that alerted first (ties: the farthest upstream)."""
    if not firsts:
        return None
    return min(firsts, key=lambda s: (firsts[s].began, -path[s], s))


@dataclass(frozen=True, slots=True)
class _Reach:
    """What a change on one service could explain of the burst: the burst's alerting services it is upstream of
    (or is), when the first of them alerted, and how near it is to them."""

    covered: int
    began: datetime
    nearness: float


def _reach(
    service: str, topology: Topology, path: Mapping[str, int], firsts: Mapping[str, Seen], at: datetime,
    policy: ChangePolicy,
) -> _Reach:  # fmt: skip
    below = topology.downstream(service)
    covered = [s for s in firsts if s in below]
    if not covered:  # the alert itself is not among the received ones (given inline): its path alone
        return _Reach(0, at, policy.by_hops(path[service]))
    began = min(firsts[s].began for s in covered)
    # Their hops from it as this walk found them: another walk, from each, may be cut before it reaches `service`
    nearness = sum(policy.by_hops(below[s]) for s in covered) / len(covered)
    return _Reach(len(covered), began, nearness)


def rank(
    changes: Iterable[Change],
    *,
    at: datetime,
    window: timedelta,
    path: Mapping[str, int],
    firsts: Mapping[str, Seen],
    topology: Topology,
    policy: ChangePolicy,
) -> list[PlanChange]:
    """The changes on `path` (service -> hops upstream of the alert's) within `window` before `at`, best first
    (ties: the later first), at most `policy.max_changes`; `firsts`: the first alert of each service of the
    alert's burst (`first_alerts`)."""
    reach: dict[str, _Reach] = {}
    scored: list[tuple[float, datetime, Change, int, float, _Reach]] = []
    burst, late = len(firsts), window.total_seconds() / 60
    for change in changes:
        hops = path.get(change.service)
        before = (at - change.at).total_seconds() / 60
        if hops is None or before < 0 or before > late:
            continue
        found = reach.get(change.service)
        if found is None:
            found = reach[change.service] = _reach(change.service, topology, path, firsts, at, policy)
        recency, nearness, explains = _values(change, found, burst, policy)
        score = policy.recency_weight * recency + policy.topology_weight * nearness + policy.explains_weight * explains
        scored.append((score, change.at, change, hops, before, found))
    scored.sort(key=lambda s: (-s[0], -s[1].timestamp(), s[2].id))
    return [
        _planned(change, hops, before, found, burst, policy)
        for _, _, change, hops, before, found in scored[: policy.max_changes]
    ]


def _values(change: Change, reach: _Reach, burst: int, policy: ChangePolicy) -> tuple[float, float, float]:
    """A change's recency, nearness and share of the burst explained (the components of its score)."""
    lead = (reach.began - change.at).total_seconds() / 60
    recency = 0.5 ** (lead / policy.recency_half_life_minutes) if lead >= 0 else policy.after_start
    return recency, reach.nearness, reach.covered / burst if burst else 0.0


def _planned(change: Change, hops: int, before: float, reach: _Reach, burst: int, policy: ChangePolicy) -> PlanChange:
    """A ranked change with its score explained (built for the listed changes only)."""
    recency, nearness, explains = _values(change, reach, burst, policy)
    lead = (reach.began - change.at).total_seconds() / 60
    when = f"{lead:.0f} minutes before" if lead >= 0 else f"{-lead:.0f} minutes after"
    parts = {
        "recency": (recency, policy.recency_weight, f"{when} the first alert it could explain"),
        "topology": (nearness, policy.topology_weight, "mean nearness to the alerting services it is upstream of"),
        "explains": (explains, policy.explains_weight, f"upstream of {reach.covered} of the {burst} services alerting "
                     "in this burst" if burst else "no alert of the burst was received"),
    }  # fmt: skip
    why = {
        name: ScorePart(value=round(v, 4), weight=w, contribution=round(v * w, 4), note=note)
        for name, (v, w, note) in parts.items()
    }
    return PlanChange(
        id=change.id, source=change.source, service=change.service, kind=change.kind.value, summary=change.summary,
        version=change.version, at=change.at, url=change.url, hops=hops, minutes_before=round(before, 1),
        score=round(sum(p.contribution for p in why.values()), 4), why=why,
    )  # fmt: skip


def record(
    change: PlanChange,
    earlier: Sequence[Change],
    incidents: Sequence[PastIncident],
    outcomes: Outcomes,
    topology: Topology,
    window: timedelta,
    policy: ChangePolicy,
) -> ChangeRecord | None:
    """What followed the latest earlier changes of `change`'s kind on its service (None when there were none):
    the incidents that started within `window` after one, on its service or one depending on it, and how the
    runbooks used on them did (`outcomes` of those incidents, read only when some followed)."""
    alike = sorted(
        (c for c in earlier if c.service == change.service and c.kind.value == change.kind and c.at < change.at),
        key=lambda c: c.at,
        reverse=True,
    )[: policy.history_changes]
    if not alike:
        return None
    feel = topology.downstream(change.service)
    followed: list[str] = []
    for past in alike:
        for incident in incidents:
            hit = past.at <= incident.started_at <= past.at + window and any(s in feel for s in incident.services)
            if hit and incident.id not in followed:
                followed.append(incident.id)
    results: dict[str, list[int]] = {}
    reported = outcomes(followed) if followed else {}
    for incident_id in followed:
        for outcome in reported.get(incident_id, ()):
            if outcome.kind in (OutcomeKind.SUCCEEDED, OutcomeKind.FAILED):
                tally = results.setdefault(outcome.runbook_id, [0, 0])
                tally[0] += outcome.kind is OutcomeKind.SUCCEEDED
                tally[1] += 1
    runbooks = [RunbookRecord(id=r, worked=w, tried=t) for r, (w, t) in results.items()]
    kind = change.kind if len(alike) == 1 else f"{change.kind}s"
    text = f"the last {len(alike)} {kind} of {change.service} ({', '.join(c.id for c in alike)}): "
    if followed:
        text += f"{len(followed)} followed by an incident within {window.total_seconds() / 60:.0f} minutes, "
        text += ", ".join(followed)
    else:
        text += f"no incident followed within {window.total_seconds() / 60:.0f} minutes"
    text += "".join(f"; runbook {r.id} worked {r.worked} of {r.tried}" for r in runbooks)
    return ChangeRecord(
        text=text, earlier=[c.id for c in alike], followed=followed, runbooks=runbooks,
        cites=[*(c.id for c in alike), *followed],
    )  # fmt: skip


def origin(
    service: str | None, path: Mapping[str, int], firsts: Mapping[str, Seen], changes: Sequence[PlanChange],
    policy: ChangePolicy,
) -> ProbableOrigin | None:  # fmt: skip
    """Where it most likely started, with why (None without a service): the top change's service when that change
    came before the first alert it could explain and scores `policy.blame_at` or more; else the service of the
    path whose alert came first in the burst; else the alert's own."""
    if not service:
        return None
    top = changes[0] if changes else None
    if top is not None and top.why["recency"].value > policy.after_start and top.score >= policy.blame_at:
        where = "the alert's own service" if top.hops == 0 else f"{top.hops} hops upstream"
        first = firsts.get(top.service)
        why = (f"{top.kind} {top.id} on {top.service} ({where}) came first, {top.why['recency'].note}; "
               f"{top.why['explains'].note}")  # fmt: skip
        cites = [top.id, *([first.id] if first else [])]
        return ProbableOrigin(service=top.service, hops=top.hops, at=top.at, change_id=top.id,
                              alert_id=first.id if first else None, why=why, cites=cites)  # fmt: skip
    starter = _first_of_path(firsts, path)
    if starter is None or starter == service:
        first = firsts.get(service)
        return ProbableOrigin(
            service=service, hops=0, at=first.began if first else None, alert_id=first.id if first else None,
            why="nothing it depends on alerted or changed first", cites=[first.id] if first else [],
        )  # fmt: skip
    first = firsts[starter]
    why = f"{starter} ({path[starter]} hops upstream) alerted first in this burst, at {first.began:%H:%M}"
    return ProbableOrigin(service=starter, hops=path[starter], at=first.began, alert_id=first.id, why=why,
                          cites=[first.id])  # fmt: skip


def related(
    incidents: Iterable[PastIncident], service: str | None, topology: Topology, policy: ChangePolicy
) -> list[RelatedIncident]:
    """Open incidents on the alert's service or one within `policy.related_hops` of it (either way), nearest first."""
    if not service:
        return []
    out = []
    for incident in incidents:
        if not incident.open:
            continue
        hops = topology.closest([service], incident.services) if incident.services else None
        if hops is not None and hops <= policy.related_hops:
            out.append(RelatedIncident(id=incident.id, title=incident.title, services=list(incident.services),
                                       hops=hops, started_at=incident.started_at))  # fmt: skip
    return sorted(out, key=lambda r: (r.hops, -r.started_at.timestamp(), r.id))


# Changes of an org on some services within [since, until], ordered by time (as `Changes.between`).
Between = Callable[[datetime, datetime, list[str]], list[Change]]
# The latest changes (at most `limit`) of one service and kind within [since, until], newest first (`Changes.find`).
Latest = Callable[[str, str, datetime, datetime, int], list[Change]]
# The outcomes reported for some incidents, by incident (`Ledger.of_incidents`): each's by runbook (that of the oldest
# outcome first), then oldest first, the order in which a change record lists the runbooks used.
Outcomes = Callable[[list[str]], Mapping[str, Sequence[Outcome]]]


def kept_change(stored: Document) -> Change:
    """A stored change (a document of the `change` collection), read once per process (`Snapshots.kept`); its
    service in lower case, as changes are stored now (one stored before may have kept its capitals)."""
    change = read_record(Change, stored, "change", versioned=False)
    lowered = service_name(change.service)
    return change if change.service == lowered else change.model_copy(update={"service": lowered})


def reads_of(changes: Sequence[Change]) -> tuple[Between, Latest]:
    """`Between` and `Latest` over changes in memory (the org's, kept per process; a scenario's)."""

    def between(since: datetime, until: datetime, services: list[str]) -> list[Change]:
        wanted = set(services)
        return sorted((c for c in changes if c.service in wanted and since <= c.at <= until), key=lambda c: c.at)

    def latest(service: str, kind: str, since: datetime, until: datetime, limit: int) -> list[Change]:
        alike = [c for c in changes if c.service == service and c.kind.value == kind and since <= c.at <= until]
        return sorted(alike, key=lambda c: c.at, reverse=True)[:limit]

    return between, latest


@dataclass
class WhatChanged:
    """The plan's part on what changed and where it started."""

    changes: list[PlanChange] = field(default_factory=list)
    origin: ProbableOrigin | None = None
    related: list[RelatedIncident] = field(default_factory=list)


def burst_of(
    service: str, topology: Topology, at: datetime, received: datetime | None
) -> tuple[dict[str, int], datetime]:
    """The path an alert's burst is read on (its service, in lower case as changes are stored, and every service it
    depends on, with their hops) and when the burst ends: at the alert's receipt, for a vendor's start time (`at`)
    comes before it, and the alert is among the received ones at its receipt."""
    return topology.upstream(service_name(service)), max(at, received or at)


def what_changed(
    service: str | None,
    at: datetime,
    window: timedelta,
    *,
    topology: Topology,
    recent: Sequence[Seen],
    incidents: Sequence[PastIncident],
    outcomes: Outcomes,
    between: Between,
    latest: Latest,
    policy: ChangePolicy,
    received: datetime | None = None,
) -> WhatChanged:
    """The changes before the alert ranked, the top ones' records, the probable origin and the related incidents:
    one read of the window's changes on the path, then one per top change (`policy.explained`) of the latest
    earlier changes of its service and kind within `policy.history_days`. `at`: when the alert started;
    `received`: when it was received (the burst of alerts ends there)."""
    if not service:
        return WhatChanged()
    service = service_name(service)  # as changes are stored (an alert given inline keeps its case)
    path, end = burst_of(service, topology, at, received)
    firsts = first_alerts(recent, path, end, window, timedelta(minutes=policy.burst_gap_minutes))
    ranked = rank(
        between(at - window, at, sorted(path)),
        at=at,
        window=window,
        path=path,
        firsts=firsts,
        topology=topology,
        policy=policy,
    )
    for change in ranked[: policy.explained]:
        since = change.at - timedelta(days=policy.history_days)
        earlier = latest(change.service, change.kind, since, change.at, policy.history_changes + 1)
        change.record = record(change, earlier, incidents, outcomes, topology, window, policy)
    return WhatChanged(
        ranked, origin(service, path, firsts, ranked, policy), related(incidents, service, topology, policy)
    )
