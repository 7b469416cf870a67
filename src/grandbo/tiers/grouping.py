"""Alert grouping, pure: which alerts of one organization are one candidate incident.

An alert joins an open group when it fired within the window of the group's alerts (from `window` before
its first alert to `window` after its last, by when each alert started, else when it was received) and is
related to one of them:

* by topology: the same service, or services at most GROUP_HOPS apart in the catalog's dependency graph
  (`related_services`: the one test of relatedness, which a hop-weighted topology can replace);
* by text, where topology cannot say (either alert names no service, or one the catalog does not know): the
  same fingerprint, or at least half the summary's words in common, as the recurrence label counts an alert
  "like" another (`triage.evidence`).

Of several groups it could join, it joins the closest (the fewest hops to one of its services, text last),
then the one whose last alert is the latest, then by id: the same alerts give the same groups, whatever
order a delivery lists them in (each delivery is taken in time order). An alert never moves to another group
and groups never merge. A group keeps no text of its alerts: their words and fingerprints only as short
hashes, so an erasure or a redaction has the alerts' text to deal with, never the group's (an incident opened
from a group is titled after its first alert, read then).

What text costs is bounded whatever the alerts say: a member keeps at most WORD_MARKS of its words (a longer
summary's lowest marks, so the same words keep the same ones), and an alert is tested against at most TEXT_TESTS
alerts of other groups, in the order it would choose among them, before it starts a group of its own. A delivery's
groups are indexed once (`Groups`: by service, fingerprint and word), so an alert is tested against the groups that
can take it, not every open one.

`group_alerts` runs the same placement over a sequence of alerts with no store (the benchmark's hook);
`Alerts.receive` runs it over the open groups of the window, read once per delivery.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field, model_validator

from grandbo.ingest.alert import ALIKE_WORDS, Alert, fired_at, summary_marks, words_alike
from grandbo.ingest.alert import WORD_MARKS as WORD_MARKS  # named there: the triage's alike test reads it too
from grandbo.model import utcnow
from grandbo.names import ServiceName
from grandbo.tiers.topology import Topology

ALERT_GROUPS = "alert_group"  # the documents' collection; a group's `ref` is its status
GROUP_HOPS = 2  # services at most this far apart (either direction) are related: a caller, its dependency's
TEXT_MEMBERS = 20  # alerts of a group whose words are kept for the text test (the first ones: the outage's start)
# The alerts of other groups one alert is compared with by text at most, the likeliest first (`Groups.closest`'s
# order); past them it starts a group. Without a catalog, the changes scenario's 23,900 alerts took at most 13 tests
# (9 to find their group), dense synthetic storms (250 alerts, a 30-word vocabulary, 20 services) 142 (138). Testing
# every member of every open group, probe 18a's delivery of 500 alerts of 2,000 characters of random words cost 17.0 s
# of CPU, 54.6 s into the 500 groups of another such (1.0 and 1.4 s now, `benchmarks/group_cost.py`).
TEXT_TESTS = 200
# Alerts (and members, and services the catalog does not know) a group lists at most: the first ones. Every later
# alert is counted (`size`) and names its group; listing them all, one storm's group of 3,100 alerts grew to 481 KB,
# written whole at each delivery (105 ms a delivery of 10 at the start, 305 ms at the end) and answered whole by
# `GET /v1/alert-groups`. The catalog's services are all listed: grouping reads them (`Groups.closest`).
GROUP_LISTED = 100
GroupStatus = Literal["open", "opened", "dismissed"]
# A service's group slot (a document of this collection): every delivery that groups alerts of the service writes it,
# expecting the version read before the open groups. Two deliveries that read the same groups and each start (or
# widen) one for the service then conflict, and the second reads again and joins the first's group, as it would
# have delivered after it (probe 21: 9 of 12 simultaneous pairs formed two groups).
GROUP_SLOTS = "group_slot"


def _mark(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def word_marks(summary: str) -> list[str]:
    """The summary's words as kept by a group: the marks the alike tests compare (`summary_marks`: at most
    WORD_MARKS, a longer summary's lowest), in hex, sorted."""
    return sorted(f"{mark:012x}" for mark in summary_marks(summary))


def slot_of(alert: Alert) -> str:
    """The id of the group slot (GROUP_SLOTS) of an alert's service (one for every alert without a service)."""
    return "slot-" + _mark(f"service\x1f{alert.service or ''}")


def alert_time(alert: Alert) -> datetime:
    """When an alert fired (`fired_at`)."""
    return fired_at(alert.started_at, alert.received_at)


class Member(BaseModel):
    """One alert of a group, as the grouping test reads it."""

    id: str
    service: ServiceName | None = None
    at: datetime
    fingerprint: str = Field("", description="The sender's fingerprint, as a short hash.")
    words: list[str] = Field(default_factory=list, description="The summary's words, as short hashes.")


