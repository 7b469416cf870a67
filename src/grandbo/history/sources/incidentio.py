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
ones are refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from grandbo.history.record import HistoricFinding, HistoricIncident, Refusal
from grandbo.history.sources._pages import Unreadable, finding_kind, items, name_of, read_each, text, unique, when

EXPECTED = (
    'export incident.io\'s `GET /v2/incidents` answers as they come: one page `{"incidents": [...], '
    '"pagination_meta": {...}}`, a JSON array of pages, or one page per line'
)

_OVER = ("closed", "learning", "post-incident", "canceled")
_SERVICES = re.compile(r"service|system|component", re.I)
_STARTED = [re.compile(p, re.I) for p in (r"impact.?start", r"start", r"detect|report|declar|creat")]
_RESOLVED = [re.compile(p, re.I) for p in (r"resolv", r"closed")]
_MITIGATED = re.compile(r"mitigat|fixed|stabili[sz]", re.I)


class IncidentIoReader:
    """Reads pages of incident.io's incidents API (v2)."""

    name = "incidentio"

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal]:
        """Every incident of every page at `path`, in order; a Refusal for one without an id or a test one."""
        return read_each(path, "incidents", EXPECTED, _incident)


def _incident(incident: dict[str, Any], location: str) -> HistoricIncident:
    source_id = text(incident.get("id"))
    if not source_id:
        raise Unreadable("an incident without `id`: export the incidents API's answer as it comes")
    mode = text(incident.get("mode"))
    if mode in ("test", "tutorial"):
        raise Unreadable(f"a {mode} incident (`mode` is {mode!r}), not a real one: left out on purpose")
    category = name_of(incident.get("incident_status"), "category")
    if category in ("declined", "merged"):
        raise Unreadable(
            f"a {category} incident (its status's category is {category!r}): "
            + (
                "declined in triage, not an incident"
                if category == "declined"
                else "the one it was merged into holds it"
            )
        )
    stamps = _timestamps(incident.get("incident_timestamp_values"))
    started = _first(stamps, _STARTED) or when(incident.get("created_at"))
    mitigated = next((at for name, at in stamps if _MITIGATED.search(name)), None)
    services, labels, notes, findings = _custom_fields(incident.get("custom_field_entries"))
    if kind := name_of(incident.get("incident_type"), "name"):
        labels.insert(0, kind)
    reference = [f"Reference: {ref}"] if (ref := text(incident.get("reference"))) else []
    notes = reference + _roles(incident.get("incident_role_assignments")) + notes
    if document := text(incident.get("postmortem_document_url")):
        notes.append(f"Post-mortem: {document}")
    updates = incident.get("incident_updates", incident.get("updates"))
    return HistoricIncident(
        source="incidentio",
        source_id=source_id,
        location=location,
        url=text(incident.get("permalink")) or None,
        title=text(incident.get("name")),
        summary=text(incident.get("summary")),
        started_at=started,
        resolved_at=_first(stamps, _RESOLVED),
        status=_status(incident.get("incident_status")),
        severity=name_of(incident.get("severity"), "name"),
        services=unique(services),
        labels=unique(labels),
        findings=findings,
        notes=notes + _updates(updates),
        time_to_mitigate_s=(mitigated - started).total_seconds() if mitigated and started else None,
    )


def _status(status: Any) -> str:
    """The status's name while the incident is live; its category once over (a team names "Closed" freely)."""
    category = name_of(status, "category")
    return category if category in _OVER else name_of(status, "name")


def _timestamps(values: Any) -> list[tuple[str, datetime]]:
    """(name, time) of every timestamp the incident has a value for, in the order of their rank."""
    found = []
    for each in items(values):
        if not isinstance(each, dict) or not isinstance(each.get("incident_timestamp"), dict):
            continue
        stamp = each["incident_timestamp"]
        value = each.get("value")
        at = when(value.get("value") if isinstance(value, dict) else value)
        if at is not None:
            rank = stamp.get("rank")
            found.append((Decimal(rank) if isinstance(rank, int | Decimal) else Decimal(0), name_of(stamp, "name"), at))
    return [(name, at) for _, name, at in sorted(found, key=lambda f: f[0])]


def _first(stamps: list[tuple[str, datetime]], patterns: list[re.Pattern[str]]) -> datetime | None:
    for pattern in patterns:
        for name, at in stamps:
            if pattern.search(name):
                return at
    return None


def _custom_fields(entries: Any) -> tuple[list[str], list[str], list[str], list[HistoricFinding]]:
    services: list[str] = []
    labels: list[str] = []
    notes: list[str] = []
    findings: list[HistoricFinding] = []
    for entry in items(entries):
        if not isinstance(entry, dict):
            continue
        field = name_of(entry.get("custom_field"), "name")
        values = [_value(v) for v in items(entry.get("values"))]
        values = [v for v in values if v]
        if not field or not values:
            continue
        kind = finding_kind(field)
        if kind is not None:
            findings.extend(HistoricFinding(kind=kind, text=v) for v in values)
        elif _SERVICES.search(field):
            services.extend(values)
        elif any(isinstance(v, dict) and "value_text" in v for v in items(entry.get("values"))):
            notes.extend(f"{field}: {v}" for v in values)
        else:
            labels.extend(f"{field}: {v}" for v in values)
    return services, labels, notes, findings


def _value(value: Any) -> str:
    """A custom field value's words: a catalog entry's or an option's name, a text, a link or a number."""
    if not isinstance(value, dict):
        return ""
    return (
        name_of(value.get("value_catalog_entry"), "name")
        or name_of(value.get("value_option"), "value")
        or text(value.get("value_text"))
        or text(value.get("value_link"))
        or text(value.get("value_numeric"))
        or text(value.get("value_timestamp"))
    )


def _roles(assignments: Any) -> list[str]:
    notes = []
    for each in items(assignments):
        if isinstance(each, dict):
            role = name_of(each.get("role"), "name")
            who = name_of(each.get("assignee"), "name", "email")
            if role and who:
                notes.append(f"{role}: {who}")
    return notes


def _updates(updates: Any) -> list[str]:
    """Each update as `CREATED WHO [STATUS]: MESSAGE`, oldest first (the API lists the newest first)."""
    found = []
    if isinstance(updates, dict):  # the whole `GET /v2/incident_updates` answer, pagination and all
        updates = updates.get("incident_updates")
    for each in items(updates):
        if not isinstance(each, dict):
            continue
        message = text(each.get("message"))
        status = name_of(each.get("new_incident_status"), "name")
        if not message and not status:
            continue
        updater = each.get("updater")
        updater = updater if isinstance(updater, dict) else {}
        who = name_of(updater.get("user"), "name", "email") or name_of(updater.get("workflow"), "name")
        head = " ".join(p for p in (text(each.get("created_at")), who, f"[{status}]" if status else "") if p)
        found.append((when(each.get("created_at")), f"{head}: {message}" if message else head))
    found.sort(key=lambda f: (f[0] is None, f[0].timestamp() if f[0] else 0.0))
    return [note for _, note in found]


READER = IncidentIoReader()
