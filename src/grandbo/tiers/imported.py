"""Imported history's documents: one import record per (source, source id) in the collection `history` (the
content hash that decides whether a re-import changes anything, and the ids of the entries it wrote), beside the
incident documents and the ledger outcomes the importer files, all of a batch in one transaction
(`grandbo.history.importer` decides what; this writes it through the org's documents)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from grandbo.errors import ConflictError, StaleWriteError
from grandbo.model import utcnow
from grandbo.ports import DocumentWrite
from grandbo.tiers.effectiveness import OutcomeKind
from grandbo.tiers.incident_model import INCIDENTS, Incident, masked
from grandbo.tiers.incidents import Incidents
from grandbo.tiers.ledger import incident_outcome_id
from grandbo.tiers.operations import OUTCOMES

HISTORY = "history"
RUNNING, LEASED = "_running", "_lease"  # the org's import lease: its doc id and ref in HISTORY (no source's)
LEASE = timedelta(minutes=10)  # an import renews it every minute; one that died frees it after this


@dataclass(frozen=True)
class Held:
    """What an earlier import left of one record: its content hash and the entries it wrote, by role."""

    hash: str
    entries: dict[str, str]


@dataclass(frozen=True)
class Filing:
    """One record's documents to write: its import record, its incident (or None) and its outcome (or None)."""

    record_id: str
    source: str
    record: dict[str, Any]
    incident: Incident | None
    outcome: dict[str, Any] | None
    update: bool


class Imported:
    """The documents side of imported history, for one organization (through its incidents tier)."""

    def __init__(self, incidents: Incidents) -> None:
        self._incidents = incidents
        self._documents = incidents.documents

    def hashes(self, source: str) -> dict[str, str]:
        """Every record of `source` imported before, by id, with its content hash (one read, hashes only)."""
        docs = self._documents.find(HISTORY, [source], keys=["hash"])
        return {doc.doc_id: str(doc.data.get("hash", "")) for doc in docs if isinstance(doc.data, dict)}

    def begin(self, actor: str) -> int:
        """Take the org's import lease, in any process: one import of an organization runs at a time (two at once
        each read the hashes before the other wrote and file every record twice). ConflictError (409) while another
        holds it; a lease its import did not renew for LEASE (a killed process) is taken over. Returns the lease's
        version, for `renew` and `end`."""
        doc = self._documents.get(HISTORY, RUNNING)
        now = utcnow()
        if doc is not None and isinstance(doc.data, dict) and str(doc.data.get("until", "")) > now.isoformat():
            raise _running(doc.data)
        try:
            return self._lease(now, actor, doc.version if doc is not None else 0)
        except StaleWriteError:
            raise _running(None) from None

    def renew(self, version: int, actor: str) -> int:
        """Hold the lease LEASE longer (an import calls it as it goes); ConflictError if another took it over."""
        try:
            return self._lease(utcnow(), actor, version)
        except StaleWriteError:
            raise _running(None) from None

    def end(self, version: int, actor: str) -> None:
        """Give the lease back (a lease another took over meanwhile is theirs: left alone)."""
        with suppress(StaleWriteError):
            self._documents.put([DocumentWrite(HISTORY, RUNNING, None, "history.import_ended", ref=LEASED,
                                               expected_version=version)], actor)  # fmt: skip

    def _lease(self, now: datetime, actor: str, expected: int) -> int:
        data = {"until": (now + LEASE).isoformat(), "actor": actor, "renewed_at": now.isoformat()}
        (doc,) = self._documents.put([DocumentWrite(HISTORY, RUNNING, data, "history.import_leased", ref=LEASED,
                                                    expected_version=expected)], actor)  # fmt: skip
        return doc.version

    def held(self, record_id: str) -> Held | None:
        doc = self._documents.get(HISTORY, record_id)
        if doc is None or not isinstance(doc.data, dict):
            return None
        entries = doc.data.get("entries")
        return Held(str(doc.data.get("hash", "")), dict(entries) if isinstance(entries, dict) else {})

    def file(self, filings: Sequence[Filing], actor: str) -> int:
        """Write the filings' documents in one transaction (incidents masked by the org's patterns); return how
        many documents were written."""
        redactor = self._incidents.memory.org_settings.redactor()
        now = utcnow()
        writes: list[DocumentWrite] = []
        for filing in filings:
            event = "history.reimported" if filing.update else "history.imported"
            if filing.incident is not None:
                data = masked(filing.incident.model_dump(mode="json", exclude={"version"}), redactor)
                incident = Incidents._valid(data)  # checked again: a mask may lengthen a title
                writes.append(DocumentWrite(INCIDENTS, incident.id, data, event, ref=incident.status.value))
            if filing.outcome is not None:
                outcome = {**filing.outcome, "at": filing.outcome.get("at") or now}
                kind = OutcomeKind(outcome["kind"])
                doc_id = incident_outcome_id(outcome["incident_id"], outcome["runbook_id"], kind)
                writes.append(DocumentWrite(OUTCOMES, doc_id, _json(outcome), f"outcome.{kind.value}",
                                            ref=outcome["runbook_id"]))  # fmt: skip
            writes.append(DocumentWrite(HISTORY, filing.record_id, filing.record, event, ref=filing.source))
        if writes:
            self._documents.put(writes, actor)
        return len(writes)


def _running(lease: dict[str, Any] | None) -> ConflictError:
    held = f" (by {lease.get('actor')}, renewed at {lease.get('renewed_at')})" if lease else ""
    return ConflictError(
        f"An import of this organization is running{held}. Retry when it is done: a second import at once would "
        "file its records twice. A killed import frees the organization after ten minutes.",
        detail={"retry_after_s": int(LEASE.total_seconds())},
    )


def _json(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value.isoformat() if isinstance(value, datetime) else value for key, value in data.items()}