class AlertGroup(BaseModel):
    """A candidate incident: alerts of one organization close in time on related services."""

    id: str = Field(description="`GET /v1/alert-groups/{id}` answers it.")
    alerts: list[str] = Field(
        default_factory=list,
        description=f"The alerts' ids, in the order they joined: the first {GROUP_LISTED} (`size` counts them all; "
        "each alert names its group).",
    )
    size: int = Field(default=0, description="How many alerts joined it.")
    services: list[ServiceName] = Field(
        default_factory=list,
        description=f"Their services, in the order first seen (of those the catalog does not know, the first "
        f"{GROUP_LISTED}).",
    )
    first_seen: datetime
    last_seen: datetime
    status: GroupStatus = "open"
    incident_id: str | None = Field(None, description="The incident opened from it (status `opened`).")
    members: list[Member] = Field(
        default_factory=list, description=f"What the grouping test reads of each alert (the first {GROUP_LISTED})."
    )
    updated_at: datetime = Field(default_factory=utcnow)
    version: int = Field(default=0, exclude=True)

    @model_validator(mode="after")
    def _counted(self) -> AlertGroup:
        """A group stored before `size` counted its alerts listed them all."""
        self.size = max(self.size, len(self.alerts))
        return self

    @property
    def listed_whole(self) -> bool:
        """Whether it lists every alert that joined it."""
        return self.size == len(self.alerts)


def related_services(topology: Topology, service: str | None) -> dict[str, int]:
    """The services related to `service`, by the hops between them (0 for itself); none without a service. The one
    test of relatedness, which a hop-weighted topology can replace: the same service, or at most GROUP_HOPS apart
    (either direction) in the catalog's graph; a service the catalog does not know is related to itself only."""
    return topology.around(service, GROUP_HOPS) if service else {}


class _Said(NamedTuple):
    """What the text test reads of a member: its service, its fingerprint, its words as a set (made once)."""

    service: str | None
    fingerprint: str
    words: frozenset[str]


def _alike(member: Member, words: frozenset[str], said: _Said) -> bool:
    """The text test: the same fingerprint, or ALIKE_WORDS of their words in common (`words`: the member's)."""
    return bool(member.fingerprint and member.fingerprint == said.fingerprint) or (
        bool(words) and words_alike(words, said.words)
    )


def _prefix(marks: Sequence[str]) -> Sequence[str]:
    """The first of a summary's marks (sorted), one of which every summary alike it (`words_alike`) has among the
    first of its own: two sets of n and m elements with a share t of their union in common, sorted alike, share one
    of the first n - ceil(t n) + 1 of the one and m - ceil(t m) + 1 of the other (the prefix filter of set-similarity
    joins). `int` rounds t n down where `ceil` rounds it up: one more kept, never one too few."""
    return marks[: len(marks) - int(ALIKE_WORDS * len(marks)) + 1]


