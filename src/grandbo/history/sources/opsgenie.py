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

Locations: `data[3]` (`page 2, data[3]` past the first answer, or in a JSON array of answers), `data` for a detail
answer. Reference: https://docs.opsgenie.com/docs/alert-api , /docs/incident-api , /docs/incident-timeline-api .
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grandbo.history.record import HistoricIncident, Refusal
from grandbo.history.sources._fields import WrongType, after, array, details, joined, kind, obj, text, when
from grandbo.history.sources._json_pages import Problem, Record, records

_EXPORT = (
    "export the alerts and incidents as Opsgenie's API answers them (`GET /v2/alerts`, `GET /v1/incidents`: "
    '`{"data": [...]}`, a JSON array of answers, or one answer per line)'
)
_INCIDENT = frozenset({"impactedServices", "extraProperties", "links", "ownerTeam", "statusPageEntry"})
_ALERT = frozenset({"alias", "acknowledged", "report", "integration", "count", "lastOccurredAt", "snoozed", "entity"})


class OpsgenieReader:
    """Reads an Opsgenie alerts or incidents export (the layouts in the module docstring), one record at a time."""

    name = "opsgenie"

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal]:
        """The alerts and incidents in `path`, in order, each a HistoricIncident or a Refusal; `mapping` unused."""
        for found in records(path, ("data",), singles=True):
            yield _problem(found) if isinstance(found, Problem) else _record(found)


READER = OpsgenieReader()


def _problem(problem: Problem) -> Refusal:
    if problem.kind == "empty":
        return Refusal(location=problem.location, reason=f"the file is empty; {_EXPORT}.")
    if problem.kind == "shape":
        return Refusal(
            location=problem.location,
            reason=f'no `"data"` in the file: it is not an Opsgenie alerts or incidents export; {_EXPORT}.',
        )
    return Refusal(
        location=problem.location,
        reason=f"the file is not JSON from here on ({problem.detail}); the rest was not read; {_EXPORT}.",
    )


def _record(record: Record) -> HistoricIncident | Refusal:
    item = record.value
    if not isinstance(item, dict):
        return Refusal(location=record.location, reason=f"the record is {kind(item)}, not an object; {_EXPORT}.")
    noun = "incident" if _INCIDENT & item.keys() and not _ALERT & item.keys() else "alert"
    raw_id = item.get("id")
    if not isinstance(raw_id, str) or not raw_id.strip():
        what = "has no `id`" if raw_id in (None, "") else f"has an `id` that is {kind(raw_id)}, not Opsgenie's text id"
        tiny = item.get("tinyId")
        named = f" #{tiny}" if isinstance(tiny, str | int) and not isinstance(tiny, bool) else ""
        return Refusal(
            location=record.location,
            reason=f"the {noun}{named} {what}; every Opsgenie {noun} has one (a UUID): {_EXPORT}, "
            "without editing the ids.",
        )
    try:
        read = _incident if noun == "incident" else _alert
        return read(item, raw_id.strip(), record.location)
    except WrongType as wrong:
        return Refusal(
            location=record.location,
            reason=f"{noun} {raw_id.strip()}: {wrong}, as Opsgenie's API gives it; fix that field or {_EXPORT}.",
        )


def _alert(item: dict[str, Any], source_id: str, location: str) -> HistoricIncident:
    created = when(item.get("createdAt"))
    report = obj(item, "report")
    closed = after(created, report.get("closeTime"))
    timeline = list(_notes(item))
    if acked := after(created, report.get("ackTime")):
        timeline.append(_at(acked, f"acknowledged by {text(report, 'acknowledgedBy', 'report.') or 'someone'}"))
    if closed:
        timeline.append(_at(closed, f"closed by {text(report, 'closedBy', 'report.') or 'someone'}"))
    alias = text(item, "alias")
    return HistoricIncident(
        source="opsgenie",
        source_id=source_id,
        location=location,
        title=text(item, "message"),
        summary=joined(text(item, "description"), details(obj(item, "details")), _handle("alert", item, alias)),
        started_at=created,
        resolved_at=closed,
        status=text(item, "status"),
        severity=text(item, "priority"),
        labels=_strings(item, "tags"),
        notes=_ordered(timeline),
    )


