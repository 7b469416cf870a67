"""Rootly: incidents as its API answers `GET /v1/incidents` (JSON:API), one page, an array of pages, or JSON Lines.

A page is `{"data": [{"id", "type": "incidents", "attributes": {...}}], "links": {...}, "meta": {...}}`. Each
incident keeps its id and URL; its title, summary, status and severity name as written (the severity is a JSON:API
`{"data": {"attributes": {"name"}}}` object, or a plain name in some exports). `started_at` (else `detected_at`),
`resolved_at` (else `closed_at`) and `mitigated_at` give the times and the time to mitigate; a missing one stays
unknown. Services are the services; environments, incident types, functionalities, teams and labels become labels.
The mitigation and resolution messages are remediation findings; a retrospective (post-mortem; its sections under
"Root cause", "Lessons learned"... are findings too), the timeline events and action items, where an export
carries them in the attributes, are the post-mortem, notes and findings. Test and example incidents, duplicates
and resources that are not incidents are skipped (counted apart, not errors); one without an id or attributes is
refused; any other field of the wrong type is read as absent and said in the incident's `ignored`.
"""

from __future__ import annotations

from typing import Any

from grandbo.history.record import HistoricFinding, HistoricIncident
from grandbo.history.sources._fields import Fields, Skip, Unreadable, section_findings, text, unique, when
from grandbo.history.sources._pages import PagedReader

EXPECTED = (
    'export Rootly\'s `GET /v1/incidents` answers as they come: one page `{"data": [...], "links": {...}, '
    '"meta": {...}}`, a JSON array of pages, or one page per line'
)


def _incident(resource: Fields, location: str) -> HistoricIncident:
    kind = text(resource.raw("type"))
    if kind and kind != "incidents":
        raise Skip(f"a resource of type {kind!r}, not an incident: export `GET /v1/incidents`, not another list")
    source_id = text(resource.raw("id"))
    if not source_id or not isinstance(resource.raw("attributes"), dict):
        raise Unreadable("an incident without `id` or `attributes`: export the API's answer as it comes")
    attributes = resource.obj("attributes")
    if (sort := attributes.text("kind")).startswith(("test", "example")):
        raise Skip(f"a {sort} incident (`kind` is {sort!r}), not a real one: left out on purpose")
    if duplicate := attributes.text("duplicate_incident_id"):
        raise Skip(f"a duplicate of incident {duplicate}, which holds its history: left out on purpose")
    started = attributes.when("started_at") or attributes.when("detected_at")
    mitigated = attributes.when("mitigated_at")
    messages = [attributes.text("mitigation_message"), attributes.text("resolution_message")]
    findings = [HistoricFinding(kind="remediation", text=message) for message in unique(messages)]
    findings += _action_items(attributes)
    notes = _events(attributes)
    if cancelled := attributes.text("cancellation_message"):
        notes.append(f"Cancelled: {cancelled}")
    postmortem, postmortem_url = _retrospective(attributes)
    findings += section_findings(postmortem)
    if postmortem_url:
        notes.append(f"Retrospective: {postmortem_url}")
    labels = [
        name
        for key in ("environments", "incident_types", "functionalities", "groups")
        for name in _names(attributes, key)
    ]
    return HistoricIncident(
        source="rootly",
        source_id=source_id,
        location=location,
        url=attributes.text("url") or attributes.text("short_url") or None,
        title=attributes.text("title"),
        summary=attributes.text("summary"),
        postmortem=postmortem,
        started_at=started,
        resolved_at=attributes.when("resolved_at") or attributes.when("closed_at"),
        status=attributes.text("status"),
        severity=_name(attributes, "severity"),
        services=unique(_names(attributes, "services")),
        labels=unique(labels + _labels(attributes)),
        findings=findings,
        notes=notes,
        time_to_mitigate_s=(mitigated - started).total_seconds() if mitigated and started else None,
    )


