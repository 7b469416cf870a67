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

An incident without a text `id` is refused; any other field of the wrong type is read as absent and said in the
incident's `ignored`. Locations name the incident in the file: `incidents[12]`, and `page 2, incidents[3]` when the
file holds several pages (a JSON array of pages, or JSON Lines).
Reference: https://developer.pagerduty.com/api-reference/ (Incidents).
"""

from __future__ import annotations

from datetime import datetime

from grandbo.history.record import HistoricIncident
from grandbo.history.sources._fields import Fields, Unreadable, details, joined, kind, text
from grandbo.history.sources._pages import PagedReader

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


def _incident(item: Fields, location: str) -> HistoricIncident:
    raw_id = item.raw("id")
    if not isinstance(raw_id, str) or not raw_id.strip():
        what = "has no `id`" if raw_id in (None, "") else f"has an `id` that is {kind(raw_id)}, not PagerDuty's text id"
        raise Unreadable(
            f'the incident{_named(item)} {what}; every PagerDuty incident has one (e.g. "PT4KHLK"): '
            f"{_EXPORT}, without editing the ids."
        )
    title = item.text("title") or item.text("summary")
    description = item.text("description")
    urgency, priority = item.text("urgency"), item.obj("priority")
    service = item.obj("service")
    log = item.objects("log_entries", wrapped=("log_entries",))
    return HistoricIncident(
        source="pagerduty",
        source_id=raw_id.strip(),
        location=location,
        url=item.text("html_url") or None,
        title=title,
        summary=joined(description if description != title else "", _details(item, log), _handle(item)),
        started_at=item.when("created_at"),
        resolved_at=_resolved(item, log),
        status=item.text("status"),
        severity=priority.text("summary") or priority.text("name") or urgency,
        services=[name] if (name := service.text("summary") or service.text("id")) else [],
        labels=([f"urgency:{urgency}"] if urgency else [])
        + [f"team:{team}" for each in item.objects("teams") if (team := each.text("summary"))],
        notes=_timeline(item.objects("notes", wrapped=("notes",)), log),
    )


def _named(item: Fields) -> str:
    number, title = item.raw("incident_number"), item.raw("title")
    if isinstance(number, int) and not isinstance(number, bool):
        return f" #{number}"
    return f" {title[:60]!r}" if isinstance(title, str) and title.strip() else ""


def _handle(item: Fields) -> str:
    """How people name the incident: "PagerDuty incident #4182, incident key: checkout-latency/eu-west-1"."""
    number = item.raw("incident_number")
    named = f"PagerDuty incident #{number}" if isinstance(number, int) and not isinstance(number, bool) else ""
    key = item.text("incident_key")
    return ", ".join(part for part in (named, f"incident key: {key}" if key else "") if part)


def _details(item: Fields, log: list[Fields]) -> str:
    if found := details(item.obj("body").raw("details")):
        return found
    triggers = [item.obj("first_trigger_log_entry")] + [e for e in log if e.raw("type") == "trigger_log_entry"]
    for entry in triggers:
        channel = entry.raw("channel")
        if isinstance(channel, dict) and (found := details(channel.get("details"))):
            return found
    return ""


def _resolved(item: Fields, log: list[Fields]) -> datetime | None:
    if at := item.when("resolved_at"):
        return at
    resolves = [at for e in log if e.raw("type") == "resolve_log_entry" and (at := e.when("created_at"))]
    if resolves:
        return max(resolves)
    if item.raw("status") == "resolved":
        return item.when("last_status_change_at")
    return None


def _timeline(notes: list[Fields], log: list[Fields]) -> list[str]:
    lines: list[tuple[datetime | None, str]] = []
    said = set()
    for note in notes:
        content = note.text("content")
        if content:
            said.add(content)
            lines.append(_line(note, _who(note, "user"), content))
    for entry in log:
        verb = _TIMELINE.get(text(entry.raw("type")))
        if verb is None:
            continue
        if verb == "note":
            content = _annotation(entry)
            if not content or content in said:
                continue
            lines.append(_line(entry, _who(entry, "agent"), content))
        else:
            lines.append(_line(entry, "", entry.text("summary") or verb))
    order = sorted(range(len(lines)), key=lambda i: (lines[i][0] is None, lines[i][0] or datetime.min, i))
    return [lines[i][1] for i in order]


def _annotation(entry: Fields) -> str:
    channel = entry.raw("channel")
    if isinstance(channel, dict) and (said := text(channel.get("summary"))):
        return said
    summary = entry.text("summary")
    return "" if summary.lower().startswith("note added") else summary


def _who(entry: Fields, key: str) -> str:
    person = entry.raw(key)
    return text(person.get("summary")) if isinstance(person, dict) else ""


def _line(entry: Fields, who: str, content: str) -> tuple[datetime | None, str]:
    raw = entry.raw("created_at")
    at = raw.strip() if isinstance(raw, str) else ""
    head = " ".join(part for part in (at, f"{who}:" if who else "") if part)
    return entry.when("created_at"), f"{head} {content}" if head else content


READER = PagedReader("pagerduty", "incidents", _EXPORT, _incident)
