"""What an incident's sync writes, and how it finds it again: one entry per corroborated finding, the post-mortem and
the close's result in the ledger, each under an id that derives from the incident (`<incident>-<finding>`, then
`-2`, `-3`... after a retirement; `<incident>-postmortem`; `ledger.incident_outcome_id`). A pass of the sync finds
through those ids what any earlier pass wrote, whether or not the incident's document records it (that pass may
have seen the incident move and run again, or died before saving): it adopts it, corrects it or takes it back,
never writes a second copy nor leaves one behind. The workflow that runs the passes is `Incidents.sync`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from grandbo.errors import EntryStateError, InvalidInputError
from grandbo.model import Entry, EventType, Kind, Source, Status
from grandbo.ports import OrgDocuments
from grandbo.tiers.effectiveness import OutcomeKind
from grandbo.tiers.incident_model import ClosedOutcome, Finding, Incident, SyncReport
from grandbo.tiers.ledger import incident_outcome_id
from grandbo.tiers.operations import OUTCOMES

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

DONE = ("written", "corrected", "retired", "purged")  # a SyncReport's lists of what a pass did


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


def merged(earlier: SyncReport, later: SyncReport) -> SyncReport:
    """The report of a sync whose pass ran again: what either pass did; unchanged, what neither did anything to."""
    done = {field: list(dict.fromkeys([*getattr(earlier, field), *getattr(later, field)])) for field in DONE}
    did = {entry_id for ids in done.values() for entry_id in ids}
    return SyncReport(**done, unchanged=[entry_id for entry_id in later.unchanged if entry_id not in did])


class MemorySync:
    """Memory and the ledger brought to what one incident of the organization says, a part at a time."""

    def __init__(self, memory: OrgMemory, documents: OrgDocuments) -> None:
        self.memory = memory
        self.documents = documents

    def finding(
        self, incident: Incident, finding: Finding, mapped: str | None, report: SyncReport, actor: str, reason: str = ""
    ) -> str:
        """The id of the one active entry of a corroborated finding, written or corrected as needed (a correction's
        reason: `reason`, else that the incident was edited)."""
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
                    entry = self.memory.remember({**fresh, "id": free}, actor=actor, carried=True)
                    report.written.append(entry.id)
                    return entry.id
                if _differs(current, wanted):
                    changes = {k: v for k, v in wanted.items() if k not in ("kind", "source")}
                    entry = self.memory.correct(current.id, changes, reason=reason or f"incident {incident.id} edited",
                                                actor=actor, carried=True)  # fmt: skip
                    report.corrected.append(entry.id)
                    return entry.id
                report.unchanged.append(current.id)
                return current.id
            except EntryStateError:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def retire(
        self, incident: Incident, finding_ids: Sequence[str], mapping: dict[str, str], report: SyncReport, actor: str
    ) -> None:
        """Retire the active entry of each of these findings (no longer corroborated, or of an incident no longer
        closed) and take it out of `mapping`: the entry the incident maps it to, and the one under the finding's
        own ids, which a pass wrote that did not save its mapping (probe 21, F5: it stayed active, unlinked, and
        recall served a cause the team took back). One read for all of them, then only those that have one."""
        present = self.memory.get_many([f"{incident.id}-{finding_id}" for finding_id in finding_ids])
        for finding_id in finding_ids:
            mapped = mapping.pop(finding_id, None)
            found = [self.current(mapped)] if mapped else []
            if f"{incident.id}-{finding_id}" in present:
                found.append(self._default_entry(incident.id, finding_id)[0])
            for current in {entry.id: entry for entry in found if entry is not None}.values():
                try:
                    self.memory.retire(current.id, reason=f"finding {finding_id} of {incident.id} no longer "
                                       "corroborated", actor=actor)  # fmt: skip
                except EntryStateError:  # another sync retired it first: done (one corrected meanwhile is not)
                    if self.current(current.id) is None:
                        continue
                    raise
                report.retired.append(current.id)

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

    def outcome(self, incident: Incident, again: bool, actor: str) -> tuple[ClosedOutcome | None, bool]:
        """The ledger as the incident's close says, and whether this wrote to it. The close's result: the one it
        asks for (recorded), else the one recorded before for the runbook it names (recorded once more when
        `again`: a pass that wrote to the ledger saw the incident move before it saved, and may have written its
        stale result over it or taken it back). Every other result the ledger holds as a close of the incident
        wrote it, for any runbook, is taken back, whichever close recorded it: one result per incident, its
        latest close's (probe 21, F1). A report of the same result by an agent or the console stays."""
        marker, asked, kept = f"close of incident {incident.id}", incident.pending_outcome, incident.closed_outcome
        result = kept if kept is not None and kept.runbook_id == incident.runbook_used else None
        if asked is not None and incident.runbook_used:
            result = ClosedOutcome(runbook_id=incident.runbook_used, succeeded=asked)
        held = self.memory.ledger.results_of(incident.id, marker, also=[f"{incident.id}-outcome"])
        others = sorted({o.runbook_id for o in held.values()} - {result.runbook_id if result else ""})
        for runbook_id in others:
            self.memory.ledger.withdraw(runbook_id, marker, actor=actor)
        if result is not None and (asked is not None or again):
            self.memory.ledger.record(
                result.runbook_id, OutcomeKind.SUCCEEDED if result.succeeded else OutcomeKind.FAILED,
                incident_id=incident.id, service=incident.services[0] if incident.services else None,
                time_to_mitigate_s=incident.time_to_mitigate_s, comment=marker, actor=actor,
                outcome_id=self._outcome_id(incident),
                cited=True,  # the incident names the runbook it used, whatever the org holds
            )  # fmt: skip
            return result, True
        return result, bool(others)

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
            if was_purged(self.memory, entry_id):
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


def was_purged(memory: OrgMemory, entry_id: str) -> bool:
    """Whether the entry, or one it was corrected into, was purged (its text must not be written again)."""
    seen: set[str] = set()
    while entry_id not in seen:
        seen.add(entry_id)
        if any(event.type is EventType.PURGED for event in memory.history(entry_id)):
            return True
        entry = memory.find(entry_id)
        if entry is None or entry.superseded_by is None:
            return False
        entry_id = entry.superseded_by
    return False


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
