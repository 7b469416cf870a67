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

`group_alerts` runs the same placement over a sequence of alerts with no store (the benchmark's hook);
`Alerts.receive` runs it over the open groups of the window, read once per delivery.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from grandbo.ingest.alert import Alert, fired_at, summary_words, words_alike
from grandbo.model import utcnow
from grandbo.tiers.topology import Topology

ALERT_GROUPS = "alert_group"  # the documents' collection; a group's `ref` is its status
GROUP_HOPS = 2  # services at most this far apart (either direction) are related: a caller, its dependency's
TEXT_MEMBERS = 20  # alerts of a group whose words are kept for the text test (the first ones: the outage's start)
# Alerts (and members, and services the catalog does not know) a group lists at most: the first ones. Every later
# alert is counted (`size`) and names its group; listing them all, one storm's group of 3,100 alerts grew to 481 KB,
# written whole at each delivery (105 ms a delivery of 10 at the start, 305 ms at the end) and answered whole by
# `GET /v1/alert-groups`. The catalog's services are all listed: grouping reads them (`closeness`).
GROUP_LISTED = 100
GroupStatus = Literal["open", "opened", "dismissed"]


def _mark(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def word_marks(summary: str) -> list[str]:
    """The summary's words (`summary_words`) as kept by a group: each as a short hash, sorted."""
    return sorted({_mark(word) for word in summary_words(summary)})


def alert_time(alert: Alert) -> datetime:
    """When an alert fired (`fired_at`)."""
    return fired_at(alert.started_at, alert.received_at)


class Member(BaseModel):
    """One alert of a group, as the grouping test reads it."""

    id: str
    service: str | None = None
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
    services: list[str] = Field(
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


def related_services(topology: Topology, a: str | None, b: str | None) -> int | None:
    """How related two services are (the hops between them, 0 for the same one), or None when they are not (no
    service, unknown to the catalog, or more than GROUP_HOPS apart)."""
    if not a or not b:
        return None
    if a == b:
        return 0
    hops = topology.distance(a, b)
    return hops if hops is not None and hops <= GROUP_HOPS else None


def _alike(alert: Member, other: Member) -> bool:
    if alert.fingerprint and alert.fingerprint == other.fingerprint:
        return True
    return bool(alert.words) and words_alike(set(alert.words), set(other.words))


def closeness(topology: Topology, alert: Member, group: AlertGroup) -> int | None:
    """How close an alert is to a group (lower is closer: hops, GROUP_HOPS + 1 for a text match), None if
    unrelated. Text speaks only where topology cannot: one of the two services missing or unknown to it."""
    best: int | None = None
    for service in group.services:
        hops = related_services(topology, alert.service, service)
        if hops is not None and (best is None or hops < best):
            best = hops
    if best is not None:
        return best
    known = alert.service is not None and alert.service in topology
    for member in group.members:
        speaks = not known or member.service is None or member.service not in topology
        if speaks and alert.service != member.service and _alike(alert, member):
            return GROUP_HOPS + 1
    return None


def member_of(alert: Alert) -> Member:
    return Member(id=alert.id, service=alert.service, at=alert_time(alert), fingerprint=_mark(alert.fingerprint),
                  words=word_marks(alert.summary))  # fmt: skip


def place(groups: list[AlertGroup], alert: Alert, topology: Topology, window: timedelta) -> AlertGroup:
    """The group `alert` joins (one of `groups`, updated in place, or a new one appended to them)."""
    member = member_of(alert)
    best: tuple[int, float, str] | None = None
    chosen: AlertGroup | None = None
    for group in groups:
        if group.status != "open" or not group.first_seen - window <= member.at <= group.last_seen + window:
            continue
        near = closeness(topology, member, group)
        if near is None:
            continue
        key = (near, -group.last_seen.timestamp(), group.id)
        if best is None or key < best:
            best, chosen = key, group
    if chosen is None:
        digest = hashlib.sha256(f"{alert.id}\x1f{member.at.isoformat()}".encode()).hexdigest()[:20]
        chosen = AlertGroup(id=f"grp-{digest}", first_seen=member.at, last_seen=member.at)
        groups.append(chosen)
    if len(chosen.members) >= TEXT_MEMBERS:
        member = member.model_copy(update={"words": [], "fingerprint": ""})
    chosen.size += 1
    if len(chosen.alerts) < GROUP_LISTED:
        chosen.members.append(member)
        chosen.alerts.append(alert.id)
    listed = alert.service in topology or len(chosen.services) < GROUP_LISTED  # the catalog's: every one (closeness)
    if alert.service and alert.service not in chosen.services and listed:
        chosen.services.append(alert.service)
    chosen.first_seen, chosen.last_seen = min(chosen.first_seen, member.at), max(chosen.last_seen, member.at)
    chosen.updated_at = utcnow()
    return chosen


def in_order(alerts: Iterable[Alert]) -> list[Alert]:
    """Alerts as grouping takes them: by when they fired, then by id (deterministic whatever the delivery's order)."""
    return sorted(alerts, key=lambda alert: (alert_time(alert), alert.id))


def group_alerts(
    alerts: Sequence[Alert], topology: Topology, window: timedelta = timedelta(minutes=30)
) -> list[AlertGroup]:
    """The groups a sequence of alerts (of one organization) forms, with no store: what `Alerts.receive` does
    delivery by delivery, here over all of them in time order. Pure and deterministic."""
    groups: list[AlertGroup] = []
    for alert in in_order(alerts):
        place(groups, alert, topology, window)
    return groups
