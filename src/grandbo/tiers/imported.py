"""Imported history's documents: one import record per (source, source id) in the collection `history` (the
content hash that decides whether a re-import changes anything, the ids of the entries it wrote, and what it filed
of the incident: `findings`, the incident's ids of the source's findings in its order, and `parts`, a digest of each
part as filed, which tell a re-import what people changed since: `tiers.incident_merge`), beside the incident
documents and the ledger outcomes the importer files (`grandbo.history.importer` decides what; this writes it through
the org's documents). Every incident write expects the version it read: nothing people wrote meanwhile is lost."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog

from grandbo.errors import ConflictError, GrandboError, ImportRunningError, OrgDroppedError, StaleWriteError
from grandbo.model import utcnow
from grandbo.ports import Document, DocumentWrite
from grandbo.processes import gone, this_process
from grandbo.tiers.effectiveness import OutcomeKind
from grandbo.tiers.incident_merge import Provenance, parts_of
from grandbo.tiers.incident_model import INCIDENTS, Incident, finding_number, masked
from grandbo.tiers.incidents import Incidents
from grandbo.tiers.ledger import incident_outcome_id
from grandbo.tiers.operations import OUTCOMES

HISTORY = "history"
RUNNING, LEASED = "_running", "_lease"  # the org's import lease: its doc id and ref in HISTORY (no source's)
# An import renews its lease every RENEW from a thread of its own (a long chunk, a slow provider, a store busy for
# a while miss a renewal or five, not the lease); one whose process died frees the org after at most LEASE, or at
# once when the next import proves that process gone (`grandbo.processes`).
LEASE, RENEW = timedelta(seconds=90), timedelta(seconds=15)
GIVE_BACK = timedelta(seconds=1)  # an ended import's lease the store refused to free: tried again after this
# The tokens of the imports this process runs now (`begin` to `end`): a lease of this process whose token is not
# one ended here, its release refused by a store that was down; the next import here takes it over at once.
_RUNNING: set[str] = set()
_LOCK = threading.Lock()

log = structlog.get_logger(__name__)


IMPORTED_EVENTS = ("history.imported", "history.reimported")  # an incident's writes by an import


@dataclass(frozen=True)
class Held:
    """What an earlier import left of one record: its content hash, the entries it wrote by role, and what it
    filed of the incident (None: an import record of a release before `parts`); `data` is the record itself."""

    hash: str
    entries: dict[str, str]
    findings: tuple[str, ...] | None = None
    parts: dict[str, str] | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Filing:
    """One record's documents to write: its import record, its incident (or None: none, or written already by
    `reserve`) expecting version `expected` (0: a new one), and its outcome (or None)."""

    record_id: str
    source: str
    record: dict[str, Any]
    incident: Incident | None
    outcome: dict[str, Any] | None
    update: bool
    expected: int = 0


@dataclass(frozen=True)
class Reserved:
    """A changed record's incident as the re-import merged it (`tiers.incident_merge`), written before its entries
    expecting the version read, with its import record saying what it filed (its hash still the old one, so that
    an import killed before the entries are written files the record again)."""

    record_id: str
    source: str
    incident: Incident
    expected: int
    record: dict[str, Any]


class Imported:
    """The documents side of imported history, for one organization (through its incidents tier)."""

    def __init__(self, incidents: Incidents) -> None:
        self._incidents = incidents
        self._documents = incidents.documents
        self._token, self._started = "", utcnow()  # of the lease `begin` took

    def hashes(self, source: str) -> dict[str, str]:
        """Every record of `source` imported before, by id, with its content hash (one read, hashes only)."""
        docs = self._documents.find(HISTORY, [source], keys=["hash"])
        return {doc.doc_id: str(doc.data.get("hash", "")) for doc in docs if isinstance(doc.data, dict)}

    def begin(self, actor: str) -> int:
        """Take the org's import lease, in any process: one import of an organization runs at a time (two at once
        each read the hashes before the other wrote and file every record twice). ImportRunningError (409, with the
        seconds until the lease runs out) while another holds it; a lease its import did not renew for LEASE, or
        whose process is proved gone (a killed process on this machine), is taken over. Returns the lease's version,
        for `renew` and `end`."""
        doc, now = self._documents.get(HISTORY, RUNNING), utcnow()
        if doc is not None and isinstance(doc.data, dict) and self._held(doc.data, now):
            log.warning("history.import_lease_taken_over", org_id=self._incidents.memory.org,
                        started_at=doc.data.get("started_at"), holder=doc.data.get("process"))  # fmt: skip
        self._token, self._started = secrets.token_hex(8), now
        try:
            version = self._lease(now, actor, doc.version if doc is not None else 0)
        except StaleWriteError:  # given back meanwhile (`end`'s thread), or taken by another import: read again
            again = self._documents.get(HISTORY, RUNNING)
            if again is not None and isinstance(again.data, dict):
                self._held(again.data, now)  # ImportRunningError, saying whose, while another holds it
            try:
                version = self._lease(now, actor, again.version if again is not None else 0)
            except StaleWriteError:
                raise _running(None, now) from None
        with _LOCK:
            _RUNNING.add(self._token)
        return version

    def check(self) -> None:
        """ImportRunningError if `begin` would refuse now: a REST import looks before it uploads its export."""
        doc, now = self._documents.get(HISTORY, RUNNING), utcnow()
        if doc is not None and isinstance(doc.data, dict):
            self._held(doc.data, now)

    def _held(self, lease: dict[str, Any], now: datetime) -> bool:
        """False for a lease that ran out (or was given back); True for one whose process is proved gone, or is
        this process, which runs no import of that lease (an import that ended while the store was down): taken
        over; raises ImportRunningError for the rest."""
        if str(lease.get("until", "")) <= now.isoformat():
            return False
        holder = lease.get("process")
        if not isinstance(holder, dict) or not (gone(holder) or _ended_here(holder, lease.get("token"))):
            raise _running(lease, now)
        return True

    def renew(self, version: int, actor: str) -> int:
        """Hold the lease LEASE longer (the import's heartbeat calls it); ImportRunningError if another took it
        over. A renewal whose answer was lost (a store that failed mid-commit) is found by its token and kept."""
        now = utcnow()
        try:
            return self._lease(now, actor, version)
        except StaleWriteError:
            doc = self._documents.get(HISTORY, RUNNING)
            if doc is None or not isinstance(doc.data, dict) or doc.data.get("token") != self._token:
                raise _running(doc.data if doc is not None and isinstance(doc.data, dict) else None, now) from None
            return self._lease(now, actor, doc.version)

    def end(self, version: int, actor: str, counts: dict[str, Any] | None = None) -> None:
        """Give the lease back (a lease another took over meanwhile is theirs: left alone; one of an org dropped
        meanwhile went with it). Its event (`history.import_ended`) records the run's `counts`: the import's one
        event with what it did, beside each record's own. Refused by the store (down, or busy past its timeout: an
        import the outage cut short ends so), it is given back from a thread once the store answers: the lease held
        the org's imports refused for its whole LEASE though nothing ran (probe 22a). Never raises: the import's own
        error stands."""
        with _LOCK:
            _RUNNING.discard(self._token)
        try:
            self._give_back(version, actor, counts)
        except GrandboError as error:
            log.warning("history.import_lease_not_given_back", org_id=self._incidents.memory.org, error=error.message)
            until = utcnow() + LEASE
            threading.Thread(target=self._give_back_later, args=(version, actor, until, counts),
                             name="import-lease-end", daemon=True).start()  # fmt: skip

    def _give_back(self, version: int, actor: str, counts: dict[str, Any] | None = None) -> None:
        with suppress(StaleWriteError, OrgDroppedError):
            self._documents.put([DocumentWrite(HISTORY, RUNNING, None, "history.import_ended", ref=LEASED,
                                               expected_version=version, logged=counts)], actor)  # fmt: skip

    def _give_back_later(self, version: int, actor: str, until: datetime, counts: dict[str, Any] | None) -> None:
        """`_give_back`, tried again every GIVE_BACK (doubling, RENEW at most) until it is done or the lease ran out."""
        pause = GIVE_BACK
        while utcnow() < until:
            time.sleep(pause.total_seconds())
            try:
                self._give_back(version, actor, counts)
            except GrandboError:
                pause = min(pause * 2, RENEW)
                continue
            log.info("history.import_lease_given_back", org_id=self._incidents.memory.org)
            return

    def heartbeat(self, version: int, actor: str) -> Heartbeat:
        """Renew the lease of version `version` every RENEW until `Heartbeat.stop` (see `Heartbeat`)."""
        return Heartbeat(self, version, actor)

    def _lease(self, now: datetime, actor: str, expected: int) -> int:
        data = {"until": (now + LEASE).isoformat(), "actor": actor, "renewed_at": now.isoformat(),
                "started_at": self._started.isoformat(), "process": this_process(), "token": self._token}  # fmt: skip
        (doc,) = self._documents.put([DocumentWrite(HISTORY, RUNNING, data, "history.import_leased", ref=LEASED,
                                                    expected_version=expected)], actor)  # fmt: skip
        return doc.version

    def held(self, record_id: str) -> Held | None:
        doc = self._documents.get(HISTORY, record_id)
        if doc is None or not isinstance(doc.data, dict):
            return None
        data = doc.data
        entries, findings, parts = data.get("entries"), data.get("findings"), data.get("parts")
        return Held(
            str(data.get("hash", "")), dict(entries) if isinstance(entries, dict) else {},
            tuple(str(f) for f in findings) if isinstance(findings, list) else None,
            {str(k): str(v) for k, v in parts.items()} if isinstance(parts, dict) else None, dict(data),
        )  # fmt: skip

    def incidents(self, ids: Sequence[str]) -> dict[str, Document]:
        """The stored incidents of `ids` that exist (one read)."""
        return {doc.doc_id: doc for doc in self._documents.find(INCIDENTS, ids=list(ids))} if ids else {}

    def incident(self, incident_id: str) -> Document | None:
        return self._documents.get(INCIDENTS, incident_id)

    def provenance(self, record_id: str, held: Held | None) -> Provenance:
        """What the last import filed of the record's incident (`Held.findings`, `Held.parts`). An import record of
        a release before them: what that import wrote to the incident, its last write (an import wrote it whole,
        never merged), read from the incident's history; else its entries' finding roles and no parts (every field
        the source's)."""
        if held is None:
            return Provenance()
        if held.findings is not None:
            return Provenance(held.findings, held.parts or {})
        for event in reversed(self._documents.history(INCIDENTS, record_id)):
            if event.get("type") in IMPORTED_EVENTS and isinstance(event.get("data"), dict):
                with suppress(ValueError):  # pydantic's ValidationError is one: then the roles below
                    filed = Incident.model_validate(event["data"])
                    return Provenance(tuple(finding.id for finding in filed.findings), parts_of(filed))
                break
        return Provenance(tuple(sorted(filter(finding_number, held.entries), key=finding_number)))

    def masked(self, incidents: Sequence[Incident]) -> list[Incident]:
        """The incidents with their free text masked by the org's patterns (as stored), checked again: a mask may
        lengthen a title."""
        redactor = self._incidents.memory.org_settings.redactor()
        return [
            Incidents._valid(masked(incident.model_dump(mode="json", exclude={"version"}), redactor))
            for incident in incidents
        ]

    def reserve(self, reserved: Sequence[Reserved], actor: str) -> None:
        """Write the merged incidents of changed records, each expecting the version read, with their import
        records, in one transaction; StaleWriteError (nothing written) when one was written meanwhile."""
        writes: list[DocumentWrite] = []
        for item in reserved:
            data = item.incident.model_dump(mode="json", exclude={"version"})
            writes.append(DocumentWrite(INCIDENTS, item.record_id, data, "history.reimported",
                                        ref=item.incident.status.value, expected_version=item.expected))  # fmt: skip
            writes.append(DocumentWrite(HISTORY, item.record_id, item.record, "history.reimporting", ref=item.source))
        if writes:
            self._documents.put(writes, actor)

    def file(self, filings: Sequence[Filing], actor: str) -> set[str]:
        """Write the filings' documents in one transaction (incidents masked by the org's patterns already, each
        expecting its version: StaleWriteError, nothing written, when one was written meanwhile). Return the ids
        of the records whose outcome was left as a person or an agent recorded it (`_outcomes`)."""
        now = utcnow()
        writes: list[DocumentWrite] = []
        outcomes, left = self._outcomes(filings, now)
        for filing in filings:
            event = "history.reimported" if filing.update else "history.imported"
            if filing.incident is not None:
                data = filing.incident.model_dump(mode="json", exclude={"version"})
                ref = filing.incident.status.value
                writes.append(DocumentWrite(INCIDENTS, filing.record_id, data, event, ref=ref,
                                            expected_version=filing.expected))  # fmt: skip
            if (outcome := outcomes.get(filing.record_id)) is not None:
                writes.append(outcome)
            writes.append(DocumentWrite(HISTORY, filing.record_id, filing.record, event, ref=filing.source))
        if writes:
            self._documents.put(writes, actor)
        return left

    def _outcomes(self, filings: Sequence[Filing], now: datetime) -> tuple[dict[str, DocumentWrite], set[str]]:
        """The outcome writes of the filings, by record id, each expecting the version read (one read for all), and
        the ids of the records whose outcome is not written: the ledger holds another writer's result of the same
        (incident, runbook) under its id (a close's, an agent's report: `ledger.incident_outcome_id`), which stays
        whatever the source says now; or the import's own, as it would write it again."""
        wanted = {}
        for filing in filings:
            if filing.outcome is not None:
                outcome = _json({**filing.outcome, "at": filing.outcome.get("at") or now})
                kind = OutcomeKind(outcome["kind"])
                doc_id = incident_outcome_id(outcome["incident_id"], outcome["runbook_id"], kind)
                wanted[doc_id] = (filing, outcome, kind, filing.outcome.get("at") is not None)
        held = {doc.doc_id: doc for doc in self._documents.find(OUTCOMES, ids=list(wanted))} if wanted else {}
        writes, left = {}, set()
        for doc_id, (filing, outcome, kind, timed) in wanted.items():
            doc = held.get(doc_id)
            data = doc.data if doc is not None and isinstance(doc.data, dict) else None
            if data is not None and not _imported_outcome(data, filing.source):
                left.add(filing.record_id)  # a person's (or an agent's): theirs stays
            elif data is None or _differs(data, outcome, timed=timed):
                writes[filing.record_id] = DocumentWrite(
                    OUTCOMES, doc_id, outcome, f"outcome.{kind.value}", ref=outcome["runbook_id"],
                    expected_version=doc.version if doc is not None else 0,
                )  # fmt: skip
        return writes, left


class Heartbeat:
    """A thread that renews an import's lease every RENEW while the import runs, whatever its chunks do. `check`
    raises in the import's thread once the lease was lost (another import took it over: this one stalled past
    LEASE, so that two never write at once; or the org was dropped: OrgDroppedError, not a 409 naming another
    import); `stop` ends the thread and returns the lease's last version."""

    def __init__(self, imported: Imported, version: int, actor: str) -> None:
        self.version = version
        self.lost: ConflictError | OrgDroppedError | None = None
        self._imported, self._actor, self._stopped = imported, actor, threading.Event()
        self._thread = threading.Thread(target=self._run, name="import-lease", daemon=True)
        self._thread.start()

    def check(self) -> None:
        if self.lost is not None:
            raise self.lost

    def stop(self) -> int:
        self._stopped.set()
        self._thread.join()
        return self.version

    def _run(self) -> None:
        while not self._stopped.wait(RENEW.total_seconds()):
            try:
                self.version = self._imported.renew(self.version, self._actor)
            except (ConflictError, OrgDroppedError) as lost:  # taken over, or gone with its org
                self.lost = lost
                return
            except GrandboError as error:  # the store unreachable for a while: the next beat tries again
                log.warning("history.import_lease_not_renewed", error=error.message)


def _ended_here(holder: dict[str, Any], token: Any) -> bool:
    """Whether the lease of `holder` and `token` is one this process took and no import of it runs here now."""
    if holder != this_process() or not holder.get("started"):  # no start time: a pid alone names no process
        return False
    with _LOCK:
        return token not in _RUNNING


def _running(lease: dict[str, Any] | None, now: datetime) -> ImportRunningError:
    if lease is None:  # another import took it between our read and our write
        return ImportRunningError(
            "An import of this organization has just started. Retry when it is done: a second import at once "
            "would file its records twice.", retry_after=LEASE.total_seconds(), detail={})  # fmt: skip
    until = _when(lease.get("until")) or now + LEASE
    by = str(lease.get("actor", "an import"))  # not its process: a tenant's admin is told nothing of the machines
    started = lease.get("started_at") or lease.get("renewed_at")
    return ImportRunningError(
        f"An import of this organization started at {started} by {by} is running, or its process died. A running "
        f"import renews its lease every {int(RENEW.total_seconds())} s (last at {lease.get('renewed_at')}); unless "
        f"it does, the lease runs out at {until.isoformat()} and the next import goes ahead. A second import at "
        "once would file its records twice.",
        retry_after=(until - now).total_seconds(),
        detail={
            "started_at": started,
            "by": lease.get("actor"),
            "renewed_at": lease.get("renewed_at"),
            "lease_until": until.isoformat(),
        },
    )


def _when(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def _imported_outcome(data: dict[str, Any], source: str) -> bool:
    """Whether an outcome is one an import of `source` wrote (`history.filing`: its comment and actor say so)."""
    return data.get("actor") == "import" and data.get("comment") == f"imported from {source}"


def _differs(held: dict[str, Any], wanted: dict[str, Any], *, timed: bool) -> bool:
    """Whether the import's outcome as held differs from the one it would write (its time only when the record
    knows it: else it is the time of each write)."""
    return any(held.get(key) != value for key, value in wanted.items() if timed or key != "at")


def _json(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value.isoformat() if isinstance(value, datetime) else value for key, value in data.items()}
