"""One organization's alert groups (`tiers.grouping` forms them as alerts are stored): read them, dismiss one,
and open an incident from one or from a list of alerts.

A group is a document (collection `alert_group`, its `ref` its status) that `Alerts.receive` writes in the same
write as the alerts that joined it. Opening an incident from it lists the group's alerts and services on the
incident, titles it after the group's first alert, starts it when that alert fired, and marks the group
`opened` with the incident's id (an incident whose id derives from the group's, so a second attempt after a
failure between the two writes finds the incident and finishes, never opens two).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from grandbo.errors import ConflictError, InvalidInputError, NotFoundError
from grandbo.pages import Mark
from grandbo.ports import DocumentWrite, Position
from grandbo.tiers.alerts import StoredAlert
from grandbo.tiers.grouping import ALERT_GROUPS, AlertGroup, GroupStatus, alert_time
from grandbo.tiers.incident_model import INCIDENTS, Incident
from grandbo.tiers.incidents import new_incident_id
from grandbo.tiers.records import next_page, read_listed, required, stored
from grandbo.tiers.retry import rewritten
from grandbo.triage.plan import PLAN_GROUP_ALERTS, PlanGroup

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

MAX_FROM_ALERTS = 100  # alerts one incident is opened from at most (as an incident lists at most)


def title_of(first_summary: str, alerts: int, services: Sequence[str]) -> str:
    """An incident's title from its group: the first alert's summary, and how many alerts on which services."""
    title = " ".join(first_summary.split())[:300] or "alerts"
    if alerts > 1:
        named = ", ".join(services[:5]) + (f" and {len(services) - 5} more" if len(services) > 5 else "")
        title += f" ({alerts} alerts" + (f" on {named})" if named else ")")
    return title


def refuse_what_alerts_give(**given: object) -> None:
    """An incident opened from alerts takes its services, severity, start, symptoms and alerts from them: any of
    those given as well is refused (422, naming them), on every face."""
    if named := [name for name, value in given.items() if value]:
        raise InvalidInputError(
            f"from_alerts takes the services, severity, start and alerts from the alerts: leave out "
            f"{', '.join(named)}.",
            detail={"fields": named},
        )


class AlertGroups:
    """The alert groups of one organization."""

    def __init__(self, memory: OrgMemory) -> None:
        self.memory, self.documents = memory, memory.alerts.documents  # the org's documents, as its alerts'

    def find(self, group_id: str) -> AlertGroup | None:
        return stored(self.documents, AlertGroup, ALERT_GROUPS, group_id, "alert group")

    def get(self, group_id: str) -> AlertGroup:
        return required(self.find(group_id), "alert group", "group_id", group_id, listed_by="`GET /v1/alert-groups`")

    def plan_group(self, group_id: str | None) -> PlanGroup | None:
        """What a plan says of the group an alert joined (None: none, or no longer readable)."""
        group = self.find(group_id) if group_id else None
        if group is None:
            return None
        return PlanGroup(id=group.id, alerts=group.alerts[:PLAN_GROUP_ALERTS], size=group.size,
                         services=group.services, first_seen=group.first_seen)  # fmt: skip

    def page(
        self, limit: int = 50, *, after: Position = None, status: GroupStatus | None = None,
        service: str | None = None, since: datetime | None = None,
    ) -> tuple[list[tuple[AlertGroup, Mark]], Position]:  # fmt: skip
        """Up to `limit` groups, the most recently changed first, each with its place (`read_listed`), and where the
        next page starts (None: the last); only those of `status`, changed at or after `since`, and with `service`
        among theirs (read and left out here: a page may then hold fewer than `limit`, never a group without it)."""
        docs = self.documents.newest(ALERT_GROUPS, limit, before=after, since=since,
                                     refs=[status] if status else None)  # fmt: skip
        groups = read_listed(AlertGroup, docs, "alert group")
        if service:
            wanted = self.memory.alerts.service_name(service)
            groups = [(group, mark) for group, mark in groups if wanted in group.services]
        return groups, next_page(docs, limit)

    def dismiss(self, group_id: str, *, actor: str = "api") -> AlertGroup:
        """Mark a group dismissed: no alert joins it any more (a later one starts a new group)."""

        def attempt() -> AlertGroup:
            group = self.get(group_id)
            if group.status == "opened":
                raise ConflictError(
                    f"Alert group {group_id!r} was opened as incident {group.incident_id!r}: close the incident "
                    "instead.",
                    detail={"group_id": group_id, "incident_id": group.incident_id},
                )
            return self._save(group.model_copy(update={"status": "dismissed"}), "alert_group.dismissed", actor)

        return rewritten(attempt)

    def open_incident(self, group_id: str, *, title: str | None = None, actor: str = "api") -> Incident:
        """Open an incident from a group: its alerts (those it lists), services, first alert's time and a title
        derived from it (counting every alert that joined it)."""
        return self.open_group(group_id, title=title, actor=actor)[0]

    def open_group(self, group_id: str, *, title: str | None = None, actor: str = "api") -> tuple[Incident, bool]:
        """`open_incident`, and whether this call opened the incident (False: an attempt before it, or a request at
        the same time, did; this one found it and finished marking the group, or found it marked). The incident
        copies its alerts' text: read again when an erasure committed before it was written (`grandbo.unerased`);
        a run again that finds the group opened as the incident its run before made finishes it (its late alerts)."""
        made: list[str] = []  # the incident an attempt of this call wrote
        return self.memory.unerased.run(lambda: self._open_group(group_id, title, actor, made))

    def _open_group(self, group_id: str, title: str | None, actor: str, made: list[str]) -> tuple[Incident, bool]:
        group = self.get(group_id)
        if group.status == "opened" and group.incident_id and group.incident_id not in made:
            raise ConflictError(
                f"Alert group {group_id!r} is already incident {group.incident_id!r}: "
                f"`grandbo incident show {group.incident_id}`.",
                detail={"group_id": group_id, "incident_id": group.incident_id},
            )
        alerts = self._alerts(group.alerts)
        incident_id = "inc-" + group.id.removeprefix("grp-")[:16]
        return self._open(alerts, [group], title, actor, incident_id, made, size=group.size)

    def open_from_alerts(
        self, alert_ids: Sequence[str], *, title: str | None = None, incident_id: str | None = None, actor: str = "api"
    ) -> Incident:
        """Open an incident from alerts named by id (any groups): a group all of whose alerts are among them is
        marked opened with it. Fenced by erasures, as `open_group` (its id chosen once: a run again after the
        incident was written finds it, and writes no second one)."""
        ids = list(dict.fromkeys(a.strip() for a in alert_ids if a.strip()))
        if not ids:
            raise InvalidInputError("Name at least one alert id (`GET /v1/alerts` lists them).", detail={})
        if len(ids) > MAX_FROM_ALERTS:
            raise InvalidInputError(f"At most {MAX_FROM_ALERTS} alerts make one incident, not {len(ids)}.",
                                    detail={"alerts": len(ids)})  # fmt: skip

        def opened() -> Incident:
            alerts = self._alerts(ids)
            groups = [g for gid in dict.fromkeys(a.group_id for a in alerts if a.group_id) if (g := self.find(gid))]
            whole = [g for g in groups if (g.status != "opened" or g.incident_id in made) and g.listed_whole
                     and set(g.alerts) <= set(ids)]  # fmt: skip
            return self._open(alerts, whole, title, actor, chosen, made)[0]

        chosen, made = incident_id or new_incident_id(), list[str]()
        return self.memory.unerased.run(opened)

    def _alerts(self, ids: Sequence[str]) -> list[StoredAlert]:
        found = {alert_id: self.memory.alerts.find(alert_id) for alert_id in ids}
        missing = [alert_id for alert_id, stored in found.items() if stored is None]
        if missing:
            raise NotFoundError(
                f"No alert {', '.join(repr(m) for m in missing[:5])} in this organization: `GET /v1/alerts` (or the "
                "console's queue) lists the received alerts.",
                detail={"missing": missing[:20]},
            )
        return [stored for stored in found.values() if stored is not None]

    def _open(
        self, alerts: list[StoredAlert], groups: list[AlertGroup], title: str | None, actor: str,
        incident_id: str | None, made: list[str], *, size: int | None = None,
    ) -> tuple[Incident, bool]:  # fmt: skip
        ordered = sorted(alerts, key=lambda s: (alert_time(s.alert), s.id))
        services = list(dict.fromkeys(s.alert.service for s in ordered if s.alert.service))
        severities = [s.alert.severity for s in ordered if s.alert.severity]
        worst = min(severities, key=lambda sev: sev.tier) if severities else None
        existing = self.documents.get(INCIDENTS, incident_id) if incident_id else None
        # Opened by an attempt whose group write failed, or by a request at the same time, or by this call's attempt
        # before (`made`: an erasure refused its next write; `unerased`): finish it (`_mark_opened`, late alerts)
        if found := existing is not None and (bool(groups) or existing.doc_id in made):
            incident = self.memory.incidents.get(existing.doc_id)
        else:
            incident = self.memory.incidents.open(
                title or title_of(ordered[0].alert.summary, size or len(ordered), services), services=services,
                severity=worst, started_at=alert_time(ordered[0].alert), alerts=[s.id for s in ordered],
                incident_id=incident_id, actor=actor, carried=True,  # the alerts' services: never refused
            )  # fmt: skip
            made.append(incident.id)
        for group in groups:
            marked = rewritten(partial(self._mark_opened, group.id, incident.id, actor))
            late = [a for a in marked.alerts if a not in incident.alerts] if marked.incident_id == incident.id else []
            if late:  # joined the group after it was read here: the incident lists every alert of its group
                services = list(dict.fromkeys([*incident.services, *marked.services]))
                incident = self.memory.incidents.edit(incident.id, alerts=[*incident.alerts, *late],
                                                      services=services, actor=actor, carried=True)  # fmt: skip
        return incident, not found or incident.id in made

    def _mark_opened(self, group_id: str, incident_id: str, actor: str) -> AlertGroup:
        group = self.get(group_id)
        if group.status == "opened" and group.incident_id is not None:
            return group  # a request at the same time opened it first (this incident or another): it stays so
        return self._save(group.model_copy(update={"status": "opened", "incident_id": incident_id}),
                          "alert_group.opened", actor)  # fmt: skip

    def _save(self, group: AlertGroup, event: str, actor: str) -> AlertGroup:
        write = DocumentWrite(ALERT_GROUPS, group.id, group.model_dump(mode="json"), event, ref=group.status,
                              expected_version=group.version)  # fmt: skip
        (doc,) = self.documents.put([write], actor)
        return group.model_copy(update={"version": doc.version})
