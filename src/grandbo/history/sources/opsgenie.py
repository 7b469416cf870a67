"""Opsgenie: alerts (`GET /v2/alerts`) and incidents (`GET /v1/incidents`) as the API answers them, with notes.

The export layouts read (`grandbo import-from opsgenie FILE`):

- a list answer as it comes: `{"data": [...], "paging": {...}, "took": 0.1, "requestId": "..."}` (the incidents'
  answer also has `totalCount`); a detail answer, `{"data": {...}}` (`GET /v2/alerts/{id}`, `GET /v1/incidents/{id}`);
- several answers: a JSON array of them, or one a line (JSON Lines); alert and incident answers may be mixed;
- per record, where the export carries them, the keys a script adds to each alert or incident object: `notes`, the
  `data` array of `GET /v2/alerts/{id}/notes` (or of the incident's notes), or that whole answer; and, for an
  incident, `timeline`, the `entries` of `GET /v2/incident-timelines/{id}/entries` (or that whole answer).

A record is an incident when it carries an incident's own fields (`impactedServices`, `extraProperties`, `links`,
`ownerTeam`, `statusPageEntry`) and none of an alert's (`alias`, `acknowledged`, `report`, `integration`, `count`,
`lastOccurredAt`, `snoozed`, `entity`); otherwise an alert. What each becomes: `id` the source id, `message` the
title, `description`, the `details` (alerts) or `extraProperties` (incidents) and the tiny id (and alias) the
summary, `priority` ("P1".."P5") the severity, `status` as is, `tags` the labels as written, `impactedServices`
the services (an incident's; Opsgenie names them by id), `links.web` the url (an incident's; alerts have none),
`createdAt` the start. The end: an alert's `createdAt` plus `report.closeTime` (milliseconds); an incident's last
`IncidentResolved` timeline entry; else unknown (`updatedAt` is not an end). Notes, the alert report's
acknowledgement and close, and the visible timeline entries become the timeline, in time order.

A record without a text `id` is refused; any other field of the wrong type is read as absent and said in the
record's `ignored`. Locations: `data[3]` (`page 2, data[3]` when the file holds several answers: a JSON array of
them, or JSON Lines), `data` for a detail answer.
Reference: https://docs.opsgenie.com/docs/alert-api , /docs/incident-api , /docs/incident-timeline-api .
"""

from __future__ import annotations

from datetime import UTC, datetime

from grandbo.history.record import HistoricIncident
from grandbo.history.sources._fields import Fields, Unreadable, after, details, joined, kind, text
from grandbo.history.sources._pages import PagedReader

_EXPORT = (
    "export the alerts and incidents as Opsgenie's API answers them (`GET /v2/alerts`, `GET /v1/incidents`: "
    '`{"data": [...]}`, a JSON array of answers, or one answer per line)'
)
_INCIDENT = frozenset({"impactedServices", "extraProperties", "links", "ownerTeam", "statusPageEntry"})
_ALERT = frozenset({"alias", "acknowledged", "report", "integration", "count", "lastOccurredAt", "snoozed", "entity"})


def _record(item: Fields, location: str) -> HistoricIncident:
    keys = item.value.keys()
    noun = "incident" if _INCIDENT & keys and not _ALERT & keys else "alert"
    raw_id = item.raw("id")
    if not isinstance(raw_id, str) or not raw_id.strip():
        what = "has no `id`" if raw_id in (None, "") else f"has an `id` that is {kind(raw_id)}, not Opsgenie's text id"
        tiny = item.raw("tinyId")
        named = f" #{tiny}" if isinstance(tiny, str | int) and not isinstance(tiny, bool) else ""
        raise Unreadable(
            f"the {noun}{named} {what}; every Opsgenie {noun} has one (a UUID): {_EXPORT}, without editing the ids."
        )
    read = _incident if noun == "incident" else _alert
    return read(item, raw_id.strip(), location)


