"""What one past incident is filed as: its incident document (when its start is known), its memory entries (one per
finding, its post-mortem, or a summary when it has neither) and its runbook's outcome, all under ids derived from
(source, source id), every entry with `meta.history`. Nothing is written here (`history.importer` writes)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from grandbo.errors import InvalidInputError
from grandbo.history import decide
from grandbo.history.record import HistoricFinding, HistoricIncident
from grandbo.model import MAX_BODY_CHARS, Kind, NewEntry, Severity, Source, parse_entry
from grandbo.tiers.incident_model import Incident, finding_number, invalid
from grandbo.values import text_problem

FINDING_FIELD = {"cause": "root_cause", "contributing": "root_cause", "trigger": "mechanism",
                 "remediation": "remediation"}  # fmt: skip
FINDING_WORD = {"cause": "Root cause", "contributing": "Contributing factor", "trigger": "Trigger",
                "remediation": "Remediation", "lesson": "Lesson", "action": "Action item", "note": "Note"}  # fmt: skip


@dataclass
class Filed:
    """One record as the importer files it."""

    incident_id: str
    hash: str
    entries: dict[str, NewEntry]  # by role: f1, f2, ..., postmortem, summary
    incident: Incident | None  # None when its start is unknown
    outcome: dict[str, Any] | None  # the runbook's outcome (ledger), when the source says whether it worked
    decisions: Counter[str] = field(default_factory=Counter)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rsplit(" ", 1)[0] + "..."


def _identifiers(values: list[str], decisions: Counter[str], what: str) -> list[str]:
    out = []
    for value in values:
        token = decide.slug(value)
        if token and not text_problem(token):
            decisions[what] += token != value.strip().lower()
            out.append(token)
    return list(dict.fromkeys(out))


def _fits(body: str, part: str) -> str:
    """`body` when a memory entry can hold it; else an error naming the record's `part` and what to do."""
    if len(body) > MAX_BODY_CHARS:
        raise InvalidInputError(
            f"its {part} holds {len(body):,} characters, over the {MAX_BODY_CHARS:,} a memory entry holds: cut it "
            "(keep what was seen, the cause and what fixed it) and import again",
            detail={"part": part, "chars": len(body), "limit": MAX_BODY_CHARS},
        )
    return body


def _titled(title: str, text: str) -> str:
    """A finding's title: the incident's and the finding's, or the finding alone when it begins with the other."""
    return text if text.strip().startswith(title.rstrip(".").removesuffix("...")) else f"{title}: {text}"


def _runbooks(record: HistoricIncident) -> list[str]:
    return [r.strip() for r in record.runbooks if r.strip() and len(r.strip()) <= 128 and " " not in r.strip()]


def file_record(record: HistoricIncident, canonical: Callable[[str], str | None] | None = None) -> Filed:
    """The incident, entries and outcome `record` is filed as, with every decision taken on the way counted;
    `canonical` names a service as the org's catalog does (`Topology.canonical`: an alias its service's name)."""
    decisions: Counter[str] = Counter()
    decisions["fields_ignored"] += len(record.ignored)  # fields of the wrong type the reader read as absent
    incident_id = decide.incident_id(record.source, record.source_id)
    title = record.title.strip()
    if decide.is_generic(title, record.labels):
        derived = decide.derived_title(record)
        if derived:
            decisions["generic_title"] += 1
            title = derived
        elif not title:
            decisions["untitled"] += 1
            title = f"{record.source} incident {record.source_id}"
    severity = decide.severity(record.severity)
    if record.severity.strip() and severity is None:
        decisions["severity_unknown"] += 1
    closed, inferred = decide.is_closed(record)
    decisions["status_inferred"] += inferred
    if record.started_at is None:
        decisions["unknown_date"] += 1
    decisions["labels_kept"] += bool(record.labels)
    named = [(canonical(service) or service) if canonical else service for service in record.services]
    services = _identifiers(named, decisions, "services_slugged")
    tags = _identifiers(record.labels, Counter(), "")
    runbooks = _runbooks(record)
    history = {
        "source": record.source, "source_id": record.source_id, "url": record.url, "incident_id": incident_id,
        "labels": list(record.labels), "started_at": record.started_at.isoformat() if record.started_at else None,
    }  # fmt: skip
    common: dict[str, Any] = {
        "source": Source.IMPORT, "services": services[:50], "severity": severity, "tags": [incident_id, *tags][:100],
        **({"occurred_at": record.started_at} if record.started_at else {}),
    }  # fmt: skip
    entries: dict[str, NewEntry] = {}
    symptoms = _cut(record.summary, 500)
    for number, finding in enumerate(record.findings, start=1):
        role = f"f{number}"
        body = "\n".join(filter(None, [f"{FINDING_WORD[finding.kind]}: {finding.text.strip()}",
                                       f"Symptoms: {symptoms}" if symptoms else "",
                                       f"Runbook: {runbooks[0]}" if runbooks else ""]))  # fmt: skip
        meta = {"incident_id": incident_id, "finding_id": role, **({"runbook_id": runbooks[0]} if runbooks else {})}
        entries[role] = parse_entry({
            **common, "id": f"{incident_id}-{role}", "title": _cut(_titled(title, finding.text), 500),
            "body": _fits(body, f"{finding.kind} finding"),
            "kind": Kind.FINDING, "meta": {**meta, "history": history},
        })  # fmt: skip
    if record.postmortem.strip():
        entries["postmortem"] = parse_entry({
            **common, "id": f"{incident_id}-postmortem", "title": _cut(f"Post-mortem: {title}", 500),
            "body": _fits(record.postmortem, "post-mortem"), "kind": Kind.POSTMORTEM,
            "meta": {"incident_id": incident_id, "history": history},
        })  # fmt: skip
    elif not record.findings or record.summary.strip() or record.notes:
        body = "\n".join(filter(None, [record.summary.strip(), *(f"- {note.strip()}" for note in record.notes)]))
        entries["summary"] = parse_entry({
            **common, "id": f"{incident_id}-summary", "title": _cut(title, 500), "kind": Kind.NOTE,
            "body": _fits(body, "summary and notes"),
            "meta": {"incident_id": incident_id, "history": history},
        })  # fmt: skip
    incident = None
    if record.started_at is not None:
        data = _incident(record, incident_id, title, services, severity, closed, runbooks, entries)
        try:
            incident = Incident.model_validate(data)
        except ValidationError as error:
            raise invalid("incident", error) from error
    outcome = None
    if runbooks and record.runbook_succeeded is not None:
        decisions["outcomes"] += 1
        outcome = {
            "runbook_id": runbooks[0], "kind": "succeeded" if record.runbook_succeeded else "failed",
            "incident_id": incident_id, "service": services[0] if services else None,
            "time_to_mitigate_s": record.time_to_mitigate_s if (record.time_to_mitigate_s or -1) >= 0 else None,
            "rating": None, "comment": f"imported from {record.source}", "actor": "import",
            "at": (record.resolved_at or record.started_at or None),
        }  # fmt: skip
    return Filed(incident_id, decide.content_hash(record), entries, incident, outcome, decisions)


