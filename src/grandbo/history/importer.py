"""The importer: a reader's records filed through the org handle, in bounded chunks, as an update keyed by
(source, source id).

For each chunk of `CHUNK` records: one read of the entries their ids name, one `remember_many` of the entries
that are new, one transaction of documents (incidents, outcomes, import records). A record whose content hash is
the one its import record holds is unchanged and writes nothing; one whose hash differs is an update: its
entries that changed are corrected (the old version stays in the history, the reason names the import), those it
no longer has are retired, its incident document is written again (its history keeps the old one). The import
record is written last, after its entries, so an import killed halfway is resumed by running it again: a record
without its import record is filed again, and its entries already written are found and left alone.

Within one import the first record with an id is the one filed: a later one with the same id is skipped when it is
an exact copy, and refused, naming both places, when its content differs (`_Seen`), so a copied post-mortem
template or a duplicated export page never replaces another incident, and every run keeps the same one.

A part an import retired because its record no longer had it (a thinner export: a Jira search without
`fields=*all`, a PagerDuty export without its notes) is filed again when a later import's record has it again: as a
new entry, `<its id>@2` (then `@3`...: the log has no event that makes a retired entry active again), which the
import record, and the incident for a finding, then name for the role. A part a person retired, or purged, stays so.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ValidationError

from grandbo.errors import GrandboError, InvalidInputError, OrgDroppedError, StoreFullError, StoreUnavailableError
from grandbo.history import decide
from grandbo.history.filing import Filed, file_record
from grandbo.history.record import HistoricIncident, Reader, Refusal, Skipped
from grandbo.model import Entry, EventType, NewEntry, Status
from grandbo.tiers.imported import Filing, Heartbeat, Held, Imported

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)

# Records held at once, whatever the file's size. A chunk's entries, then its documents, are written in one transaction
# each, holding the store's write lock that every organization's writes wait for: 500 held it up to half a second.
CHUNK = 100
MAX_LISTED = 1000  # refusals listed in the report; the rest are counted (`refused_more`)
MAX_RESTORES = 100  # a part dropped and filed again more often than this is left retired (each time costs a read)
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
) -> HistoryReport:
    """File every record `reader` reads at `path` into `memory` (see the module); `dry_run` writes nothing and
    reports what would change. `progress(records read, total or None)` is called after every chunk."""
    report = HistoryReport(reader.name, dry_run=dry_run)
    filer = _Filer(memory, report, actor, dry_run)
    if not dry_run:  # one import of an org at a time, its lease renewed as it goes; a dry run writes nothing
        filer.lease = filer.documents.heartbeat(filer.documents.begin(actor), actor)
    try:
        _import(reader, path, mapping, filer, report, progress, total)
    except KeyboardInterrupt as stop:  # Ctrl-C: what was filed is kept, and the caller can say how far it got
        raise Interrupted(report) from stop
    finally:
        if filer.lease is not None:
            filer.documents.end(filer.lease.stop(), actor)
    log.info("history.imported", org_id=memory.org, **{k: v for k, v in report.to_dict().items() if k != "refused"})
    return report


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during an import, with the report of what was done before it. What a chunk had written is kept (its
    records' import records are written last), so the same import run again resumes: the records filed before are
    unchanged by their hash and written again nowhere."""

    def __init__(self, report: HistoryReport) -> None:
        super().__init__()
        self.report = report


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