class Groups:
    """The groups one delivery's alerts are placed in (`place`): those read, then those its alerts start. Indexed
    once, by service, fingerprint and first words (each member's set of words made once), and kept so as alerts
    join: an alert is tested against the groups that can take it, not every open one (TEXT_TESTS)."""

    def __init__(self, groups: Iterable[AlertGroup], topology: Topology, window: timedelta) -> None:
        self.topology, self.window = topology, window
        self.groups: list[AlertGroup] = []
        self._rank: list[tuple[float, str]] = []  # each group's order among those an alert could join alike
        self._said: list[list[_Said]] = []
        self._services: dict[str, set[int]] = {}  # each service's groups, by position
        self._fingerprints: dict[str, set[int]] = {}
        self._words: dict[str, set[int]] = {}  # by the first words of their members (`_prefix`)
        self._related: dict[str, dict[str, int]] = {}
        self.untested = 0  # alerts that started a group after TEXT_TESTS tests, some groups untested (logged)
        for group in groups:
            self.add(group)

    def add(self, group: AlertGroup) -> int:
        """Index a group (its position)."""
        at = len(self.groups)
        self.groups.append(group)
        self._rank.append((-group.last_seen.timestamp(), group.id))
        self._said.append([])
        for service in group.services:
            self._services.setdefault(service, set()).add(at)
        for member in group.members:
            self._say(at, member)
        return at

    def _say(self, at: int, member: Member) -> None:
        if not member.fingerprint and not member.words:  # past TEXT_MEMBERS: never alike
            return
        # A group stored before WORD_MARKS kept them all. One stored before the marks were CRCs (2026-12-06) kept
        # sha256 ones, which no later alert's match: its window's later alerts join it by topology and fingerprint.
        words = sorted(set(member.words))[:WORD_MARKS]
        self._said[at].append(_Said(member.service, member.fingerprint, frozenset(words)))
        if member.fingerprint:
            self._fingerprints.setdefault(member.fingerprint, set()).add(at)
        for mark in _prefix(words):
            self._words.setdefault(mark, set()).add(at)

    def _open_at(self, at: int, when: datetime) -> bool:
        group = self.groups[at]
        return group.status == "open" and group.first_seen - self.window <= when <= group.last_seen + self.window

    def closest(self, member: Member) -> int | None:
        """The group (its position) an alert joins: of those open whose span holds its time, the closest by
        topology (the fewest hops to one of its services), then by the latest last alert, then by id; else,
        where topology cannot say, the first alike by text in that order (`_by_text`); None for none."""
        related = self._related.get(member.service or "")
        if related is None:
            related = self._related[member.service or ""] = related_services(self.topology, member.service)
        best: tuple[int, tuple[float, str]] | None = None
        chosen: int | None = None
        for service, hops in related.items():
            for at in self._services.get(service, ()):
                key = (hops, self._rank[at])
                if (best is None or key < best) and self._open_at(at, member.at):
                    best, chosen = key, at
        return chosen if chosen is not None else self._by_text(member)

    def _by_text(self, member: Member) -> int | None:
        """The first group, in `closest`'s order, with an alert like this one by text (`_alike`) where topology
        cannot say (either service missing or unknown to the catalog; the same service is topology's). Only groups
        sharing its fingerprint or one of its first words (`_prefix`) can be; of them, at most TEXT_TESTS of their
        alerts are tested."""
        known, words = member.service in self.topology, frozenset(member.words)
        found = set(self._fingerprints.get(member.fingerprint, ()))
        for mark in _prefix(member.words):
            found.update(self._words.get(mark, ()))
        tests = 0
        for at in sorted(found, key=self._rank.__getitem__):
            if not self._open_at(at, member.at):
                continue
            for said in self._said[at]:
                if said.service == member.service or (known and said.service in self.topology):
                    continue
                if tests == TEXT_TESTS:
                    self.untested += 1
                    return None
                tests += 1
                if _alike(member, words, said):
                    return at
        return None

    def joined(self, at: int, member: Member | None, service: str | None) -> None:
        """Index what an alert added to a group (its member, if listed; its service, if new)."""
        group = self.groups[at]
        self._rank[at] = (-group.last_seen.timestamp(), group.id)
        if member is not None:
            self._say(at, member)
        if service is not None:
            self._services.setdefault(service, set()).add(at)


def member_of(alert: Alert) -> Member:
    return Member(id=alert.id, service=alert.service, at=alert_time(alert), fingerprint=_mark(alert.fingerprint),
                  words=word_marks(alert.summary))  # fmt: skip


def place(groups: Groups, alert: Alert) -> AlertGroup:
    """The group `alert` joins (one of `groups`, updated in place, or a new one added to them)."""
    member = member_of(alert)
    at = groups.closest(member)
    if at is None:
        digest = hashlib.sha256(f"{alert.id}\x1f{member.at.isoformat()}".encode()).hexdigest()[:20]
        at = groups.add(AlertGroup(id=f"grp-{digest}", first_seen=member.at, last_seen=member.at))
    chosen = groups.groups[at]
    if len(chosen.members) >= TEXT_MEMBERS:
        member = member.model_copy(update={"words": [], "fingerprint": ""})
    chosen.size += 1
    listed = len(chosen.alerts) < GROUP_LISTED
    if listed:
        chosen.members.append(member)
        chosen.alerts.append(alert.id)
    new = alert.service if alert.service and alert.service not in chosen.services else None
    if new and (new in groups.topology or len(chosen.services) < GROUP_LISTED):  # every catalog service (closest)
        chosen.services.append(new)
    else:
        new = None
    chosen.first_seen, chosen.last_seen = min(chosen.first_seen, member.at), max(chosen.last_seen, member.at)
    chosen.updated_at = utcnow()
    groups.joined(at, member if listed else None, new)
    return chosen


def in_order(alerts: Iterable[Alert]) -> list[Alert]:
    """Alerts as grouping takes them: by when they fired, then by id (deterministic whatever the delivery's order)."""
    return sorted(alerts, key=lambda alert: (alert_time(alert), alert.id))


def group_alerts(
    alerts: Sequence[Alert], topology: Topology, window: timedelta = timedelta(minutes=30)
) -> list[AlertGroup]:
    """The groups a sequence of alerts (of one organization) forms, with no store: what `Alerts.receive` does
    delivery by delivery, here over all of them in time order. Pure and deterministic."""
    groups = Groups((), topology, window)
    for alert in in_order(alerts):
        place(groups, alert)
    return groups.groups
