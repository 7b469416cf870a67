"""PagerDuty: incidents as the REST API v2 `GET /incidents` answers them, with their notes and log entries.

The export layouts read (`grandbo import-from pagerduty FILE`):

- one page as the API answers it: `{"incidents": [...], "limit": 100, "offset": 0, "more": false, "total": null}`;
- several pages: a JSON array of pages (`[{"incidents": [...]}, ...]`), or one page per line (JSON Lines);
- per incident, where the export carries them, the keys a script paging the API adds to each incident object:
  `notes`, the array `GET /incidents/{id}/notes` answers (or that whole answer, `{"notes": [...]}`), and
  `log_entries`, the array `GET /incidents/{id}/log_entries` answers (or the whole answer).

What each incident becomes: `id` the source id, `html_url` the url, `title` (or `summary` when it has none),
`description` (when it says more than the title), the body's details (`body.details`, or the first trigger log
entry's `channel.details`), `incident_number` and `incident_key` the summary; `created_at` the start; the end
is `resolved_at`, else the last resolve log entry, else `last_status_change_at` of a resolved incident, else
unknown. `status` as is; the severity is `priority.summary` ("P1") when the account has priorities, else
`urgency` ("high"); `urgency` and the `teams` are also kept as labels (`urgency:high`, `team:Platform`);
`service.summary` is the service. Notes and the trigger, acknowledge, resolve and annotate log entries become
the timeline, in time order (an annotation repeating a note is kept once). The conference bridge, assignments
and the other log entries are left out.

Locations name the incident in the file: `incidents[12]`, and `page 2, incidents[3]` past the first page (or for
every page of a JSON array of pages). Reference: https://developer.pagerduty.com/api-reference/ (Incidents).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from grandbo.history.record import HistoricIncident, Refusal
from grandbo.history.sources._fields import WrongType, array, details, joined, kind, obj, text, when
from grandbo.history.sources._json_pages import Problem, Record, records

_EXPORT = (
    "export the incidents as PagerDuty's REST API `GET /incidents` answers them (a page "
    '`{"incidents": [...]}`, a JSON array of pages, or one page per line)'
)
_TIMELINE = {
    "trigger_log_entry": "triggered",
    "acknowledge_log_entry": "acknowledged",
    "resolve_log_entry": "resolved",
    "annotate_log_entry": "note",
}


class PagerDutyReader:
    """Reads a PagerDuty incidents export (the layouts in the module docstring), one incident at a time."""

    name = "pagerduty"

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal]:
        """The incidents in `path`, in order, each a HistoricIncident or a Refusal; `mapping` is not used."""
        for found in records(path, ("incidents",)):
            if isinstance(found, Problem):
                yield _problem(found)
            else:
                yield _incident(found)


READER = PagerDutyReader()


def _problem(problem: Problem) -> Refusal:
    if problem.kind == "empty":
        return Refusal(location=problem.location, reason=f"the file is empty; {_EXPORT}.")
    if problem.kind == "shape":
        return Refusal(
            location=problem.location,
            reason=f'no `"incidents"` array in the file: it is not a PagerDuty incidents export; {_EXPORT}.',
        )
    return Refusal(
        location=problem.location,
        reason=f"the file is not JSON from here on ({problem.detail}); the rest was not read; {_EXPORT}.",
    )


def _incident(record: Record) -> HistoricIncident | Refusal:
    item = record.value
    if not isinstance(item, dict):
        return Refusal(location=record.location, reason=f"the incident is {kind(item)}, not an object; {_EXPORT}.")
    raw_id = item.get("id")
    if not isinstance(raw_id, str) or not raw_id.strip():
        what = "has no `id`" if raw_id in (None, "") else f"has an `id` that is {kind(raw_id)}, not PagerDuty's text id"
        named = _named(item)
        return Refusal(
            location=record.location,
            reason=f'the incident{named} {what}; every PagerDuty incident has one (e.g. "PT4KHLK"): '
            f"{_EXPORT}, without editing the ids.",
        )
    try:
        return _read(item, raw_id.strip(), record.location)
    except WrongType as wrong:
        return Refusal(
            location=record.location,
            reason=f"incident {raw_id.strip()}: {wrong}, as PagerDuty's API gives it; fix that field or {_EXPORT}.",
        )


def _named(item: dict[str, Any]) -> str:
    number, title = item.get("incident_number"), item.get("title")
    if isinstance(number, int) and not isinstance(number, bool):
        return f" #{number}"
    return f" {title[:60]!r}" if isinstance(title, str) and title.strip() else ""


def _read(item: dict[str, Any], source_id: str, location: str) -> HistoricIncident:
    title = text(item, "title") or text(item, "summary")
    description = text(item, "description")
    urgency, priority = text(item, "urgency"), obj(item, "priority")
    service = obj(item, "service")
    teams = [text(team, "summary", "teams[].") for team in _objects(item, "teams")]
    log = _objects(item, "log_entries", wrapped=("log_entries",))
    created = when(item.get("created_at"))
    return HistoricIncident(
        source="pagerduty",
        source_id=source_id,
        location=location,
        url=text(item, "html_url") or None,
        title=title,
        summary=joined(
            description if description != title else "",
            _details(item, log),
            _handle(item),
        ),
        started_at=created,
        resolved_at=_resolved(item, log),
        status=text(item, "status"),
        severity=text(priority, "summary", "priority.") or text(priority, "name", "priority.") or urgency,
        services=[name] if (name := text(service, "summary", "service.") or text(service, "id", "service.")) else [],
        labels=([f"urgency:{urgency}"] if urgency else []) + [f"team:{team}" for team in teams if team],
        notes=_timeline(_objects(item, "notes", wrapped=("notes",)), log),
    )


def _handle(item: dict[str, Any]) -> str:
    """How people name the incident: "PagerDuty incident #4182, incident key: checkout-latency/eu-west-1"."""
    number = item.get("incident_number")
    named = f"PagerDuty incident #{number}" if isinstance(number, int) and not isinstance(number, bool) else ""
    key = text(item, "incident_key")
    return ", ".join(part for part in (named, f"incident key: {key}" if key else "") if part)


def _objects(item: dict[str, Any], key: str, *, wrapped: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    values = array(item, key, wrapped=wrapped)
    for number, value in enumerate(values):
        if not isinstance(value, dict):
            raise WrongType(f"`{key}[{number}]` is {kind(value)}, not an object")
    return values


def _details(item: dict[str, Any], log: list[dict[str, Any]]) -> str:
    body = obj(item, "body")
    if found := details(body.get("details")):
        return found
    triggers = [obj(item, "first_trigger_log_entry")] + [e for e in log if e.get("type") == "trigger_log_entry"]
    for entry in triggers:
        channel = entry.get("channel")
        if isinstance(channel, dict) and (found := details(channel.get("details"))):
            return found
    return ""


def _resolved(item: dict[str, Any], log: list[dict[str, Any]]) -> datetime | None:
    if at := when(item.get("resolved_at")):
        return at
    resolves = [at for e in log if e.get("type") == "resolve_log_entry" and (at := when(e.get("created_at")))]
    if resolves:
        return max(resolves)
    if item.get("status") == "resolved":
        return when(item.get("last_status_change_at"))
    return None


def _timeline(notes: list[dict[str, Any]], log: list[dict[str, Any]]) -> list[str]:
    lines: list[tuple[datetime | None, str]] = []
    said = set()
    for note in notes:
        content = text(note, "content", "notes[].")
        if content:
            said.add(content)
            lines.append(_line(note, _who(note, "user"), content))
    for entry in log:
        verb = _TIMELINE.get(entry.get("type", ""))
        if verb is None:
            continue
        if verb == "note":
            content = _annotation(entry)
            if not content or content in said:
                continue
            lines.append(_line(entry, _who(entry, "agent"), content))
        else:
            summary = text(entry, "summary", "log_entries[].")
            lines.append(_line(entry, "", summary or verb))
    order = sorted(range(len(lines)), key=lambda i: (lines[i][0] is None, lines[i][0] or datetime.min, i))
    return [lines[i][1] for i in order]


def _annotation(entry: dict[str, Any]) -> str:
    channel = entry.get("channel")
    if isinstance(channel, dict) and isinstance(channel.get("summary"), str) and channel["summary"].strip():
        return str(channel["summary"]).strip()
    summary = text(entry, "summary", "log_entries[].")
    return "" if summary.lower().startswith("note added") else summary


def _who(entry: dict[str, Any], key: str) -> str:
    person = entry.get(key)
    return str(person.get("summary") or "").strip() if isinstance(person, dict) else ""


def _line(entry: dict[str, Any], who: str, content: str) -> tuple[datetime | None, str]:
    raw = entry.get("created_at")
    at = raw.strip() if isinstance(raw, str) else ""
    head = " ".join(part for part in (at, f"{who}:" if who else "") if part)
    return when(raw), f"{head} {content}" if head else content
