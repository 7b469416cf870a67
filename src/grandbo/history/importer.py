"""The importer: a reader's records filed through the org handle, in bounded chunks, keyed by (source, source id).

For each chunk of `CHUNK` records: one read of the entries their ids name, one `remember_many` of the entries that are
new, one transaction of documents (incidents, outcomes, import records). A record whose content hash is the one its
import record holds is unchanged and writes nothing; one whose hash differs is an update: its entries that changed are
corrected (the old version stays in the history, the reason names the import), those it no longer has are retired, and
its incident is merged with what people wrote to it since the import (`tiers.incident_merge`: their findings, a close, a
finding of the import they changed stay; the source's findings new to the record take ids no finding has) and written
first, each expecting the version read: a write that lands meanwhile (a finding added) is read again and merged again,
never overwritten. The import record is written last, after the entries, so an import killed halfway is resumed by
running it again: a record without its import record is filed again, and its entries already written are found and left
alone (a changed record's import record already says what its merged incident holds of the import's).

Within one import the first record with an id is the one filed: a later one with the same id is skipped when it is an
exact copy, and refused, naming both places, when its content differs (`_Seen`), so a copied post-mortem template or a
duplicated export page never replaces another incident, and every run keeps the same one.

A part an import retired because its record no longer had it (a thinner export: a Jira search without `fields=*all`, a
PagerDuty export without its notes) is filed again when a later import's record has it again: as a new entry, `<its
id>@2` (then `@3`...: the log has no event that makes a retired entry active again), which the import record, and the
incident for a finding, then name for the role. A part a person retired, or purged, stays so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ValidationError

from grandbo.errors import GrandboError, OrgDroppedError, StaleWriteError, StoreUnavailableError
from grandbo.history import decide
from grandbo.history.filing import Filed, file_record, finding_roles, renumbered
from grandbo.history.planning import Planned, Planner
from grandbo.history.record import HistoricIncident, Reader, Refusal, Skipped
from grandbo.history.stopped import Interrupted, cut_short
from grandbo.model import Entry
from grandbo.ports import Document
from grandbo.tiers.imported import Filing, Heartbeat, Held, Imported, Reserved
from grandbo.tiers.incident_merge import Merge, Provenance, changed_findings, merged, numbered, parts_of
from grandbo.tiers.incident_model import Incident, IncidentStatus
from grandbo.tiers.records import read_record
from grandbo.tiers.retry import rewritten

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)

# Records held at once, whatever the file's size. A chunk's entries, then its documents, are written in one transaction
# each, holding the store's write lock that every organization's writes wait for: 500 held it up to half a second.
CHUNK = 100
MAX_LISTED = 1000  # refusals listed in the report; the rest are counted (`refused_more`)
Progress = Callable[[int, int | None], None]


@dataclass
class HistoryReport:
    """What an import did (or, dry, would do): records new, changed, unchanged, refused, skipped (left out on
    purpose by the reader: a test incident, a duplicate; not an error), and every decision."""

    source: str
    imported: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: int = 0
    refused: list[dict[str, str]] = field(default_factory=list)
    refused_more: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    dry_run: bool = False

    @property
    def read(self) -> int:
        return self.imported + self.updated + self.unchanged + self.skipped + len(self.refused) + self.refused_more

    def refuse(self, location: str, reason: str) -> None:
        if len(self.refused) < MAX_LISTED:
            self.refused.append({"location": location, "reason": reason[:500]})
        else:
            self.refused_more += 1

    def counts(self) -> dict[str, Any]:
        """The report without the refusals' list (their number instead): what the log line and the import's
        `history.import_ended` event record."""
        listed = {key: value for key, value in self.to_dict().items() if key != "refused_more"}
        return listed | {"refused": len(self.refused) + self.refused_more}

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "imported": self.imported, "updated": self.updated, "unchanged": self.unchanged,
            "skipped": self.skipped, "refused": self.refused, "decisions": dict(sorted(self.decisions.items())),
            "dry_run": self.dry_run,
            **({"refused_more": self.refused_more} if self.refused_more else {}),
        }  # fmt: skip


def import_history(
    memory: OrgMemory,
    reader: Reader,
    path: Path,
    *,
    mapping: dict[str, str] | None = None,
    dry_run: bool = False,
    actor: str = "import",
    progress: Progress | None = None,
    total: int | None = None,
    still: Callable[[HistoryReport], None] | None = None,
) -> HistoryReport:
    """File every record `reader` reads at `path` into `memory` (see the module); `dry_run` writes nothing and
    reports what would change. `progress(records read, total or None)` is called after every chunk; `still(report)`
    before each chunk is written, and what it raises stops the import there (a REST import's key revoked)."""
    report = HistoryReport(reader.name, dry_run=dry_run)
    filer = _Filer(memory, report, actor, dry_run)
    filer.still = still
    if not dry_run:  # one import of an org at a time, its lease renewed as it goes; a dry run writes nothing
        filer.lease = filer.documents.heartbeat(filer.documents.begin(actor), actor)
    finished = False
    try:
        _import(reader, path, mapping, filer, report, progress, total)
        finished = True
    except KeyboardInterrupt as stop:  # Ctrl-C: what was filed is kept, and the caller can say how far it got
        raise Interrupted(report) from stop
    except StoreUnavailableError as error:  # the store's own 503 said "nothing was read or written": not so here
        raise cut_short(error, report, CHUNK) from error
    finally:
        if filer.lease is not None:  # the run's one event with its counts: the lease's end
            filer.documents.end(filer.lease.stop(), actor, report.counts() | {"finished": finished})
    log.info("history.imported", org_id=memory.org, **report.counts())
    return report


def _import(
    reader: Reader, path: Path, mapping: dict[str, str] | None, filer: _Filer, report: HistoryReport,
    progress: Progress | None, total: int | None,
) -> None:  # fmt: skip
    chunk: list[tuple[HistoricIncident, Filed]] = []
    for number, item in enumerate(reader.read(path, mapping), start=1):
        if isinstance(item, Refusal):
            report.refuse(item.location, item.reason)
        elif isinstance(item, Skipped):
            report.skipped += 1
        elif (digest := filer.seen.first(item, report)) is None:
            pass  # a second record with an id this import already read: refused, or skipped when a copy
        elif filer.unchanged(item, digest):  # decided by its hash alone: nothing filed, nothing decided
            report.unchanged += 1
        elif (filed := _filed(item, report, filer.topology.canonical)) is not None:
            report.decisions.update(+filed.decisions)
            chunk.append((item, filed))
        if len(chunk) >= CHUNK:
            filer.flush(chunk)
            chunk = []
        if progress is not None and number % CHUNK == 0:
            progress(number, total)
    filer.flush(chunk)
    if progress is not None:
        progress(report.read, total)


def _filed(record: HistoricIncident, report: HistoryReport, canonical: Callable[[str], str | None]) -> Filed | None:
    try:
        return file_record(record, canonical)
    except GrandboError as error:
        report.refuse(record.location, error.message)
    except (ValidationError, ValueError) as error:
        report.refuse(record.location, f"cannot be filed: {str(error)[:300]}")
    return None


@dataclass
class _Item:
    """One record of a chunk on its way (see the module): as `file_record` filed it (`source`: its findings' roles in
    the source's order, its incident masked), numbered for the incident as stored (`filed`), with its plan."""

    record: HistoricIncident
    source: Filed
    again: bool  # imported before: an update
    held: Held | None = None
    provenance: Provenance = field(default_factory=Provenance)
    filed: Filed | None = None
    planned: Planned | None = None
    stored: Incident | None = None
    version: int = 0  # of the stored incident; 0: none
    changed: frozenset[str] = frozenset()  # the import's findings a person changed since
    merge: Merge | None = None  # the incident as merged last
    parts: dict[str, str] | None = None  # of `filed`'s incident (`incident_merge.parts_of`)
    refused: str | None = None

    @property
    def id(self) -> str:
        return self.source.incident_id

    def provenance_data(self) -> dict[str, Any]:
        """What the import record says the import filed of the incident (`tiers.incident_merge.Provenance`)."""
        assert self.filed is not None
        if self.parts is None:
            self.parts = parts_of(self.filed.incident) if self.filed.incident is not None else {}
        return {"findings": finding_roles(self.filed), "parts": self.parts}


class _Filer:
    """Files chunks of records for one import (see the module)."""

    def __init__(self, memory: OrgMemory, report: HistoryReport, actor: str, dry_run: bool) -> None:
        self.memory, self.report, self.actor, self.dry_run = memory, report, actor, dry_run
        self.documents = Imported(memory.incidents)
        self.planner = Planner(memory, actor)
        self.topology = memory.catalog.topology()  # a vendor's name of a service (an alias) filed as the catalog's
        self.hashes: dict[str, dict[str, str]] = {}  # by source: every record imported before, with its hash
        self.seen = _Seen()
        self.lease: Heartbeat | None = None  # what renews the org's import lease this import holds
        self.still: Callable[[HistoryReport], None] | None = None  # `import_history`'s

    def unchanged(self, record: HistoricIncident, digest: str) -> bool:
        if record.source not in self.hashes:
            self.hashes[record.source] = self.documents.hashes(record.source)
        held = self.hashes[record.source].get(decide.incident_id(record.source, record.source_id))
        return held is not None and held == digest

    def flush(self, chunk: Sequence[tuple[HistoricIncident, Filed]]) -> None:
        if not chunk:
            return
        known = [record.source_id for record, filed in chunk if filed.incident_id in self.hashes[record.source]]
        if self.dry_run:
            self.report.updated += len(known)
            self.report.imported += len(chunk) - len(known)
            return
        if self.lease is not None:
            self.lease.check()  # a lease lost (this import stalled past it) stops the import before it writes
        if self.still is not None:
            self.still(self.report)
        masked = iter(self.documents.masked([filed.incident for _, filed in chunk if filed.incident is not None]))
        items = [_Item(record, replace(filed, incident=next(masked) if filed.incident is not None else None),
                       filed.incident_id in self.hashes[record.source]) for record, filed in chunk]  # fmt: skip
        # Changed records (rare): their import records, and the incidents people may have worked on since.
        stored = self.documents.incidents([item.id for item in items if item.again])
        for item in items:
            if item.again:
                item.held = self.documents.held(item.id)
                item.provenance = self.documents.provenance(item.id, item.held)
                self._number(item, stored.get(item.id))
            else:
                item.filed = item.source
        # Entries are read only for records imported before (rare); a new record's entries are written as they
        # are, and one left by an import killed halfway makes the store refuse the batch: `remember` sorts it out.
        wanted = self._wanted([item for item in items if item.again and item.refused is None])
        existing = self.memory.get_many(wanted) if wanted else {}  # a read brings the org's search index up to date
        for item in items:
            if item.refused is None:
                item.planned = self._plan(item, existing)
        self._reserve([item for item in items if item.again and item.refused is None])
        fresh = [
            (item.id, entry) for item in items if item.planned and not item.refused for entry in item.planned.fresh
        ]
        for record_id, reason in self.planner.remember(fresh).items():
            next(item for item in items if item.id == record_id).refused = reason
        self.planner.correct_all([item.planned for item in items if item.planned and item.refused is None])
        filings = []
        for item in items:
            if item.refused is None and item.planned is not None:
                try:
                    self.planner.update(item.planned)
                    self._refresh(item)
                except OrgDroppedError:
                    raise  # the org was deleted while this import ran: it is over
                except GrandboError as error:
                    item.refused = f"not updated: {error.message}"
            if item.refused is not None:
                self.report.refuse(item.record.location, item.refused)
                continue
            filings.append((item, self._filing(item)))
        self._file(filings)

    def _number(self, item: _Item, doc: Document | None) -> bool:
        """Read a changed record's incident as stored in `doc`: the source's findings numbered for it
        (`incident_merge.numbered`) and the import's findings a person changed since. True when either differs
        from what the item held (it is planned again)."""
        try:
            stored = read_record(Incident, doc, "incident") if doc is not None else None
        except GrandboError as error:
            item.refused = f"not updated: {error.message}"
            return False
        item.stored, item.version = stored, doc.version if doc is not None else 0
        changed = frozenset(changed_findings(item.provenance, stored))
        ids = numbered(finding_roles(item.source), item.provenance, stored,
                       lambda finding_id: self.planner.taken(item.id, finding_id))  # fmt: skip
        if item.filed is not None and changed == item.changed and all(k == v for k, v in ids.items()):
            return False
        filed = renumbered(item.source, ids)
        differs = item.filed is None or list(filed.entries) != list(item.filed.entries) or changed != item.changed
        if differs:
            item.filed, item.changed, item.parts = filed, changed, None
        return differs

    def _wanted(self, items: Sequence[_Item]) -> list[str]:
        ids = [entry.id for item in items if item.filed for entry in item.filed.entries.values()]
        ids += [entry_id for item in items if item.held for entry_id in item.held.entries.values()]
        return [entry_id for entry_id in dict.fromkeys(ids) if entry_id]

    def _plan(self, item: _Item, existing: dict[str, Entry]) -> Planned:
        assert item.filed is not None
        return self.planner.plan(item.filed, item.held, existing, item.changed)

    def _reserve(self, items: Sequence[_Item]) -> None:
        """Write the changed records' incidents, merged with what people wrote (`incident_merge`), before their
        entries: one transaction, each incident expecting the version read. When one was written meanwhile, each
        record on its own: read again and merged again (numbered and planned again when the incident changed),
        until its write lands (`tiers.retry.rewritten`). So a finding a person adds at the same moment is kept,
        and takes an id after the import's."""
        reserved = [merged for item in items if (merged := self._merged(item)) is not None]
        try:
            self.documents.reserve(reserved, self.actor)
        except StaleWriteError:
            for item in items:
                try:
                    rewritten(partial(self._reserve_one, item))
                except OrgDroppedError:
                    raise  # the org was deleted while this import ran: it is over
                except GrandboError as error:
                    item.refused = f"not updated: {error.message}"

    def _reserve_one(self, item: _Item) -> None:
        doc = self.documents.incident(item.id)
        if (doc.version if doc is not None else 0) != item.version and self._number(item, doc):
            item.planned = self._plan(item, self.memory.get_many(self._wanted([item])))
        if item.refused is None and (merged := self._merged(item)) is not None:
            self.documents.reserve([merged], self.actor)

    def _merged(self, item: _Item) -> Reserved | None:
        """A changed record's incident to write (`incident_merge.merged`) with its import record saying what the
        import filed; None when the record has no incident, or its incident would not change."""
        assert item.filed is not None
        if item.filed.incident is None:
            return None
        item.merge = merged(item.stored, item.filed.incident, item.provenance, item.changed)
        if item.stored is not None and item.merge.incident == item.stored:
            return None
        record = {**(item.held.data if item.held else {}), **item.provenance_data()}
        return Reserved(item.id, item.record.source, item.merge.incident, item.version, record)

    def _refresh(self, item: _Item) -> None:
        """A changed record's incident as merged, when closed: the memory of people's findings (theirs, and the
        import's they changed) brought to it (their entries' titles name the incident's title, which the source may
        have changed), before the import record, so that a rerun of an import killed before does it again."""
        if item.merge is None or item.merge.incident.status is not IncidentStatus.CLOSED or item.planned is None:
            return
        imported = set(item.provenance_data()["findings"]) - item.changed
        people = {finding.id for finding in item.merge.incident.findings} - imported
        if people:
            self.memory.incidents.refresh(item.id, people, actor=self.actor, reason=item.planned.reason)

    def _filing(self, item: _Item) -> Filing:
        assert item.filed is not None
        assert item.planned is not None
        record, filed = item.record, item.filed
        data = {"source": record.source, "source_id": record.source_id, "url": record.url, "hash": filed.hash,
                "incident": filed.incident is not None, "entries": item.planned.entries, "at": record.location,
                **item.provenance_data()}  # fmt: skip
        incident = None if item.again else filed.incident  # a changed record's is written already (`_reserve`)
        outcome = filed.outcome
        if item.merge is not None:
            item.planned.decisions.update(item.merge.kept)
            if outcome is not None and _closed_with(item.merge.incident, outcome["runbook_id"]):
                outcome = None  # a person's close asked for the runbook's result: theirs stays
                item.planned.decisions["people_outcomes_kept"] += 1
        return Filing(item.id, record.source, data, incident, outcome, item.again)

    def _file(self, filings: Sequence[tuple[_Item, Filing]]) -> None:
        """Write the chunk's import records, outcomes and new incidents in one transaction, then count them. A new
        record's incident expects to be new: when one of its id was written meanwhile (by a person, or an import
        of a release before import records), each record on its own, that incident merged with it."""
        try:
            left = self.documents.file([filing for _, filing in filings], self.actor)
            done = [item for item, _ in filings]
        except StaleWriteError:
            done, left = [], set()
            for item, filing in filings:
                try:
                    left |= rewritten(partial(self._file_one, filing))
                    done.append(item)
                except OrgDroppedError:
                    raise  # the org was deleted while this import ran: it is over
                except GrandboError as error:
                    self.report.refuse(item.record.location, f"not filed: {error.message}")
        for item in done:
            if item.id in left and item.planned is not None:  # another's result of the runbook: theirs stays
                item.planned.decisions["people_outcomes_kept"] += 1
            self.hashes[item.record.source][item.id] = item.source.hash
            self.report.decisions.update(+item.planned.decisions if item.planned else Counter())
            self.report.updated += item.again
            self.report.imported += not item.again

    def _file_one(self, filing: Filing) -> set[str]:
        if filing.incident is not None and (doc := self.documents.incident(filing.record_id)) is not None:
            stored = read_record(Incident, doc, "incident")
            imported = Provenance(tuple(finding.id for finding in filing.incident.findings))
            incident = merged(stored, filing.incident, imported, ()).incident
            filing = replace(filing, incident=incident, expected=doc.version)
        return self.documents.file([filing], self.actor)


def _closed_with(incident: Incident, runbook_id: str) -> bool:
    """Whether a person's close of the incident asked for a result of the runbook (recorded, or still to be)."""
    recorded = incident.closed_outcome is not None and incident.closed_outcome.runbook_id == runbook_id
    return recorded or (incident.pending_outcome is not None and incident.runbook_used == runbook_id)


class _Seen:
    """The records this import has read, by incident id: the first one with an id is the one filed, in every run
    (a second with other content would silently replace it, and each run flip them back). Bounded: per record an
    id, a short hash and where it was read (~180 bytes: 100,000 records, 18 MB), as the import records' hashes
    `_Filer.hashes` holds for the source already are."""

    def __init__(self) -> None:
        self.first_at: dict[str, str] = {}  # incident id: its content hash's first 16 characters, then its location

    def first(self, record: HistoricIncident, report: HistoryReport) -> str | None:
        """The record's content hash when it is the first with its id in this import; else None, and the record
        counted: skipped when it is a copy of the first, refused naming both when its content differs."""
        digest = decide.content_hash(record)
        key = decide.incident_id(record.source, record.source_id)
        if (earlier := self.first_at.get(key)) is None:
            self.first_at[key] = digest[:16] + record.location
            return digest
        held, where = earlier[:16], earlier[16:]
        if held == digest[:16]:
            report.skipped += 1
            report.decisions["duplicates_skipped"] += 1
            return None
        report.refuse(record.location, (
            f"two records have id {record.source_id} ({where} and {record.location}) with different content (only "
            "the first is imported): give each its own id, or remove the copy"
        ))  # fmt: skip
        return None