def _incident(item: dict[str, Any], source_id: str, location: str) -> HistoricIncident:
    notes = _notes(item)
    said = set(notes.values())
    timeline = list(notes)
    ends = []
    for number, entry in enumerate(array(item, "timeline", wrapped=("data", "entries"))):
        if not isinstance(entry, dict):
            raise WrongType(f"`timeline[{number}]` is {kind(entry)}, not an object")
        if entry.get("hidden") is True:
            continue
        at, line, content = _entry(entry)
        if content not in said:  # a note added to an incident also shows in its timeline: keep it once
            timeline.append((at, line))
        if entry.get("type") == "IncidentResolved" and at is not None:
            ends.append(at)
    return HistoricIncident(
        source="opsgenie",
        source_id=source_id,
        location=location,
        url=text(obj(item, "links"), "web", "links.") or None,
        title=text(item, "message"),
        summary=joined(text(item, "description"), details(obj(item, "extraProperties")), _handle("incident", item, "")),
        started_at=when(item.get("createdAt")),
        resolved_at=max(ends) if ends else None,
        status=text(item, "status"),
        severity=text(item, "priority"),
        services=_strings(item, "impactedServices"),
        labels=_strings(item, "tags"),
        notes=_ordered(timeline),
    )


def _handle(noun: str, item: dict[str, Any], alias: str) -> str:
    tiny = item.get("tinyId")
    number = f" #{tiny}" if isinstance(tiny, str | int) and not isinstance(tiny, bool) and str(tiny).strip() else ""
    named = f"Opsgenie {noun}{number}" if number else ""
    return ", ".join(part for part in (named, f"alias: {alias}" if alias else "") if part)


def _strings(item: dict[str, Any], key: str) -> list[str]:
    values = array(item, key)
    for number, value in enumerate(values):
        if not isinstance(value, str):
            raise WrongType(f"`{key}[{number}]` is {kind(value)}, not text")
    return [value.strip() for value in values if value.strip()]


def _notes(item: dict[str, Any]) -> dict[tuple[datetime | None, str], str]:
    """Each note's timeline line (time, text) and what it says."""
    lines = {}
    for number, note in enumerate(array(item, "notes", wrapped=("data",))):
        if not isinstance(note, dict):
            raise WrongType(f"`notes[{number}]` is {kind(note)}, not an object")
        content = text(note, "note", "notes[].")
        if content:
            owner = text(note, "owner", "notes[].")
            lines[_stamped(note.get("createdAt"), f"{owner}: {content}" if owner else content)] = content
    return lines


def _entry(entry: dict[str, Any]) -> tuple[datetime | None, str, str]:
    description = entry.get("description")
    said = ""
    if isinstance(description, dict):
        said = str(description.get("content") or description.get("name") or "").strip()
    elif isinstance(description, str):
        said = description.strip()
    said = said or str(entry.get("type") or "").strip()
    actor = entry.get("actor")
    who = str(actor.get("name") or "").strip() if isinstance(actor, dict) else ""
    at, line = _stamped(entry.get("eventTime"), f"{who}: {said}" if who else said)
    return at, line, said


def _stamped(raw: object, line: str) -> tuple[datetime | None, str]:
    at = raw.strip() if isinstance(raw, str) else ""
    return when(raw), f"{at} {line}" if at else line


def _at(moment: datetime, line: str) -> tuple[datetime | None, str]:
    utc = moment.astimezone(UTC)  # written the way Opsgenie writes its times
    return moment, f"{utc.strftime('%Y-%m-%dT%H:%M:%S')}.{utc.microsecond // 1000:03d}Z {line}"


def _ordered(lines: list[tuple[datetime | None, str]]) -> list[str]:
    order = sorted(range(len(lines)), key=lambda i: (lines[i][0] is None, lines[i][0] or datetime.min, i))
    return [lines[i][1] for i in order]
