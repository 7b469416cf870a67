"""What a re-import writes over an imported incident people may have worked on since: the parts the source changed,
never what people wrote in Grandbo. Pure functions over the incident as stored, the incident the source's record is
filed as now, and the import's provenance (what the last import filed, kept in its import record).

The rule, part by part (`merged`):

- The incident's own fields (title, services, severity, start, symptoms, alerts, status, end, resolution, runbook,
  time to mitigate): the source's value, unless the stored value is no longer the one the last import filed (a
  person edited the incident, closed or re-closed it in Grandbo): theirs stays, whatever the source says now.
- Findings: those the import filed, by their ids (`Provenance.findings`: the source's findings in its order), are
  the source's, updated, filed new or removed as the source's record has them, unless a person changed one since
  (its text or status: it stays as they left it, and so does its memory entry). Every other finding is a person's
  and stays as it is, with its memory entry, in place.
- The workflow's state (the memory each finding became, a close's pending post-mortem and outcome): as stored, with
  the memory of the import's findings as the import filed it.

A finding the source's record has beyond those the import filed before gets the next finding id no finding of the
incident has (`numbered`), nor an entry of anyone but the import (`taken`), so its entry never becomes a person's.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grandbo.tiers.incident_model import Incident, finding_number

OWN = ("title", "services", "severity", "started_at", "symptoms", "alerts", "status", "closed_at", "resolution",
       "runbook_used", "time_to_mitigate_s")  # fmt: skip
_STAMPS = ("added_at", "updated_at")  # a finding's times: saved again unchanged, it is not changed


@dataclass(frozen=True)
class Provenance:
    """What the last import filed of an incident: the incident's ids of the source's findings, in the source's
    order, and a digest of each part as filed (`parts_of`); a part without a digest is the source's."""

    findings: tuple[str, ...] = ()
    parts: Mapping[str, str] = field(default_factory=dict)

    def changed(self, part: str, value: Any) -> bool:
        """Whether `value` (a part as stored now) is not what the import filed: a person changed it since."""
        filed = self.parts.get(part)
        return filed is not None and _digest(value) != filed


def parts_of(incident: Incident) -> dict[str, str]:
    """A digest of each part of `incident` a re-import may update: its own fields by name, each finding as
    `finding:<id>` (without its times)."""
    data = incident.model_dump(mode="json")
    parts = {name: _digest(data[name]) for name in OWN}
    parts |= {f"finding:{finding['id']}": _digest(_finding(finding)) for finding in data["findings"]}
    return parts


def changed_findings(provenance: Provenance, stored: Incident | None) -> set[str]:
    """The import's findings a person changed since it filed them: they stay as the person left them."""
    if stored is None:
        return set()
    imported = set(provenance.findings)
    return {
        finding["id"]
        for finding in stored.model_dump(mode="json")["findings"]
        if finding["id"] in imported and provenance.changed(f"finding:{finding['id']}", _finding(finding))
    }


def numbered(
    roles: Sequence[str], provenance: Provenance, stored: Incident | None, taken: Callable[[str], bool]
) -> dict[str, str]:
    """The incident's finding id of each of the source's findings (`roles`: f1, f2... in the source's order): the
    one the import filed at that place before, else the next `f<n>` that no finding of the incident has, nor had
    for the import, and whose entry id no one but the import took (`taken(finding id)`)."""
    old = list(provenance.findings)
    used = set(old) | ({finding.id for finding in stored.findings} if stored is not None else set())
    number = max((finding_number(finding_id) for finding_id in used), default=0)
    ids: dict[str, str] = {}
    for place, role in enumerate(roles):
        if place < len(old):
            ids[role] = old[place]
            continue
        number += 1
        while f"f{number}" in used or taken(f"f{number}"):
            number += 1
        ids[role] = f"f{number}"
    return ids


@dataclass(frozen=True)
class Merge:
    """The incident to store, and what of people's it kept over the source, as an import report counts it:
    `people_findings_kept` (findings people added, and the import's they changed), `people_changes_kept` (the
    incident's fields they changed, where the source has another value)."""

    incident: Incident
    kept: Counter[str]


def merged(stored: Incident | None, filed: Incident, provenance: Provenance, changed: Iterable[str]) -> Merge:
    """`filed` (the source's record as filed now, its findings numbered) over `stored`, by the module's rule;
    `changed` are the import's findings a person changed (`changed_findings`)."""
    kept: Counter[str] = Counter()
    if stored is None:
        return Merge(filed, kept)
    changed = set(changed)
    data = stored.model_dump(mode="json", exclude={"version"})
    new = filed.model_dump(mode="json", exclude={"version"})
    for name in OWN:
        if provenance.changed(name, data[name]):
            kept["people_changes_kept"] += data[name] != new[name]
        else:
            data[name] = new[name]
    imported = set(provenance.findings)
    fresh = {finding["id"]: finding for finding in new["findings"]}
    findings = []
    for finding in data["findings"]:
        finding_id = finding["id"]
        if finding_id in changed or finding_id not in imported:  # a person's, or changed by one: theirs
            findings.append(finding)
            fresh.pop(finding_id, None)
            kept["people_findings_kept"] += 1
        elif finding_id in fresh:
            findings.append(fresh.pop(finding_id))
    findings += fresh.values()  # the source's new ones, after the rest
    gone = imported - {finding["id"] for finding in findings}
    memory = {key: value for key, value in data["memory"].items() if key not in gone}
    memory |= {key: value for key, value in new["memory"].items() if key not in changed}
    data |= {"findings": findings, "memory": memory}
    return Merge(Incident.model_validate({**data, "version": stored.version}), +kept)


def _finding(finding: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in finding.items() if key not in _STAMPS}


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