def finding_roles(filed: Filed) -> list[str]:
    """The roles of the record's findings, in the source's order (f1, f2...: `renumbered` gives them ids)."""
    return [role for role in filed.entries if finding_number(role)]


def renumbered(filed: Filed, ids: Mapping[str, str]) -> Filed:
    """`filed` with each finding's role (f1, f2... in the source's order) as the incident's finding id `ids` gives
    (`tiers.incident_merge.numbered`): its entry's id `<incident>-<id>` and `meta.finding_id`, the incident's
    finding and its `memory` key. A copy: what a plan changes of it (`memory`) is the copy's."""
    entries = {}
    for role, entry in filed.entries.items():
        new = ids.get(role, role)
        if new != role:
            entry = entry.model_copy(
                update={"id": f"{filed.incident_id}-{new}", "meta": {**entry.meta, "finding_id": new}}
            )
        entries[new] = entry
    incident = None
    if filed.incident is not None:
        findings = [finding.model_copy(update={"id": ids.get(finding.id, finding.id)})
                    for finding in filed.incident.findings]  # fmt: skip
        memory = {ids.get(role, role): entries[ids.get(role, role)].id or "" for role in filed.incident.memory}
        incident = filed.incident.model_copy(update={"findings": findings, "memory": memory})
    return replace(filed, entries=entries, incident=incident)


def _finding(number: int, finding: HistoricFinding, runbooks: list[str], at: Any) -> dict[str, Any]:
    extra = {FINDING_FIELD[finding.kind]: finding.text.strip()} if finding.kind in FINDING_FIELD else {}
    return {"id": f"f{number}", "summary": _cut(finding.text, 500), "status": "corroborated", **extra,
            "runbook_id": runbooks[0] if runbooks and finding.kind == "remediation" else None,
            "added_at": at, "updated_at": at}  # fmt: skip


def _incident(
    record: HistoricIncident, incident_id: str, title: str, services: list[str], severity: Severity | None,
    closed: bool, runbooks: list[str], entries: dict[str, NewEntry],
) -> dict[str, Any]:  # fmt: skip
    at = record.resolved_at or record.started_at
    remedies = [f.text.strip() for f in record.findings if f.kind == "remediation"]
    return {
        "id": incident_id, "title": _cut(title, 500), "services": services[:50],
        "severity": severity.value if severity else None, "started_at": record.started_at,
        "symptoms": [_cut(record.summary, 2000)] if record.summary.strip() else [], "alerts": [],
        "status": "closed" if closed else "open",
        "findings": [_finding(n, f, runbooks, at) for n, f in enumerate(record.findings, start=1)],
        "closed_at": record.resolved_at if closed else None,
        "resolution": _cut(" ".join(remedies), 2000), "runbook_used": runbooks[0] if runbooks else None,
        "time_to_mitigate_s": record.time_to_mitigate_s if (record.time_to_mitigate_s or -1) >= 0 else None,
        "memory": {role: entry.id for role, entry in entries.items() if role.startswith("f") and entry.id},
        "memory_sync": "done",
    }  # fmt: skip
