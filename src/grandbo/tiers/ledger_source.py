"""An org's ledger as its snapshot holds it (`operations.Snapshot`): what recall and a runbook's record need of a few
runbooks, their outcomes counted by the store, never every outcome read. Recall read the whole ledger into the
snapshot the first time in a process: 4.4-8.0 s at 100,000 outcomes on a loaded machine (2.0-2.3 s of CPU holding
the GIL, every other org's recall waiting). Now it counts the outcomes of the runbooks among its candidates
(`OrgDocuments.tally` by ref, on its index: a GROUP BY by runbook, service and kind; 0.40-0.74 s, 9-290 ms of it
CPU), kept with the snapshot's ledger; an outcome written has only the runbooks it named counted again
(`LedgerSource.carried`), an erasure all of them. Win rates and their explanations are the summaries' to the bit:
the same counts, the same arithmetic (`win_rates`); a runbook's record is `summarize`'s (`ledger_records`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from grandbo.names import service_name
from grandbo.ports import OrgDocuments
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.tiers.effectiveness import OutcomeKind, posterior
from grandbo.tiers.ledger_odd import tallied
from grandbo.tiers.ledger_records import NEVER as UNCOUNTED
from grandbo.tiers.ledger_records import Counted, counted

MIN_SERVICE_RESULTS = DEFAULT_POLICY.rerank.min_service_results  # the ranking policy's
# Outcomes written between two snapshots of which the runbooks each one ever named are found (a read of its history
# each), so that the other runbooks' counts are kept; past it (an import) every runbook is counted again when asked.
FEW_WRITES = 32
BY = [("runbook_id",), ("service",), ("kind",)]
Results = tuple[int, int]  # successes, failures


@dataclass(frozen=True)
class Tried:
    """A runbook's results counted, on every service and on each its outcomes name (any kind; in name order)."""

    results: Results
    on: dict[str, Results]

    def of(self, service: str | None) -> Results:
        """Its results on `service` (every service: None), as `Snapshot.effectiveness` counts them: on a service none
        of its outcomes names as it is kept (`service_name`), none."""
        return self.results if service is None else self.on.get(service, (0, 0))


NEVER = Tried((0, 0), {})


def tried(documents: OrgDocuments, collection: str, runbook_ids: Sequence[str]) -> dict[str, Tried]:
    """The results of each of `runbook_ids`, counted by the store in one read of their outcomes (sought by ref, on its
    index; none parsed but the odd few: `ledger_odd`). A document no outcome could be read from (no runbook id, a kind
    of none of OutcomeKind, a service that is no text) is left out, as the whole read leaves out one it cannot read;
    services are compared as they are kept (`service_name`), as reading an outcome keeps them."""
    counts: dict[str, tuple[list[int], dict[str, list[int]]]] = {rid: ([0, 0], {}) for rid in runbook_ids}
    groups, _ = tallied(documents, collection, BY, {}, (), refs=list(counts))
    for runbook_id, service, kind, count in groups:
        held = counts.get(runbook_id) if isinstance(runbook_id, str) else None
        try:
            known = OutcomeKind(kind)
        except ValueError:
            continue
        if held is None or not (service is None or isinstance(service, str)):
            continue
        at = {OutcomeKind.SUCCEEDED: 0, OutcomeKind.FAILED: 1}.get(known)
        name = service_name(service) if service else None
        if name:  # a service of the runbook's (those of no name, "" included, are on none)
            on = held[1].setdefault(name, [0, 0])
            if at is not None:
                on[at] += count
        if at is not None:
            held[0][at] += count
    return {rid: Tried((total[0], total[1]), {name: (c[0], c[1]) for name, c in sorted(on.items())})
            for rid, (total, on) in counts.items()}  # fmt: skip


def win_rates(
    runbook_ids: Iterable[str], services: Sequence[str], results: Callable[[str, str | None], Results]
) -> dict[str, tuple[float, str]]:
    """Runbook id -> (win rate, explanation) from each runbook's `results` (on a service; None: every service): on
    the first of `services` where it has enough results (MIN_SERVICE_RESULTS), else on every service."""
    rates: dict[str, tuple[float, str]] = {}
    for runbook_id in dict.fromkeys(runbook_ids):
        (successes, failures), scope = results(runbook_id, None), "all services"
        # A runbook never tried anywhere was never tried on a service either: its answer is the prior whatever
        # the services (a summary per pair took most of a re-ranked recall over a corpus of untried runbooks).
        for service in services if successes + failures else ():
            specific = results(runbook_id, service)
            if sum(specific) >= MIN_SERVICE_RESULTS:
                (successes, failures), scope = specific, service
                break
        mean, (low, high) = posterior(successes, failures)
        rate = round(mean, 4)  # as `effectiveness.record` keeps it
        if successes + failures == 0:
            rates[runbook_id] = (rate, f"{runbook_id}: never tried (prior)")
        else:
            rates[runbook_id] = (rate, f"{runbook_id}: {successes}/{successes + failures} succeeded ({scope}), win "
                                       f"rate {rate:.2f} [{low:.2f}, {high:.2f}]")  # fmt: skip
    return rates


