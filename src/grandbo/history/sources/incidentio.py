"""incident.io: incidents as `GET /v2/incidents` answers, one page, a JSON array of pages, or one page per line.

A page is `{"incidents": [...], "pagination_meta": {"after", "page_size", "total_record_count"}}`. Each incident
keeps its id as the source id and its permalink; its name, summary and severity name as written, its status's name
while live and its category ("closed", "learning") once over. The times come from the incident's timestamps
(`incident_timestamp_values`: "Impact started", "Reported at", "Resolved at", ...), `created_at` when none says
when it started; a time the incident does not have stays unknown. Custom fields are read by their names: one
about services gives the services, one about the root cause, the trigger, contributing factors, the fix or the
lessons gives a finding, the others become labels (choices) or notes (text). The reference (INC-123), role
assignments and, where an export carries them (`incident_updates` or `updates` beside the incident's fields, in
`GET /v2/incident_updates` shape), the updates are the notes. Test and tutorial incidents, declined and merged
ones are skipped (counted apart, not errors); one without an id is refused; any other field of the wrong type is
read as absent and said in the incident's `ignored`.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal

from grandbo.history.record import HistoricFinding, HistoricIncident
from grandbo.history.sources._fields import Fields, Skip, Unreadable, finding_kind, text, unique
from grandbo.history.sources._pages import PagedReader

EXPECTED = (
    'export incident.io\'s `GET /v2/incidents` answers as they come: one page `{"incidents": [...], '
    '"pagination_meta": {...}}`, a JSON array of pages, or one page per line'
)

_OVER = ("closed", "learning", "post-incident", "canceled")
_SERVICES = re.compile(r"service|system|component", re.I)
_STARTED = [re.compile(p, re.I) for p in (r"impact.?start", r"start", r"detect|report|declar|creat")]
_RESOLVED = [re.compile(p, re.I) for p in (r"resolv", r"closed")]
_MITIGATED = re.compile(r"mitigat|fixed|stabili[sz]", re.I)


def _incident(incident: Fields, location: str) -> HistoricIncident:
    source_id = text(incident.raw("id"))
    if not source_id:
        raise Unreadable("an incident without `id`: export the incidents API's answer as it comes")
    mode = incident.text("mode")
    if mode in ("test", "tutorial"):
        raise Skip(f"a {mode} incident (`mode` is {mode!r}), not a real one: left out on purpose")
    status = incident.obj("incident_status")
    category = status.text("category")
    if category in ("declined", "merged"):
        why = "declined in triage, not an incident" if category == "declined" else "the one it was merged into holds it"
        raise Skip(f"a {category} incident (its status's category is {category!r}): {why}")
    stamps = _timestamps(incident)
    started = _first(stamps, _STARTED) or incident.when("created_at")
    mitigated = next((at for name, at in stamps if _MITIGATED.search(name)), None)
    services, labels, notes, findings = _custom_fields(incident)
    if kind := incident.name("incident_type", "name"):
        labels.insert(0, kind)
    reference = [f"Reference: {ref}"] if (ref := incident.text("reference")) else []
    notes = reference + _roles(incident) + notes
    if document := incident.text("postmortem_document_url"):
        notes.append(f"Post-mortem: {document}")
    return HistoricIncident(
        source="incidentio",
        source_id=source_id,
        location=location,
        url=incident.text("permalink") or None,
        title=incident.text("name"),
        summary=incident.text("summary"),
        started_at=started,
        resolved_at=_first(stamps, _RESOLVED),
        status=category if category in _OVER else status.text("name"),  # a team names "Closed" freely
        severity=incident.name("severity", "name"),
        services=unique(services),
        labels=unique(labels),
        findings=findings,
        notes=notes + _updates(incident),
        time_to_mitigate_s=(mitigated - started).total_seconds() if mitigated and started else None,
    )


def _timestamps(incident: Fields) -> list[tuple[str, datetime]]:
    """(name, time) of every timestamp the incident has a value for, in the order of their rank."""
    found = []
    for each in incident.objects("incident_timestamp_values"):
        stamp = each.obj("incident_timestamp")
        value = each.raw("value")
        at = each.obj("value").when("value") if isinstance(value, dict) else each.when("value")
        if at is not None:
            rank = stamp.raw("rank")
            found.append((Decimal(rank) if isinstance(rank, int | Decimal) else Decimal(0), stamp.text("name"), at))
    return [(name, at) for _, name, at in sorted(found, key=lambda f: f[0])]


def _first(stamps: list[tuple[str, datetime]], patterns: list[re.Pattern[str]]) -> datetime | None:
    for pattern in patterns:
        for name, at in stamps:
            if pattern.search(name):
                return at
    return None


def _custom_fields(incident: Fields) -> tuple[list[str], list[str], list[str], list[HistoricFinding]]:
    services: list[str] = []
    labels: list[str] = []
    notes: list[str] = []
    findings: list[HistoricFinding] = []
    for entry in incident.objects("custom_field_entries"):
        field = entry.name("custom_field", "name")
        entries = entry.objects("values")
        values = [v for v in map(_value, entries) if v]
        if not field or not values:
            continue
        kind = finding_kind(field)
        if kind is not None:
            findings.extend(HistoricFinding(kind=kind, text=v) for v in values)
        elif _SERVICES.search(field):
            services.extend(values)
        elif any("value_text" in v.value for v in entries):
            notes.extend(f"{field}: {v}" for v in values)
        else:
            labels.extend(f"{field}: {v}" for v in values)
    return services, labels, notes, findings


def _value(value: Fields) -> str:
    """A custom field value's words: a catalog entry's or an option's name, a text, a link or a number."""
    return (
        value.name("value_catalog_entry", "name")
        or value.name("value_option", "value")
        or value.text("value_text")
        or value.text("value_link")
        or value.text("value_numeric")
        or value.text("value_timestamp")
    )


def _roles(incident: Fields) -> list[str]:
    notes = []
    for each in incident.objects("incident_role_assignments"):
        role = each.name("role", "name")
        who = each.name("assignee", "name", "email")
        if role and who:
            notes.append(f"{role}: {who}")
    return notes


def _updates(incident: Fields) -> list[str]:
    """Each update as `CREATED WHO [STATUS]: MESSAGE`, oldest first (the API lists the newest first).

    Where an export carries them: `incident_updates` or `updates`, the list or the whole `GET /v2/incident_updates`
    answer, pagination and all."""
    key = "incident_updates" if incident.raw("incident_updates") is not None else "updates"
    found = []
    for each in incident.objects(key, wrapped=("incident_updates",)):
        message = each.text("message")
        status = each.name("new_incident_status", "name")
        if not message and not status:
            continue
        updater = each.obj("updater")
        who = updater.name("user", "name", "email") or updater.name("workflow", "name")
        head = " ".join(p for p in (each.text("created_at"), who, f"[{status}]" if status else "") if p)
        found.append((each.when("created_at"), f"{head}: {message}" if message else head))
    found.sort(key=lambda f: (f[0] is None, f[0].timestamp() if f[0] else 0.0))
    return [note for _, note in found]


READER = PagedReader("incidentio", "incidents", EXPECTED, _incident)