class _Filer:
    """Files chunks of records for one import (see the module)."""

    def __init__(self, memory: OrgMemory, report: HistoryReport, actor: str, dry_run: bool) -> None:
        self.memory, self.report, self.actor, self.dry_run = memory, report, actor, dry_run
        self.documents = Imported(memory.incidents)
        self.topology = memory.catalog.topology()  # a vendor's name of a service (an alias) filed as the catalog's
        self.hashes: dict[str, dict[str, str]] = {}  # by source: every record imported before, with its hash
        self.seen = _Seen()
        self.lease: Heartbeat | None = None  # what renews the org's import lease this import holds

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
        held = {filed.incident_id: self.documents.held(filed.incident_id)
                for record, filed in chunk if filed.incident_id in self.hashes[record.source]}  # fmt: skip
        # Entries are read only for records imported before (rare); a new record's entries are written as they
        # are, and one left by an import killed halfway makes the store refuse the batch: `_remember` sorts it out.
        ids = [entry.id for _, filed in chunk if filed.incident_id in held for entry in filed.entries.values()]
        ids += [entry_id for kept in held.values() if kept for entry_id in kept.entries.values()]
        wanted = [entry_id for entry_id in dict.fromkeys(ids) if entry_id]
        existing = self.memory.get_many(wanted) if wanted else {}  # a read brings the org's search index up to date
        fresh: list[tuple[Filed, NewEntry]] = []
        plans = []
        for record, filed in chunk:
            plans.append((record, filed, self._plan(filed, held.get(filed.incident_id), existing, fresh)))
        refused = self._remember(fresh)
        filings = []
        for record, filed, (entries, update) in plans:
            if filed.incident_id in refused:
                self.report.refuse(record.location, refused[filed.incident_id])
                continue
            try:
                entries.update(update())
            except OrgDroppedError:
                raise
            except GrandboError as error:
                self.report.refuse(record.location, f"not updated: {error.message}")
                continue
            data = {"source": record.source, "source_id": record.source_id, "url": record.url, "hash": filed.hash,
                    "incident": filed.incident is not None, "entries": entries, "at": record.location}  # fmt: skip
            again = filed.incident_id in self.hashes[record.source]
            filings.append(Filing(filed.incident_id, record.source, data, filed.incident, filed.outcome, again))
            self.hashes[record.source][filed.incident_id] = filed.hash
            self.report.updated += again
            self.report.imported += not again
        self.documents.file(filings, self.actor)

    def _plan(
        self, filed: Filed, held: Held | None, existing: dict[str, Entry], fresh: list[tuple[Filed, NewEntry]]
    ) -> tuple[dict[str, str], Callable[[], dict[str, str]]]:
        """The entry id of each role that needs no write now (fresh ones are queued in `fresh`), and the update to
        run after the fresh entries are written (corrections and retirements, rare): it returns their ids."""
        entries: dict[str, str] = {}
        corrections: list[tuple[str, str, NewEntry]] = []
        mapped = held.entries if held else {}
        for role, entry in filed.entries.items():
            tracked = mapped.get(role) or entry.id
            assert tracked is not None
            current = self._current(tracked, existing)
            if current is None and tracked in existing:
                restored = self._restored(filed.incident_id, entry, self._end(tracked, existing))
                if restored is None:
                    self.report.decisions["entries_left_retired"] += 1  # retired by a person, or purged: stays so
                    continue
                entry, current = restored
                self.report.decisions["entries_restored"] += 1
                if filed.incident is not None and entry.id and role in filed.incident.memory:
                    # A finding's: else a close's sync, finding the old entry retired, would write the finding again.
                    filed.incident.memory[role] = entry.id
            assert entry.id is not None
            if current is None:
                fresh.append((filed, entry))
                entries[role] = entry.id
            elif self._holds(current, entry):
                entries[role] = current.id
            else:
                corrections.append((role, current.id, entry))
        dropped = [entry_id for role, entry_id in mapped.items() if role not in filed.entries]

        def update() -> dict[str, str]:
            done = {}
            reason = f"re-import of {filed.incident_id}: the source's record changed"
            for role, entry_id, entry in corrections:
                changes = entry.model_dump(include={"title", "body", "kind", "tags", "services", "severity", "meta"})
                if entry.occurred_at is not None:
                    changes["occurred_at"] = entry.occurred_at
                done[role] = self.memory.correct(entry_id, changes, reason=reason, actor=self.actor).id
            for entry_id in dropped:
                current = self._current(entry_id, self.memory.get_many([entry_id]))
                if current is not None:
                    self.memory.retire(current.id, reason=_dropped(filed.incident_id), actor=self.actor)
            return done

        return entries, update

    def _holds(self, current: Entry, entry: NewEntry) -> bool:
        """Whether `current` holds `entry` as the store would keep it (masked). One the org's masking refuses (too
        long once masked, its own patterns too slow) is not held: its correction refuses it in turn, and the
        record is refused, not the import."""
        try:
            return _same(current, self.memory.redact([entry])[0])
        except InvalidInputError:
            return False

    def _current(self, entry_id: str, existing: dict[str, Entry]) -> Entry | None:
        """The active entry `entry_id` is or was corrected into, or None."""
        entry = self._end(entry_id, existing)
        return entry if entry is not None and entry.status is Status.ACTIVE else None

    def _end(self, entry_id: str, existing: dict[str, Entry]) -> Entry | None:
        """The entry `entry_id` is or was last corrected into, whatever its status; None when there is none."""
        entry = existing.get(entry_id)
        seen = set()
        while entry is not None and entry.status is Status.SUPERSEDED and entry.superseded_by not in seen:
            seen.add(entry.id)
            entry = self.memory.find(entry.superseded_by) if entry.superseded_by else None
        return entry

    def _restored(
        self, incident_id: str, entry: NewEntry, retired: Entry | None
    ) -> tuple[NewEntry, Entry | None] | None:
        """When the part was retired by an import for being gone from its record: `entry` under the id it is filed
        again under, and the active entry already there (written by an import killed before its import record) or
        None. None when a person retired it or it was purged: that stays. Only retired entries come here (rare):
        their history says who retired them, and each id tried is one read."""
        assert entry.id is not None
        for number in range(2, MAX_RESTORES + 2):
            if retired is None or not self._dropped_here(incident_id, retired):
                return None
            candidate = _again(entry.id, number)
            found = self.memory.find(candidate)
            if found is None:
                return entry.model_copy(update={"id": candidate}), None
            retired = self._end(candidate, {candidate: found})
            if retired is not None and retired.status is Status.ACTIVE:
                return entry.model_copy(update={"id": candidate}), retired
        return None

    def _dropped_here(self, incident_id: str, entry: Entry) -> bool:
        """Whether `entry` was last retired by an import of `incident_id` because the record no longer had its part
        (by its reason, not its actor: the CLI's imports write as `import`, the REST route's as `api`, as people's
        writes do); a person's retirement, or a purge after it, is their word and stays."""
        last = self.memory.history(entry.id)[-1:]
        reason = last[0].payload.get("reason") if last and last[0].type is EventType.RETIRED else None
        return reason == _dropped(incident_id)

    def _remember(self, fresh: Sequence[tuple[Filed, NewEntry]]) -> dict[str, str]:
        """Write the fresh entries in one transaction; when the store refuses the batch, record by record, so one
        bad record costs only itself. Return the records refused, with the reason."""
        refused: dict[str, str] = {}
        if not fresh:
            return refused
        try:
            self.memory.remember_many([entry for _, entry in fresh], actor=self.actor)
            return refused
        except (StoreUnavailableError, StoreFullError, OrgDroppedError):
            raise  # every later record would fail alike: stop (a rerun resumes; a dropped org's import is over)
        except Exception as error:
            log.info("history.batch_refused", error=f"{type(error).__name__}: {error}"[:300])
        by_record: dict[str, list[NewEntry]] = {}
        for filed, entry in fresh:
            by_record.setdefault(filed.incident_id, []).append(entry)
        for record_id, entries in by_record.items():
            try:
                self.memory.remember_many(_absent(self.memory, entries), actor=self.actor)
            except (StoreUnavailableError, StoreFullError, OrgDroppedError):
                raise
            except Exception as error:
                message = error.message if isinstance(error, GrandboError) else f"{type(error).__name__}: {error}"
                refused[record_id] = f"refused by the store: {message[:300]}"
        return refused


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