class LedgerSource:
    """One snapshot's ledger (kept by the snapshots made while no outcome is written or erased): the runbooks'
    results (`tried`, recall's) and records (`counted`, a runbook's record's) counted by the store."""

    def __init__(self, documents: OrgDocuments, collection: str, version: int | None = None) -> None:
        self._documents, self._collection = documents, collection
        self._version = version  # the collection's version its snapshot was made at, where known (`tried`)
        self._counting = threading.Lock()
        self._tried: dict[str, Tried] = {}
        self._at: dict[str, int] = {}  # the version each runbook's `_tried` was counted at, where known
        self._counted: dict[str, Counted] = {}

    def carried(self, documents: OrgDocuments, after: int, now: int) -> LedgerSource:
        """The source of the next snapshot, of outcomes written since version `after`, keeping this one's counts and
        records of the runbooks none of them named, in any of its events (before a write, as written, or withdrawn: a
        result moved to another runbook changes both); the results of those they named, when each is an outcome new
        since they were counted, with those outcomes added (`_added`: a thumbs-up counted the runbook's 5,000 outcomes
        again, 73-115 ms of the next recall on Postgres). All counted again when asked, past FEW_WRITES writes or
        when a written outcome's history cannot be read."""
        fresh = LedgerSource(documents, self._collection, now)
        held, records = dict(self._tried), dict(self._counted)
        since = documents.changed(self._collection, after, FEW_WRITES) if held or records else None
        if since is not None:
            docs, gone = since
            named: set[object] = set()
            written: list[tuple[str | None, list[dict[str, Any]]]] = []  # each one's ref now, and its history
            refs = {doc.doc_id: doc.ref for doc in docs}
            for doc_id in [*gone, *refs]:
                events = documents.history(self._collection, doc_id)
                if not events:  # a write leaves an event: one not found could have been any runbook's
                    return fresh
                named.update(event["data"].get("runbook_id") for event in events if isinstance(event["data"], dict))
                written.append((refs.get(doc_id), events))
            fresh._tried = {runbook_id: held[runbook_id] for runbook_id in held if runbook_id not in named}
            fresh._at = {runbook_id: self._at[runbook_id] for runbook_id in fresh._tried if runbook_id in self._at}
            for runbook_id in [runbook_id for runbook_id in held if runbook_id in named]:
                added = _added(held[runbook_id], runbook_id, self._at.get(runbook_id), written, now)
                if added is not None:
                    fresh._tried[runbook_id], fresh._at[runbook_id] = added, now
            fresh._counted = {runbook_id: records[runbook_id] for runbook_id in records if runbook_id not in named}
        return fresh

    def tried(self, runbook_ids: Iterable[str]) -> dict[str, Tried]:
        """The results of these runbooks: those not counted yet, counted by the store in one read, then kept. One
        count at a time: the org's concurrent first recalls wait for it rather than each counting the same."""
        wanted = list(dict.fromkeys(runbook_ids))
        if any(runbook_id not in self._tried for runbook_id in wanted):
            with self._counting:
                missing = [runbook_id for runbook_id in wanted if runbook_id not in self._tried]
                if missing:
                    # The version, the count and the version again, in one transaction; the version before is the
                    # snapshot's where it is known (its stamp was read just before, by a first recall).
                    with self._documents.reading():
                        version = self._version
                        if version is None:
                            version = self._documents.version([self._collection])
                        found = tried(self._documents, self._collection, missing)
                        exact = self._documents.version([self._collection]) == version  # none written meanwhile
                    self._tried.update(found)
                    if exact:
                        self._at.update(dict.fromkeys(found, version))
        return {runbook_id: self._tried.get(runbook_id, NEVER) for runbook_id in wanted}

    def counted(self, runbook_ids: Iterable[str]) -> dict[str, Counted]:
        """The records of these runbooks (`ledger_records.counted`): those not counted yet, counted by the store in one
        read, then kept; one count at a time, as `tried`."""
        wanted = list(dict.fromkeys(runbook_ids))
        if any(runbook_id not in self._counted for runbook_id in wanted):
            with self._counting:
                missing = [runbook_id for runbook_id in wanted if runbook_id not in self._counted]
                if missing:
                    self._counted.update(counted(self._documents, self._collection, missing))
        return {runbook_id: self._counted.get(runbook_id, UNCOUNTED) for runbook_id in wanted}


def _added(
    held: Tried, runbook_id: str, at: int | None, written: list[tuple[str | None, list[dict[str, Any]]]], now: int
) -> Tried | None:
    """`held` (the runbook's results counted at version `at`) with the outcomes `written` since (each one's ref, and
    its history) added, as of version `now`: when each of them is new since `at` (none of its events at or before
    it), none of its events is past `now`, and what names the runbook is text, its ref the runbook (as `tried`
    counts it); else None (counted again)."""
    if at is None or at >= now:
        return None
    results, on = list(held.results), {name: list(counts) for name, counts in held.on.items()}
    for ref, events in written:
        if events[0]["seq"] <= at or events[-1]["seq"] > now:
            return None
        data = events[-1]["data"]
        if not isinstance(data, dict) or data.get("runbook_id") != runbook_id:
            continue  # withdrawn, or another runbook's: none of it was counted here (new since `at`)
        service, kind = data.get("service"), data.get("kind")
        if ref != runbook_id or not (service is None or isinstance(service, str)) or not isinstance(kind, str):
            return None
        try:
            known = OutcomeKind(kind)
        except ValueError:
            continue
        place = {OutcomeKind.SUCCEEDED: 0, OutcomeKind.FAILED: 1}.get(known)
        name = service_name(service) if service else None
        if name:
            counts = on.setdefault(name, [0, 0])
            if place is not None:
                counts[place] += 1
        if place is not None:
            results[place] += 1
    return Tried((results[0], results[1]), {name: (c[0], c[1]) for name, c in sorted(on.items())})