def _name(record: Fields, key: str, value: Any = None) -> str:
    """A related resource's name (`{"data": {"attributes": {"name"}}}`, `{"name"}`) or a plain string, at `key`
    (or `value`, an element of a list named `key[n]`)."""
    value = record.raw(key) if value is None else value
    inner = _attributes(value)
    if inner is None:
        if value is not None and not text(value):
            record.wrong(key, value, "a name or an object")
        return text(value)
    named = Fields(inner, f"{record.where}{key}.", record.ignored)
    return next((found for each in ("name", "title", "slug") if (found := named.text(each))), "")


def _names(record: Fields, key: str) -> list[str]:
    return [_name(record, f"{key}[{n}]", value) for n, value in enumerate(record.array(key)) if value is not None]


def _attributes(value: Any) -> dict[str, Any] | None:
    """A JSON:API resource's attributes (`{"data": {"attributes": {...}}}`), or the object itself when an export
    flattened it; None when it is no object."""
    if isinstance(value, dict) and isinstance(value.get("data"), dict):
        value = value["data"]
    if isinstance(value, dict) and isinstance(value.get("attributes"), dict):
        value = value["attributes"]
    return value if isinstance(value, dict) else None


def _labels(attributes: Fields) -> list[str]:
    """Rootly's labels are key/value pairs (`{"platform": "osx"}`), kept as `platform:osx`; a list as it is."""
    labels = attributes.raw("labels")
    if isinstance(labels, dict):
        return [f"{key}:{text(value)}" if text(value) else key for key, value in labels.items()]
    found = []
    for number, label in enumerate(attributes.array("labels")):
        if isinstance(label, dict):
            found.append(text(label.get("name")) or text(label.get("value")))
        elif isinstance(label, str):
            found.append(label.strip())
        else:
            attributes.wrong(f"labels[{number}]", label, "a string or an object")
    return found


def _retrospective(attributes: Fields) -> tuple[str, str]:
    """(Markdown, URL) of a retrospective an export put in the attributes: a string, or an object with content."""
    key = "retrospective" if attributes.raw("retrospective") is not None else "post_mortem"
    value = attributes.raw(key)
    if (inner := _attributes(value)) is None:
        if value is not None and not isinstance(value, str):
            attributes.wrong(key, value, "a string or an object")
        return text(value), ""
    retrospective = Fields(inner, f"{attributes.where}{key}.", attributes.ignored)
    body = next((found for each in ("content", "body", "text", "markdown") if (found := retrospective.text(each))), "")
    return body, retrospective.text("url")


def _listed(attributes: Fields, key: str) -> list[Fields]:
    """The resources (their attributes) of a list an export put in the attributes: the list or the API's answer."""
    found = []
    for number, value in enumerate(attributes.array(key, wrapped=("data",))):
        if (inner := _attributes(value)) is None:
            attributes.wrong(f"{key}[{number}]", value, "an object")
        else:
            found.append(Fields(inner, f"{attributes.where}{key}[{number}].", attributes.ignored))
    return found


def _events(attributes: Fields) -> list[str]:
    """Timeline events (`/v1/incidents/{id}/events` shape) as `OCCURRED: EVENT`, in time order."""
    key = "events" if attributes.raw("events") is not None else "timeline"
    found = []
    for entry in _listed(attributes, key):
        if event := entry.text("event"):
            stamp = entry.text("occurred_at") or entry.text("created_at")
            found.append((when(stamp), f"{stamp}: {event}" if stamp else event))
    found.sort(key=lambda f: (f[0] is None, f[0].timestamp() if f[0] else 0.0))
    return [note for _, note in found]


def _action_items(attributes: Fields) -> list[HistoricFinding]:
    found = []
    for entry in _listed(attributes, "action_items"):
        summary, description = entry.text("summary"), entry.text("description")
        if words := ": ".join(part for part in (summary, description) if part):
            found.append(HistoricFinding(kind="action", text=words))
    return found


READER = PagedReader("rootly", "data", EXPECTED, _incident)
