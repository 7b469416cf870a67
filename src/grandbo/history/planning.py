"""What a record's entries need when the importer files it: which are new (written together, one transaction a
chunk), which are held already, which changed (corrected) and which the record no longer has (retired), and, for a
part an import retired for being gone, the id it is filed again under (`<id>@2`, `@3`...: see the importer's
module). Reads only, but for `Planner.remember`, `Planner.correct_all` and `Planner.update`.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from grandbo.errors import (
    EntryStateError,
    GrandboError,
    InvalidInputError,
    OrgDroppedError,
    StoreFullError,
    StoreUnavailableError,
)
from grandbo.history.filing import Filed
from grandbo.model import Entry, EventType, NewEntry, Status
from grandbo.tiers.imported import Held

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)

MAX_RESTORES = 100  # a part dropped and filed again more often than this is left retired (each time costs a read)
ATTEMPTS = 5  # a correction or retirement of an entry another writer corrected meanwhile: followed this often


@dataclass
class Planned:
    """One record's entries: the entry id of each role that needs no write now, the new entries to write (`fresh`),
    and what to change after they are written (rare): the entries to correct (`corrections`: role, entry id, the
    entry wanted) and to retire (`dropped`), by `Planner.correct_all` and `Planner.update`."""

    incident_id: str
    entries: dict[str, str]
    fresh: list[NewEntry]
    corrections: list[tuple[str, str, NewEntry]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    decisions: Counter[str] = field(default_factory=Counter)

    @property
    def reason(self) -> str:
        return f"re-import of {self.incident_id}: the source's record changed"


class Planner:
    """Plans and writes the entries of an import's records (see the module)."""

    def __init__(self, memory: OrgMemory, actor: str) -> None:
        self.memory, self.actor = memory, actor

    def plan(self, filed: Filed, held: Held | None, existing: dict[str, Entry], kept: Iterable[str] = ()) -> Planned:
        """The plan of `filed`'s entries, given what the record's import record holds (`held`) and the entries as
        read (`existing`, by id). `kept`: roles whose entries are left as they are (a finding a person changed since
        the import: its entry follows the person's finding), neither corrected nor retired, still tracked."""
        kept = set(kept)
        decisions: Counter[str] = Counter()
        entries: dict[str, str] = {}
        fresh: list[NewEntry] = []
        corrections: list[tuple[str, str, NewEntry]] = []
        compared: list[tuple[str, Entry, NewEntry]] = []  # held already: the same, or corrected
        mapped = held.entries if held else {}
        for role, entry in filed.entries.items():
            if role in kept:
                if role in mapped:
                    entries[role] = mapped[role]
                continue
            tracked = mapped.get(role) or entry.id
            assert tracked is not None
            current = self._current(tracked, existing)
            if current is None and tracked in existing:
                restored = self._restored(filed.incident_id, entry, self._end(tracked, existing))
                if restored is None:
                    decisions["entries_left_retired"] += 1  # retired by a person, or purged: stays so
                    continue
                entry, current = restored
                decisions["entries_restored"] += 1
                if filed.incident is not None and entry.id and role in filed.incident.memory:
                    # A finding's: else a close's sync, finding the old entry retired, would write the finding again.
                    filed.incident.memory[role] = entry.id
            assert entry.id is not None
            if current is None:
                fresh.append(entry)
                entries[role] = entry.id
            else:
                compared.append((role, current, entry))
        for (role, current, entry), same in zip(compared, self._holds([(c, e) for _, c, e in compared]), strict=True):
            if same:
                entries[role] = current.id
            else:
                corrections.append((role, current.id, entry))
        dropped = [entry_id for role, entry_id in mapped.items() if role not in filed.entries and role not in kept]
        return Planned(filed.incident_id, entries, fresh, corrections, dropped, decisions)

    def correct_all(self, plans: Sequence[Planned]) -> None:
        """Make the corrections of every plan in one transaction (a chunk's: one per correction was two thirds of a
        re-import's time), each plan's entries then naming the entries corrected into. When the store refuses the
        batch (an entry corrected meanwhile by a close's sync or a person, a correction refused), nothing is
        written: `update` makes each plan's one record at a time, following such entries."""
        batch = [(plan, role, entry_id, entry) for plan in plans for role, entry_id, entry in plan.corrections]
        if not batch:
            return
        try:
            done = self.memory.correct_many(
                [(entry_id, _changes(entry), plan.reason) for plan, _, entry_id, entry in batch],
                actor=self.actor,
                carried=True,  # the names the source recorded, as the first import filed them
            )
        except (StoreUnavailableError, StoreFullError, OrgDroppedError):
            raise  # every later record would fail alike: stop; a rerun resumes
        except GrandboError as error:
            log.info("history.corrections_one_by_one", error=error.message[:300])
            return
        for (plan, role, _, _), corrected in zip(batch, done, strict=True):
            plan.entries[role] = corrected.id
        for plan in plans:
            plan.corrections = []

    def update(self, plan: Planned) -> None:
        """Make the plan's corrections `correct_all` left (each followed to the entry it was corrected into
        meanwhile) and its retirements; its entries then name the entries corrected into."""
        for role, entry_id, entry in plan.corrections:
            if (corrected := self._corrected(entry_id, entry, plan.reason)) is not None:
                plan.entries[role] = corrected
        plan.corrections = []
        for entry_id in plan.dropped:
            for attempt in range(ATTEMPTS):  # corrected meanwhile (a close's sync): its successor
                current = self._current(entry_id, self.memory.get_many([entry_id]))
                try:
                    if current is not None:
                        self.memory.retire(current.id, reason=dropped_reason(plan.incident_id), actor=self.actor)
                    break
                except EntryStateError:
                    if attempt + 1 == ATTEMPTS:
                        raise
        plan.dropped = []

    def _corrected(self, entry_id: str, entry: NewEntry, reason: str) -> str | None:
        """Correct `entry_id` into `entry`; the id of the entry that holds it then. One corrected meanwhile (a close's
        sync rewrote an imported finding's entry) is followed to its successor, compared and corrected again; one
        retired meanwhile stays so (None)."""
        for attempt in range(ATTEMPTS):
            try:
                return self.memory.correct(entry_id, _changes(entry), reason=reason, actor=self.actor, carried=True).id
            except EntryStateError:
                current = self._current(entry_id, self.memory.get_many([entry_id]))
                if current is None:
                    return None
                if self._holds([(current, entry)])[0]:
                    return current.id
                if attempt + 1 == ATTEMPTS:
                    raise
                entry_id = current.id
        raise AssertionError("unreachable")

    def taken(self, incident_id: str, finding_id: str) -> bool:
        """Whether the entry id of the incident's finding `finding_id` is someone else's than an import of it: a
        new finding of the source filed under it would correct their entry into the import's."""
        entry = self.memory.find(f"{incident_id}-{finding_id}")
        return entry is not None and not _filed_for(entry, incident_id)

    def _holds(self, pairs: Sequence[tuple[Entry, NewEntry]]) -> list[bool]:
        """Whether each stored entry holds its wanted one as the store would keep it (masked, all in one call). One
        the org's masking refuses (too long once masked, its own patterns too slow) is not held: its correction
        refuses it in turn, and the record is refused, not the import."""
        try:
            masked = self.memory.redact([entry for _, entry in pairs]) if pairs else []
        except InvalidInputError:
            return [False] if len(pairs) == 1 else [self._holds([pair])[0] for pair in pairs]
        return [_same(current, entry) for (current, _), entry in zip(pairs, masked, strict=True)]

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
            candidate = again(entry.id, number)
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
        return reason == dropped_reason(incident_id)

    def remember(self, fresh: Sequence[tuple[str, NewEntry]]) -> dict[str, str]:
        """Write the fresh entries (each with its record's incident id) in one transaction; when the store refuses
        the batch, record by record, so one bad record costs only itself. Return the records refused, with the
        reason."""
        refused: dict[str, str] = {}
        if not fresh:
            return refused
        try:
            self.memory.remember_many([entry for _, entry in fresh], actor=self.actor, carried=True)
            return refused
        except (StoreUnavailableError, StoreFullError, OrgDroppedError):
            raise  # every later record would fail alike: stop; a rerun resumes
        except Exception as error:
            log.info("history.batch_refused", error=f"{type(error).__name__}: {error}"[:300])
        by_record: dict[str, list[NewEntry]] = {}
        for record_id, entry in fresh:
            by_record.setdefault(record_id, []).append(entry)
        for record_id, entries in by_record.items():
            try:
                self.memory.remember_many(_absent(self.memory, entries), actor=self.actor, carried=True)
            except (StoreUnavailableError, StoreFullError, OrgDroppedError):
                raise
            except Exception as error:
                message = error.message if isinstance(error, GrandboError) else f"{type(error).__name__}: {error}"
                refused[record_id] = f"refused by the store: {message[:300]}"
        return refused


