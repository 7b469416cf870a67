"""Episodic memory: incidents, their findings, and what closing one writes to memory.

An incident is working state (a document): open, findings added and argued over (hypothesis,
corroborated, refuted), then closed. Only corroborated findings become memory, one entry each,
written after the close has committed; the write-behind can fail (embedding, storage) without
failing the close: it is recorded with the close and re-driven until done (`grandbo.redrive`), or by `sync`.
Editing or re-closing a closed incident corrects the entries it wrote (supersedes them) and retires those
whose finding is no longer corroborated; it never writes a second copy.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from functools import reduce
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ValidationError

from grandbo.errors import InvalidInputError, NotFoundError
from grandbo.model import ENTRY_ID_PATTERN, Severity, utcnow
from grandbo.names import refuse_added
from grandbo.pages import Mark
from grandbo.ports import DocumentWrite, NewWork, OrgDocuments, Position
from grandbo.redrive import INCIDENT_SYNC
from grandbo.tiers.edited import MAX_EDITED_BYTES, change_of, check_size
from grandbo.tiers.effectiveness import time_to_mitigate
from grandbo.tiers.incident_model import (
    INCIDENTS,
    SUMMARY_KEYS,
    Finding,
    FindingStatus,
    Incident,
    IncidentStatus,
    PastIncident,
    SyncReport,
    asked_outcome,
    finding_number,
    invalid,
    masked,
    past_incident,
)
from grandbo.tiers.incident_sync import MemorySync, merged
from grandbo.tiers.operations import Kept
from grandbo.tiers.records import next_page, read_listed, read_record, read_records, shown_history
from grandbo.tiers.retry import rewritten

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)
TOO_LARGE = "Shorten its findings or symptoms, or open a follow-up incident for what is left."
CLOSE_ROOM = 64 * 1024  # what a close may add past the bound (its resolution, a post-mortem): an incident closes
LARGEST_INCIDENT = MAX_EDITED_BYTES + CLOSE_ROOM  # an incident's JSON at most (a list reads by it: api.paging)


def new_incident_id() -> str:
    """An incident id for one opened without one (`inc-<day>-<6 hex>`)."""
    return f"inc-{utcnow().strftime('%Y%m%d')}-{secrets.token_hex(3)}"


class Incidents:
    """Open, investigate and close incidents of one organization."""

    def __init__(self, memory: OrgMemory, documents: OrgDocuments, kept: Kept) -> None:
        self.memory = memory
        self.documents = documents
        self._kept = kept  # the process's converted copies of the org's collections (`Snapshots.kept`)
        self._sync = MemorySync(memory, documents)

    # ------------------------------------------------------------------ reading

    def get(self, incident_id: str) -> Incident:
        doc = self.documents.get(INCIDENTS, incident_id)
        if doc is None:
            raise NotFoundError(
                f"No incident {incident_id!r} in org {self.memory.org!r}.", detail={"incident_id": incident_id}
            )
        return read_record(Incident, doc, "incident")

    def find(self, status: IncidentStatus | None = None) -> list[Incident]:
        return read_records(Incident, self.documents.find(INCIDENTS, [status.value] if status else None), "incident")

    def summaries(self) -> list[PastIncident]:
        """Every incident of the org as `PastIncident` (its services and times, not its findings), each read once
        per process and again only once written (`Snapshots.kept`): what a triage's plan and the analytics read."""
        return self._kept(INCIDENTS, past_incident, None, SUMMARY_KEYS)

    def page(
        self, limit: int, *, after: Position = None, status: IncidentStatus | None = None
    ) -> tuple[list[tuple[Incident, Mark]], Position]:
        """Up to `limit` incidents (of `status`), the most recently changed first, each with its place (`read_listed`),
        and where the next page starts (None: this was the last). The store reads these incidents only."""
        docs = self.documents.newest(INCIDENTS, limit, before=after, refs=[status.value] if status else None)
        return read_listed(Incident, docs, "incident"), next_page(docs, limit)

    def history(self, incident_id: str) -> list[dict[str, Any]]:
        """Every event of the incident, oldest first, numbered in its own history (`records.shown_history`)."""
        return shown_history(self.documents.history(INCIDENTS, incident_id))

    # ------------------------------------------------------------------ writing

    def open(
        self,
        title: str,
        *,
        services: Sequence[str] = (),
        severity: str | Severity | None = None,
        started_at: datetime | None = None,
        symptoms: Sequence[str] = (),
        alerts: Sequence[str] = (),
        incident_id: str | None = None,
        actor: str = "api",
        carried: bool = False,
    ) -> Incident:
        """Open an incident; a look-alike service name is refused (`names.refuse_added`) unless `carried` (its
        services come from records kept before: a group's alerts)."""
        incident_id = incident_id or new_incident_id()
        if not carried:
            refuse_added(services, (), "services")
        if not ENTRY_ID_PATTERN.fullmatch(incident_id):
            raise InvalidInputError(f"Incident id {incident_id!r} must be one token of letters, digits, . _ : @ -.",
                                    detail={"incident_id": incident_id})  # fmt: skip
        incident = self._valid(
            {"id": incident_id, "title": title, "services": list(services), "severity": severity,
             "started_at": started_at or utcnow(), "symptoms": list(symptoms), "alerts": list(alerts)}
        )  # fmt: skip
        return self._save(incident, "incident.opened", actor, expected=0)

    def add_finding(
        self,
        incident_id: str,
        summary: str,
        *,
        status: FindingStatus | str = FindingStatus.HYPOTHESIS,
        actor: str = "api",
        **fields: Any,
    ) -> Finding:
        """Record a finding (mechanism, component, symptom, root_cause, remediation, runbook_id, services);
        one added meanwhile by another writer is read again and kept (this one takes the next id)."""
        added: list[str] = []

        def change(incident: Incident) -> tuple[Incident, str]:
            now = utcnow()
            # after every f<n> it has: a re-import may have removed one of the source's findings before it
            finding_id = f"f{1 + max((finding_number(f.id) for f in incident.findings), default=0)}"
            try:
                finding = Finding.model_validate(
                    {"id": finding_id, "summary": summary, "status": status, "added_at": now, "updated_at": now,
                     **fields}
                )  # fmt: skip
            except ValidationError as error:
                raise invalid("finding", error) from error
            refuse_added(finding.services, _names(incident), "services")
            incident.findings.append(finding)
            added[:] = [finding_id]
            return incident, f"finding.added.{finding.status.value}"

        saved = self._rewrite(incident_id, change, actor)
        return next(f for f in saved.findings if f.id == added[0])  # as stored: its text masked

    def update_finding(self, incident_id: str, finding_id: str, *, actor: str = "api", **changes: Any) -> Finding:
        """Change a finding (its status included); on a closed incident, memory follows."""

        def change(incident: Incident) -> tuple[Incident, str]:
            position = next((i for i, f in enumerate(incident.findings) if f.id == finding_id), None)
            if position is None:
                raise NotFoundError(f"Incident {incident_id!r} has no finding {finding_id!r}.",
                                    detail={"incident_id": incident_id, "finding_id": finding_id})  # fmt: skip
            current = incident.findings[position].model_dump()
            try:
                updated = Finding.model_validate({**current, **changes, "id": finding_id, "updated_at": utcnow()})
            except ValidationError as error:
                raise invalid("finding", error) from error
            refuse_added(updated.services, _names(incident), "services")
            incident.findings[position] = updated
            return incident, f"finding.updated.{updated.status.value}"

        saved = self._rewrite(incident_id, change, actor)
        return next(f for f in saved.findings if f.id == finding_id)

    def edit(self, incident_id: str, *, actor: str = "api", carried: bool = False, **changes: Any) -> Incident:
        """Change the incident's own fields (title, services, severity, symptoms, alerts, resolution...); a
        look-alike service name it adds is refused unless `carried` (as `open`)."""
        allowed = {"title", "services", "severity", "symptoms", "alerts", "resolution", "started_at"}
        unknown = set(changes) - allowed
        if unknown:
            raise InvalidInputError(f"Cannot edit {sorted(unknown)}; editable: {sorted(allowed)}.",
                                    detail={"fields": sorted(unknown)})  # fmt: skip

        def change(incident: Incident) -> tuple[Incident, str]:
            edited = self._valid({**incident.model_dump(), **changes})
            if not carried:  # what it held carries forward
                refuse_added(edited.services, _names(incident), "services")
            return edited, "incident.edited"

        return self._rewrite(incident_id, change, actor)

    def close(
        self,
        incident_id: str,
        *,
        resolution: str = "",
        runbook_used: str | None = None,
        succeeded: bool | None = None,
        time_to_mitigate_s: float | None = None,
        postmortem: str | None = None,
        actor: str = "api",
    ) -> Incident:
        """Close (or re-close) an incident. The close commits first, with the write-behind it leaves recorded in
        its transaction; then (on a background thread in a long-running process) its corroborated findings are
        written to memory, the runbook's outcome to the ledger and the post-mortem, if given, is retained as
        memory. None of it can fail or hold up the close; what did not happen is re-driven until done
        (`grandbo.redrive`), and `sync` repairs it at once."""
        self.memory.admit("behind")  # no room for its write-behind: refused (429/503) before the close is written

        def attempt() -> Incident:  # again, as read anew, when another write (a sync, a close) landed first
            incident = self.get(incident_id)
            first_close = incident.status is IncidentStatus.OPEN
            incident.status = IncidentStatus.CLOSED
            incident.closed_at = incident.closed_at or utcnow()
            incident.resolution = resolution or incident.resolution
            previous, incident.runbook_used = incident.runbook_used, runbook_used or incident.runbook_used
            if time_to_mitigate(time_to_mitigate_s) is not None:  # checked now: the ledger would refuse it after
                incident.time_to_mitigate_s = time_to_mitigate_s
            incident.memory_sync = "pending"
            if postmortem:
                incident.pending_postmortem = postmortem
            incident.pending_outcome = asked_outcome(incident, previous, succeeded, time_to_mitigate_s)
            # The sync is recorded with the close (`grandbo.redrive`): a process that dies after answering leaves
            # it to the next one; a sync that fails is tried again.
            work = NewWork(INCIDENT_SYNC, incident.id, {"actor": actor})
            event = "incident.closed" if first_close else "incident.reclosed"
            return self._save(incident, event, actor, work=[work], room=CLOSE_ROOM)

        closed = rewritten(attempt)
        self.memory.defer_work(INCIDENT_SYNC, closed.id, lambda: self.sync(closed.id, actor=actor))
        return self.get(incident_id)

    def sync(self, incident_id: str, *, actor: str = "api") -> SyncReport:
        """Make memory match the incident: one active entry per corroborated finding and none for any other, the
        post-mortem and the runbook outcome the close asked for. Idempotent, and safe to run twice at once or after
        a process died halfway: every id it writes derives from the incident (`tiers.incident_sync`).
        A pass saves what it did over the incident exactly as it read it; when another write landed meanwhile (a
        finding changed, a close again, another sync), it runs again from the incident as it is now, and finds
        through those ids what it wrote. A pass used to save its mapping and its close's result over whatever the
        incident had become, dropping what it or the other write's sync had written: a demoted finding's entry
        stayed active, an earlier close's result stayed in the ledger, for good (probe 21, F1 and F5).
        The sync copies the findings' text into entries, which have no version a write expects: it runs fenced by
        the org's erasures (`grandbo.unerased`), and again from the incident as an erasure left it when one
        committed meanwhile. A sync that read a finding before a purge-text wrote its text into a new entry after
        the erasure had answered."""
        passes: list[SyncReport] = []
        wrote: list[bool] = []  # whether each pass wrote to the ledger
        self.memory.unerased.run(lambda: rewritten(lambda: self._synced(incident_id, actor, passes, wrote)))
        return reduce(merged, passes)

    def _synced(self, incident_id: str, actor: str, passes: list[SyncReport], wrote: list[bool]) -> Incident:
        """One pass of `sync`, its report added to `passes`; StaleWriteError when another write landed meanwhile.
        After a pass that wrote to the ledger, the close's result is recorded again (`MemorySync.outcome`)."""
        incident, report = self.get(incident_id), SyncReport()
        passes.append(report)
        mapping = dict(incident.memory)
        closed = incident.status is IncidentStatus.CLOSED
        wanted = {f.id: f for f in incident.findings if closed and f.status is FindingStatus.CORROBORATED}
        for finding_id, finding in wanted.items():
            mapping[finding_id] = self._sync.finding(incident, finding, mapping.get(finding_id), report, actor)
        if closed:
            if incident.pending_postmortem:
                self._sync.postmortem(incident, incident.pending_postmortem, actor)
            incident.closed_outcome, wrote_now = self._sync.outcome(incident, any(wrote), actor)
            incident.pending_postmortem = incident.pending_outcome = None
            wrote.append(wrote_now)
        unwanted = [i for i in dict.fromkeys([*mapping, *(f.id for f in incident.findings)]) if i not in wanted]
        self._sync.retire(incident, unwanted, mapping, report, actor)
        incident.memory, incident.memory_sync = mapping, "done"
        return self._save(incident, "incident.memory_synced", actor, room=CLOSE_ROOM)

    def refresh(self, incident_id: str, finding_ids: Collection[str], *, actor: str, reason: str) -> SyncReport:
        """Bring the memory entries of these findings of a closed incident to what the incident says now (a
        re-import changed its title, services...: `history.importer`), each corrected (for `reason`) when it
        differs, as `sync` would (`MemorySync.finding`); the incident's map saved over the incident as read, again
        when another write landed. Only findings that became memory are read: the rest are `sync`'s."""
        report = SyncReport()

        def attempt() -> Incident:
            incident = self.get(incident_id)
            if incident.status is not IncidentStatus.CLOSED:
                return incident
            mapping = dict(incident.memory)
            for finding in incident.findings:
                if finding.id in finding_ids and finding.id in mapping and finding.status is FindingStatus.CORROBORATED:
                    mapping[finding.id] = self._sync.finding(incident, finding, mapping[finding.id], report, actor,
                                                             reason)  # fmt: skip
            if mapping == incident.memory:
                return incident
            incident.memory = mapping
            return self._save(incident, "incident.memory_synced", actor, room=CLOSE_ROOM)

        rewritten(attempt)
        return report

    # ------------------------------------------------------------------ plumbing

    def _rewrite(self, incident_id: str, change: Callable[[Incident], tuple[Incident, str]], actor: str) -> Incident:
        """Apply `change` (the incident changed, and its event) to the incident as stored and save it, read anew
        and applied again when another write landed first (`tiers.retry`); on a closed incident, memory follows
        the change: recorded with it, run here."""

        def attempt() -> Incident:
            incident, event = change(self.get(incident_id))
            closed = incident.status is IncidentStatus.CLOSED
            resync = [NewWork(INCIDENT_SYNC, incident.id, {"actor": actor})] if closed else []
            return self._save(incident, event, actor, work=resync)

        saved = rewritten(attempt)
        if saved.status is IncidentStatus.CLOSED:  # a failure is logged and re-driven; the edit has committed
            self.memory.run_work(INCIDENT_SYNC, saved.id, lambda: self.sync(saved.id, actor=actor))
            return self.get(saved.id)
        return saved

    def _save(
        self, incident: Incident, event: str, actor: str, expected: int | None = None, work: Sequence[NewWork] = (),
        room: int = 0,
    ) -> Incident:  # fmt: skip
        """Store the incident with its free text masked by the org's patterns (whoever wrote it: CLI, REST, MCP,
        the console), checked again after masking (a mask may lengthen a title); return it as stored."""
        current = self.documents.get(INCIDENTS, incident.id)
        before = current.data if current is not None else None
        redactor = self.memory.org_settings.redactor()
        data = masked(incident.model_dump(mode="json", exclude={"version"}), redactor, before)
        stored = self._valid(data)
        check_size("incident", before, data, TOO_LARGE, room)
        version = incident.version if expected is None else expected
        write = DocumentWrite(INCIDENTS, stored.id, data, event, ref=stored.status.value, expected_version=version,
                              logged=change_of(before, data, "findings"))  # fmt: skip
        (doc,) = self.documents.put([write], actor, work)
        return stored.model_copy(update={"version": doc.version})

    @staticmethod
    def _valid(data: dict[str, Any]) -> Incident:
        try:
            return Incident.model_validate(data)
        except ValidationError as error:
            raise invalid("incident", error) from error


def _names(incident: Incident) -> list[str]:
    """The service names an incident holds, its own and its findings': a write of it carries them forward."""
    return [*incident.services, *(name for finding in incident.findings for name in finding.services)]
