"""Rootly: incidents as its API answers `GET /v1/incidents` (JSON:API), one page, an array of pages, or JSON Lines.

A page is `{"data": [{"id", "type": "incidents", "attributes": {...}}], "links": {...}, "meta": {...}}`. Each
incident keeps its id and URL; its title, summary, status and severity name as written (the severity is a JSON:API
`{"data": {"attributes": {"name"}}}` object, or a plain name in some exports). `started_at` (else `detected_at`),
`resolved_at` (else `closed_at`) and `mitigated_at` give the times and the time to mitigate; a missing one stays
unknown. Services are the services; environments, incident types, functionalities, teams and labels become labels.
The mitigation and resolution messages are remediation findings; a retrospective (post-mortem; its sections under
"Root cause", "Lessons learned"... are findings too), the timeline events and action items, where an export
carries them in the attributes, are the post-mortem, notes and findings.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grandbo.history.record import HistoricFinding, HistoricIncident, Refusal
from grandbo.history.sources._pages import Unreadable, items, name_of, read_each, section_findings, text, unique, when

EXPECTED = (
    'export Rootly\'s `GET /v1/incidents` answers as they come: one page `{"data": [...], "links": {...}, '
    '"meta": {...}}`, a JSON array of pages, or one page per line'
)


class RootlyReader:
    """Reads pages of Rootly's incidents API (JSON:API)."""

    name = "rootly"

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal]:
        """Every incident of every page at `path`, in order; a Refusal for a resource that is not an incident."""
        return read_each(path, "data", EXPECTED, _incident)


def _incident(resource: dict[str, Any], location: str) -> HistoricIncident:
    kind = text(resource.get("type"))
    if kind and kind != "incidents":
        raise Unreadable(f"a resource of type {kind!r}, not an incident: export `GET /v1/incidents`, not another list")
    source_id = text(resource.get("id"))
    attributes = resource.get("attributes")
    if not source_id or not isinstance(attributes, dict):
        raise Unreadable("an incident without `id` or `attributes`: export the API's answer as it comes")
    if (sort := text(attributes.get("kind"))).startswith(("test", "example")):
        raise Unreadable(f"a {sort} incident (`kind` is {sort!r}), not a real one: left out on purpose")
    if duplicate := text(attributes.get("duplicate_incident_id")):
        raise Unreadable(f"a duplicate of incident {duplicate}, which holds its history: left out on purpose")
    started = when(attributes.get("started_at")) or when(attributes.get("detected_at"))
    mitigated = when(attributes.get("mitigated_at"))
    findings = [
        HistoricFinding(kind="remediation", text=message)
        for message in unique([text(attributes.get("mitigation_message")), text(attributes.get("resolution_message"))])
    ]
    findings += _action_items(attributes.get("action_items"))
    notes = _events(attributes.get("events", attributes.get("timeline")))
    if cancelled := text(attributes.get("cancellation_message")):
        notes.append(f"Cancelled: {cancelled}")
    postmortem, postmortem_url = _retrospective(attributes.get("retrospective", attributes.get("post_mortem")))
    findings += section_findings(postmortem)
    if postmortem_url:
        notes.append(f"Retrospective: {postmortem_url}")
    labels = [
        _name(each)
        for key in ("environments", "incident_types", "functionalities", "groups")
        for each in items(attributes.get(key))
    ]
    return HistoricIncident(
        source="rootly",
        source_id=source_id,
        location=location,
        url=text(attributes.get("url")) or text(attributes.get("short_url")) or None,
        title=text(attributes.get("title")),
        summary=text(attributes.get("summary")),
        postmortem=postmortem,
        started_at=started,
        resolved_at=when(attributes.get("resolved_at")) or when(attributes.get("closed_at")),
        status=text(attributes.get("status")),
        severity=_name(attributes.get("severity")),
        services=unique([_name(each) for each in items(attributes.get("services"))]),
        labels=unique(labels + _labels(attributes.get("labels"))),
        findings=findings,
        notes=notes,
        time_to_mitigate_s=(mitigated - started).total_seconds() if mitigated and started else None,
    )


def _name(value: Any) -> str:
    """A related resource's name: `{"data": {"attributes": {"name"}}}`, `{"name"}`, or a plain string."""
    if isinstance(value, dict) and isinstance(value.get("data"), dict):
        value = value["data"]
    if isinstance(value, dict) and isinstance(value.get("attributes"), dict):
        value = value["attributes"]
    return name_of(value, "name", "title", "slug")


def _labels(labels: Any) -> list[str]:
    """Rootly's labels are key/value pairs (`{"platform": "osx"}`), kept as `platform:osx`; a list as it is."""
    if isinstance(labels, dict):
        return [f"{key}:{text(value)}" if text(value) else key for key, value in labels.items()]
    return [name_of(label, "name", "value") for label in items(labels)]


def _retrospective(value: Any) -> tuple[str, str]:
    """(Markdown, URL) of a retrospective an export put in the attributes: a string, or an object with content."""
    if isinstance(value, dict) and isinstance(value.get("data"), dict):
        value = value["data"]
    if isinstance(value, dict) and isinstance(value.get("attributes"), dict):
        value = value["attributes"]
    if isinstance(value, dict):
        body = name_of(value, "content", "body", "text", "markdown")
        return body, text(value.get("url"))
    return text(value), ""


def _events(events: Any) -> list[str]:
    """Timeline events (`/v1/incidents/{id}/events` shape) as `OCCURRED: EVENT`, in time order."""
    found = []
    for each in items(events.get("data") if isinstance(events, dict) else events):  # the list, or the answer
        entry = _attributes(each)
        if event := text(entry.get("event")):
            stamp = text(entry.get("occurred_at")) or text(entry.get("created_at"))
            found.append((when(stamp), f"{stamp}: {event}" if stamp else event))
    found.sort(key=lambda f: (f[0] is None, f[0].timestamp() if f[0] else 0.0))
    return [note for _, note in found]


def _action_items(action_items: Any) -> list[HistoricFinding]:
    found = []
    for each in items(action_items.get("data") if isinstance(action_items, dict) else action_items):
        entry = _attributes(each)
        summary = text(entry.get("summary"))
        description = text(entry.get("description"))
        if words := ": ".join(part for part in (summary, description) if part):
            found.append(HistoricFinding(kind="action", text=words))
    return found


def _attributes(value: Any) -> dict[str, Any]:
    """A JSON:API resource's attributes, or the object itself when an export flattened it."""
    if isinstance(value, dict) and isinstance(value.get("attributes"), dict):
        return value["attributes"]  # type: ignore[no-any-return]
    return value if isinstance(value, dict) else {}


READER = RootlyReader()