def _alert(item: Fields, source_id: str, location: str) -> HistoricIncident:
    created = item.when("createdAt")
    report = item.obj("report")
    closed = after(created, report.raw("closeTime"))
    timeline = list(_notes(item))
    if acked := after(created, report.raw("ackTime")):
        timeline.append(_at(acked, f"acknowledged by {report.text('acknowledgedBy') or 'someone'}"))
    if closed:
        timeline.append(_at(closed, f"closed by {report.text('closedBy') or 'someone'}"))
    alias = item.text("alias")
    return HistoricIncident(
        source="opsgenie",
        source_id=source_id,
        location=location,
        title=item.text("message"),
        summary=joined(item.text("description"), details(item.obj("details").value), _handle("alert", item, alias)),
        started_at=created,
        resolved_at=closed,
        status=item.text("status"),
        severity=item.text("priority"),
        labels=item.strings("tags"),
        notes=_ordered(timeline),
    )


def _incident(item: Fields, source_id: str, location: str) -> HistoricIncident:
    notes = _notes(item)
    said = set(notes.values())
    timeline = list(notes)
    ends = []
    for entry in item.objects("timeline", wrapped=("data", "entries")):
        if entry.raw("hidden") is True:
            continue
        at, line, content = _entry(entry)
        if content not in said:  # a note added to an incident also shows in its timeline: keep it once
            timeline.append((at, line))
        if entry.raw("type") == "IncidentResolved" and at is not None:
            ends.append(at)
    extra = details(item.obj("extraProperties").value)
    return HistoricIncident(
        source="opsgenie",
        source_id=source_id,
        location=location,
        url=item.obj("links").text("web") or None,
        title=item.text("message"),
        summary=joined(item.text("description"), extra, _handle("incident", item, "")),
        started_at=item.when("createdAt"),
        resolved_at=max(ends) if ends else None,
        status=item.text("status"),
        severity=item.text("priority"),
        services=item.strings("impactedServices"),
        labels=item.strings("tags"),
        notes=_ordered(timeline),
    )


def _handle(noun: str, item: Fields, alias: str) -> str:
    tiny = item.raw("tinyId")
    number = f" #{tiny}" if isinstance(tiny, str | int) and not isinstance(tiny, bool) and str(tiny).strip() else ""
    named = f"Opsgenie {noun}{number}" if number else ""
    return ", ".join(part for part in (named, f"alias: {alias}" if alias else "") if part)


def _notes(item: Fields) -> dict[tuple[datetime | None, str], str]:
    """Each note's timeline line (time, text) and what it says."""
    lines = {}
    for note in item.objects("notes", wrapped=("data",)):
        if content := note.text("note"):
            owner = note.text("owner")
            lines[_stamped(note, "createdAt", f"{owner}: {content}" if owner else content)] = content
    return lines


def _entry(entry: Fields) -> tuple[datetime | None, str, str]:
    description = entry.raw("description")
    said = ""
    if isinstance(description, dict):
        said = text(description.get("content")) or text(description.get("name"))
    elif isinstance(description, str):
        said = description.strip()
    said = said or text(entry.raw("type"))
    actor = entry.raw("actor")
    who = text(actor.get("name")) if isinstance(actor, dict) else ""
    at, line = _stamped(entry, "eventTime", f"{who}: {said}" if who else said)
    return at, line, said


def _stamped(entry: Fields, key: str, line: str) -> tuple[datetime | None, str]:
    raw = entry.raw(key)
    at = raw.strip() if isinstance(raw, str) else ""
    return entry.when(key), f"{at} {line}" if at else line


def _at(moment: datetime, line: str) -> tuple[datetime | None, str]:
    utc = moment.astimezone(UTC)  # written the way Opsgenie writes its times
    return moment, f"{utc.strftime('%Y-%m-%dT%H:%M:%S')}.{utc.microsecond // 1000:03d}Z {line}"


def _ordered(lines: list[tuple[datetime | None, str]]) -> list[str]:
    order = sorted(range(len(lines)), key=lambda i: (lines[i][0] is None, lines[i][0] or datetime.min, i))
    return [lines[i][1] for i in order]


READER = PagedReader("opsgenie", "data", _EXPORT, _record, singles=True)
