"""An organization's ledger as recall, the runbook records and triage read it (`operations.Snapshot.outcomes`): every
outcome by runbook, oldest first, and the services each runbook's outcomes name. After a write only the outcomes
written since are placed (`LedgerView.applied`); sorting and grouping every outcome again after each thumbs-up took
the next recall from 6 to 328 ms at 100,000 outcomes (probe 19, F5)."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter, itemgetter

from grandbo.tiers.effectiveness import Outcome

Key = tuple[datetime, str]  # an outcome's place: its time, then its document id (the store's order of a tie)
SHARDS = 64  # where each outcome is, in this many dicts: a write copies those of the outcomes it changed, not all
FEW = 16  # a runbook's changes placed one by one up to this many; past it, its list is merged whole once


def _shard(doc_id: str) -> int:
    return hash(doc_id) % SHARDS


def _services(lines: Sequence[Outcome]) -> dict[str, None]:
    return dict.fromkeys(filter(None, map(attrgetter("service"), lines)))


@dataclass(frozen=True)
class LedgerView:
    """Never changed once made (a snapshot's readers hold it, and two threads may each bring it up to date):
    `applied` makes a new one that shares every runbook's list the changes did not touch."""

    by_runbook: dict[str, list[Outcome]]  # oldest first, by Key; the runbooks in the order of their oldest outcome
    services: dict[str, dict[str, None]]  # runbook -> the services its outcomes name, in their order (none: absent)
    keys: dict[str, list[Key]]  # each runbook's outcomes' keys, beside `by_runbook`
    where: tuple[dict[str, tuple[str, Key]], ...]  # document id -> its runbook and key, in SHARDS dicts

    @classmethod
    def made(cls, items: Iterable[tuple[str, Outcome]]) -> LedgerView:
        """The view of these (document id, outcome), made whole."""
        keys: dict[str, list[Key]] = {}
        lines: dict[str, list[Outcome]] = {}
        where: tuple[dict[str, tuple[str, Key]], ...] = tuple({} for _ in range(SHARDS))
        for doc_id, outcome in sorted(items, key=lambda item: (item[1].at, item[0])):
            key = (outcome.at, doc_id)
            keys.setdefault(outcome.runbook_id, []).append(key)
            lines.setdefault(outcome.runbook_id, []).append(outcome)
            where[_shard(doc_id)][doc_id] = (outcome.runbook_id, key)
        services = {runbook_id: found for runbook_id, held in lines.items() if (found := _services(held))}
        return cls(lines, services, keys, where)

    def applied(self, changed: Mapping[str, Outcome], gone: Iterable[str]) -> tuple[LedgerView, set[str]]:
        """This view with `changed` (document id -> the outcome as it is now) in place and `gone` taken out, and the
        runbooks whose outcomes changed (their summaries are stale); equal to `made` of the outcomes as they are now.
        Applying a change again changes nothing (a write landing between the stamp and the read is read twice)."""
        where = list(self.where)
        copied: set[int] = set()
        removed: dict[str, set[Key]] = {}
        added: dict[str, list[tuple[Key, Outcome]]] = {}

        def shard(doc_id: str) -> dict[str, tuple[str, Key]]:
            at = _shard(doc_id)
            if at not in copied:
                where[at] = dict(where[at])
                copied.add(at)
            return where[at]

        for doc_id in [*gone, *changed]:  # an outcome changed leaves its place (perhaps its runbook) first
            if doc_id in where[_shard(doc_id)]:
                runbook_id, key = shard(doc_id).pop(doc_id)
                removed.setdefault(runbook_id, set()).add(key)
        for doc_id, outcome in changed.items():
            key = (outcome.at, doc_id)
            shard(doc_id)[doc_id] = (outcome.runbook_id, key)
            added.setdefault(outcome.runbook_id, []).append((key, outcome))
        keys, lines, services = dict(self.keys), dict(self.by_runbook), dict(self.services)
        reorder = False
        for runbook_id in {*removed, *added}:
            held_keys, held = keys.get(runbook_id, []), lines.get(runbook_id, [])
            out, new = removed.get(runbook_id, set()), sorted(added.get(runbook_id, []), key=itemgetter(0))
            if len(out) + len(new) <= FEW:
                fresh_keys, fresh = list(held_keys), list(held)
                for key in out:
                    at = bisect.bisect_left(fresh_keys, key)
                    del fresh_keys[at], fresh[at]
                for key, outcome in new:
                    at = bisect.bisect_left(fresh_keys, key)
                    fresh_keys.insert(at, key)
                    fresh.insert(at, outcome)
            else:  # two sorted runs merged, not one insertion each
                kept = [(key, outcome) for key, outcome in zip(held_keys, held, strict=True) if key not in out]
                merged = list(heapq.merge(kept, new, key=itemgetter(0)))
                fresh_keys, fresh = [key for key, _ in merged], [outcome for _, outcome in merged]
            reorder = reorder or fresh_keys[:1] != held_keys[:1]  # its oldest outcome places the runbook
            if fresh:
                keys[runbook_id], lines[runbook_id] = fresh_keys, fresh
            else:
                del keys[runbook_id], lines[runbook_id]
            # Only outcomes newer than all it held (a thumbs-up): its services, then theirs; else read from them all.
            appended = not out and bool(held_keys) and new[0][0] > held_keys[-1]
            found = {**services.get(runbook_id, {}), **_services([o for _, o in new])} if appended else _services(fresh)
            if found:
                services[runbook_id] = found
            else:
                services.pop(runbook_id, None)
        if reorder:
            order = sorted(keys, key=lambda runbook_id: keys[runbook_id][0])
            keys, lines = {r: keys[r] for r in order}, {r: lines[r] for r in order}
        return LedgerView(lines, services, keys, tuple(where)), {*removed, *added}

    def of(self, runbook_ids: Sequence[str]) -> list[Outcome]:
        """The outcomes of these runbooks, oldest first (by Key, as the store's read sorted by time gave them)."""
        held = [runbook_id for runbook_id in dict.fromkeys(runbook_ids) if runbook_id in self.keys]
        if len(held) <= 1:
            return [outcome for runbook_id in held for outcome in self.by_runbook[runbook_id]]
        runs = [zip(self.keys[runbook_id], self.by_runbook[runbook_id], strict=True) for runbook_id in held]
        return [outcome for _, outcome in heapq.merge(*runs, key=itemgetter(0))]

    def get(self, doc_id: str) -> Outcome | None:
        """The outcome stored under `doc_id`, or None: a look-up, not a read of any runbook's outcomes."""
        found = self.where[_shard(doc_id)].get(doc_id)
        if found is None:
            return None
        runbook_id, key = found
        return self.by_runbook[runbook_id][bisect.bisect_left(self.keys[runbook_id], key)]

    def ids(self, runbook_id: str) -> list[tuple[str, Outcome]]:
        """The runbook's outcomes with their document ids, oldest first."""
        pairs = zip(self.keys.get(runbook_id, []), self.by_runbook.get(runbook_id, []), strict=True)
        return [(key[1], outcome) for key, outcome in pairs]