def _dropped(incident_id: str) -> str:
    """The reason an import retires an entry with: its record no longer has the part (`_Filer._dropped_here`)."""
    return f"re-import of {incident_id}: the source's record changed (it no longer has this part)"


def _again(entry_id: str, number: int) -> str:
    """The id a part retired by an import is filed again under the `number`th time: `<id>@<number>`; an id that
    would pass the 128 characters an id may have is cut, with a hash of the whole id, so two cut alike differ."""
    suffix = f"@{number}"
    if len(entry_id) + len(suffix) <= 128:
        return entry_id + suffix
    digest = hashlib.sha256(entry_id.encode()).hexdigest()[:12]
    return f"{entry_id[: 128 - len(suffix) - 13]}.{digest}{suffix}"


def _absent(memory: OrgMemory, entries: Iterable[NewEntry]) -> list[NewEntry]:
    listed = list(entries)
    held = memory.get_many([entry.id for entry in listed if entry.id])
    return [entry for entry in listed if entry.id not in held]


def _same(entry: Entry, wanted: NewEntry) -> bool:
    """Whether a stored entry holds what the record would file now (its time only when the record knows it)."""
    fields = ("title", "body", "kind", "tags", "services", "severity", "meta")
    same = all(getattr(entry, name) == getattr(wanted, name) for name in fields)
    return same and (wanted.occurred_at is None or entry.occurred_at == wanted.occurred_at)
