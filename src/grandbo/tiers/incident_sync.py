"""What an incident's sync writes: one entry per corroborated finding, the post-mortem and the close's result in
the ledger, each under an id that derives from the incident (`<incident>-<finding>`, then `-2`, `-3`... after a
retirement; `<incident>-postmortem`; `ledger.incident_outcome_id`). The workflow that runs it is `Incidents.sync`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grandbo.errors import EntryStateError, InvalidInputError
from grandbo.model import Entry, Kind, Source, Status
from grandbo.ports import OrgDocuments
from grandbo.tiers.effectiveness import OutcomeKind
from grandbo.tiers.incident_model import ClosedOutcome, Finding, Incident, SyncReport
from grandbo.tiers.ledger import incident_outcome_id
from grandbo.tiers.operations import OUTCOMES

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory


def finding_entry(incident: Incident, finding: Finding) -> dict[str, Any]:
    """The memory a corroborated finding becomes: mechanism, component, symptoms, cause, remedy, runbook."""
    lines = [
        f"Mechanism: {finding.mechanism}" if finding.mechanism else "",
        f"Component: {finding.component}" if finding.component else "",
        f"Symptoms: {finding.symptom or '; '.join(incident.symptoms)}" if finding.symptom or incident.symptoms else "",
        f"Root cause: {finding.root_cause}" if finding.root_cause else "",
        f"Remediation: {finding.remediation}" if finding.remediation else "",
        f"Runbook: {finding.runbook_id}" if finding.runbook_id else "",
    ]
    runbook = finding.runbook_id or incident.runbook_used
    return {
        "title": f"{incident.title}: {finding.summary}"[:500],
        "body": "\n".join(line for line in lines if line),
        "kind": Kind.FINDING,
        "source": Source.INCIDENT,
        "services": list(dict.fromkeys([*incident.services, *finding.services])),
        "severity": incident.severity,
        "occurred_at": incident.started_at,
        "tags": [incident.id, *incident.alerts, *([runbook] if runbook else [])],
        "meta": {"incident_id": incident.id, "finding_id": finding.id, **({"runbook_id": runbook} if runbook else {})},
    }


class MemorySync:
    """Memory and the ledger brought to what one incident of the organization says, a part at a time."""

    def __init__(self, memory: OrgMemory, documents: OrgDocuments) -> None:
        self.memory = memory
        self.documents = documents

    def finding(self, incident: Incident, finding: Finding, mapped: str | None, report: SyncReport, actor: str) -> str:
        """The id of the one active entry of a corroborated finding, written or corrected as needed."""
        wanted = finding_entry(incident, finding)
        for attempt in range(2):  # a concurrent sync that got there first is followed, not duplicated
            current = self.current(mapped) if mapped else None
            free = None
            if current is None:
                current, free = self._default_entry(incident.id, finding.id)
            if current is None and free is None:  # an admin purged this finding's memory: it stays out
                report.purged.append(finding.id)
                return mapped or f"{incident.id}-{finding.id}"
            if current is not None and "history" in current.meta:  # imported: it keeps where it came from
                wanted = {**wanted, "meta": {**wanted["meta"], "history": current.meta["history"]}}
            try:
                if current is None:
                    fresh = {k: v for k, v in wanted.items() if v is not None}
                    entry = self.memory.remember({**fresh, "id": free}, actor=actor)
                    report.written.append(entry.id)
                    return entry.id
                if _differs(current, wanted):
                    changes = {k: v for k, v in wanted.items() if k not in ("kind", "source")}
                    entry = self.memory.correct(current.id, changes, reason=f"incident {incident.id} edited",
                                                actor=actor)  # fmt: skip
                    report.corrected.append(entry.id)
                    return entry.id
                report.unchanged.append(current.id)
                return current.id
            except EntryStateError:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def postmortem(self, incident: Incident, text: str, actor: str) -> None:
        entry_id = f"{incident.id}-postmortem"
        current = self.current(entry_id)
        if current is not None and current.body == text.strip():
            return
        title = f"Post-mortem {incident.id}: {incident.title}"[:500]
        if current is not None:
            self.memory.correct(current.id, {"body": text}, reason=f"post-mortem of {incident.id} revised",
                                actor=actor)  # fmt: skip
        elif self.memory.find(entry_id) is None:
            self.memory.runbooks.postmortem(
                incident.id, title, text, services=incident.services,
                severity=incident.severity.value if incident.severity else None, actor=actor, entry_id=entry_id,
            )  # fmt: skip

    def outcome(self, incident: Incident, actor: str) -> ClosedOutcome | None:
        """The ledger as the close says, and what the close has recorded in it now: the outcome it asks for, and
        the one an earlier close recorded for another runbook taken back, where the ledger still holds it as that
        close wrote it (an agent's or the console's own report of the same result stays)."""
        recorded, marker = incident.closed_outcome, f"close of incident {incident.id}"
        if recorded is not None and recorded.runbook_id != incident.runbook_used:
            self.memory.ledger.withdraw(recorded.runbook_id, marker, actor=actor)
            recorded = None
        if incident.pending_outcome is not None and incident.runbook_used:
            self.memory.ledger.record(
                incident.runbook_used, OutcomeKind.SUCCEEDED if incident.pending_outcome else OutcomeKind.FAILED,
                incident_id=incident.id, service=incident.services[0] if incident.services else None,
                time_to_mitigate_s=incident.time_to_mitigate_s, comment=marker, actor=actor,
                outcome_id=self._outcome_id(incident),
                cited=True,  # the incident names the runbook it used, whatever the org holds
            )  # fmt: skip
            recorded = ClosedOutcome(runbook_id=incident.runbook_used, succeeded=incident.pending_outcome)
        return recorded

    def _outcome_id(self, incident: Incident) -> str:
        """The close's outcome under the id any report of the same (incident, runbook) result shares; an outcome
        an earlier version wrote under `<incident>-outcome` for that runbook is kept and not counted again."""
        legacy = f"{incident.id}-outcome"
        known = self.documents.get(OUTCOMES, legacy)
        if known is not None and known.data.get("runbook_id") == incident.runbook_used:
            return legacy
        return incident_outcome_id(incident.id, incident.runbook_used or "", OutcomeKind.SUCCEEDED)

    def _default_entry(self, incident_id: str, finding_id: str) -> tuple[Entry | None, str | None]:
        """The active entry under the finding's own ids (`<incident>-<finding>`, then `-2`, `-3`... after a
        retirement), following corrections; else None and the first id still free; (None, None) if one was purged."""
        for number in range(1, 1000):
            entry_id = f"{incident_id}-{finding_id}" + (f"-{number}" if number > 1 else "")
            found = self.memory.find(entry_id)
            if found is None:
                return None, entry_id
            current = self.current(entry_id)
            if current is not None:
                return current, entry_id
            if self.memory.was_purged(entry_id):
                return None, None
        raise InvalidInputError(f"Finding {finding_id} of {incident_id} was retired too often.", detail={})

    def current(self, entry_id: str | None) -> Entry | None:
        """The active entry `entry_id` is or was corrected into (through its successors), or None."""
        seen: set[str] = set()
        while entry_id is not None and entry_id not in seen:
            seen.add(entry_id)
            entry = self.memory.find(entry_id)
            if entry is None or entry.status is Status.RETIRED:
                return None
            if entry.status is Status.ACTIVE:
                return entry
            entry_id = entry.superseded_by
        return None


def _differs(entry: Entry, wanted: dict[str, Any]) -> bool:
    severity = wanted["severity"].value if wanted["severity"] else None
    return (
        entry.title != wanted["title"]
        or entry.body != wanted["body"]
        or entry.services != wanted["services"]
        or (entry.severity.value if entry.severity else None) != severity
        or entry.tags != list(dict.fromkeys(wanted["tags"]))
        or entry.meta != wanted["meta"]
        or entry.occurred_at != wanted["occurred_at"]
    )