def dropped_reason(incident_id: str) -> str:
    """The reason an import retires an entry with: its record no longer has the part (`Planner._dropped_here`)."""
    return f"re-import of {incident_id}: the source's record changed (it no longer has this part)"


def again(entry_id: str, number: int) -> str:
    """The id a part retired by an import is filed again under the `number`th time: `<id>@<number>`; an id that
    would pass the 128 characters an id may have is cut, with a hash of the whole id, so two cut alike differ."""
    suffix = f"@{number}"
    if len(entry_id) + len(suffix) <= 128:
        return entry_id + suffix
    digest = hashlib.sha256(entry_id.encode()).hexdigest()[:12]
    return f"{entry_id[: 128 - len(suffix) - 13]}.{digest}{suffix}"


def _filed_for(entry: Entry, incident_id: str) -> bool:
    """Whether an import of `incident_id` wrote `entry` (its `meta.history` names the incident)."""
    history = entry.meta.get("history")
    return isinstance(history, dict) and history.get("incident_id") == incident_id


def _absent(memory: OrgMemory, entries: Iterable[NewEntry]) -> list[NewEntry]:
    listed = list(entries)
    held = memory.get_many([entry.id for entry in listed if entry.id])
    return [entry for entry in listed if entry.id not in held]


def _changes(entry: NewEntry) -> dict[str, Any]:
    """What a correction of an entry into `entry` gives (its time only when the record knows it)."""
    changes = entry.model_dump(include={"title", "body", "kind", "tags", "services", "severity", "meta"})
    if entry.occurred_at is not None:
        changes["occurred_at"] = entry.occurred_at
    return changes


def _same(entry: Entry, wanted: NewEntry) -> bool:
    """Whether a stored entry holds what the record would file now (its time only when the record knows it)."""
    fields = ("title", "body", "kind", "tags", "services", "severity", "meta")
    same = all(getattr(entry, name) == getattr(wanted, name) for name in fields)
    return same and (wanted.occurred_at is None or entry.occurred_at == wanted.occurred_at)
