"""The effectiveness ledger as the analytics page reads it: its outcomes counted by the store, grouped by runbook, kind
and rating (`OrgDocuments.tally`), and only the successes that have a time to mitigate read, a few values each, no
document parsed but the odd few an older release left (`ledger_odd`). The page read every outcome whole into the org's
snapshot (`operations.Snapshot`): its first view in a fresh process took 3.4-4.4 s (2.2-2.7 s of CPU, holding the GIL)
at 100,000 outcomes, another org's recall p95 15 -> 189 ms meanwhile (Postgres; probe 23b saw 4.9-9 s). The records it
gives are `summarize`'s, to the bit: the same counts, the same durations in the same order (`effectiveness.record`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from grandbo.names import service_name
from grandbo.ports import OrgDocuments
from grandbo.tiers.effectiveness import Effectiveness, OutcomeKind, record
from grandbo.tiers.ledger_odd import tallied
from grandbo.tiers.ledger_records import kind_of
from grandbo.tiers.operations import OUTCOMES
from grandbo.tiers.tallied_values import moment, number

COUNTED = {OutcomeKind.SUCCEEDED.value: 0, OutcomeKind.FAILED.value: 1, OutcomeKind.RECOMMENDED.value: 2}
UP, DOWN = 3, 4  # a rating's place in a runbook's counts
BY = [("runbook_id",), ("kind",), ("rating",)]
VALUES = [("runbook_id",), ("service",), ("incident_id",), ("at",), ("time_to_mitigate_s",)]


class Mitigated(NamedTuple):
    """A success with a time to mitigate (a tuple: 40,000 of them are made for a view)."""

    at: datetime
    doc_id: str
    runbook_id: str
    service: str | None
    incident_id: str | None
    seconds: float


@dataclass(frozen=True)
class LedgerTally:
    outcomes: int
    counts: dict[str, list[int]]  # runbook -> successes, failures, recommendations, thumbs up, thumbs down
    mitigated: list[Mitigated]  # oldest first (their time, then their id), as a runbook's outcomes are
    durations: dict[str, list[float]]  # runbook -> its `mitigated`' seconds, in that order

    def effectiveness(self, runbook_id: str) -> Effectiveness:
        """The runbook's record over every service, as `summarize` of its outcomes gives it."""
        counts = self.counts.get(runbook_id, [0, 0, 0, 0, 0])
        return record(runbook_id, None, (counts[0], counts[1], counts[2], counts[UP], counts[DOWN]),
                      self.durations.get(runbook_id, []))  # fmt: skip


def tally(documents: OrgDocuments) -> LedgerTally:
    """The org's ledger counted (`LedgerTally`), in one read of the store. A document that is no outcome (no runbook
    id, a kind of none of OutcomeKind: `ledger_odd`) is left out, as a whole read leaves out one it cannot read; a kind
    and a service as `Outcome` reads them (" Succeeded ", " SVC-A ")."""
    groups, rows = tallied(documents, OUTCOMES, BY, {("kind",): OutcomeKind.SUCCEEDED.value}, VALUES)
    counts: dict[str, list[int]] = {}
    total = 0
    for runbook_id, stored, rating, count in groups:
        if not isinstance(runbook_id, str) or (kind := kind_of(stored)) is None:
            continue
        held = counts.setdefault(runbook_id, [0, 0, 0, 0, 0])
        total += count
        if kind.value in COUNTED:
            held[COUNTED[kind.value]] += count
        elif kind is OutcomeKind.RATED and (thumb := number(rating)):
            held[UP if thumb > 0 else DOWN] += count
    mitigated = sorted(  # by time, then id: the ledger's order
        Mitigated(when, doc_id, runbook_id, None if service is None else service_name(service), incident_id, seconds)
        for doc_id, runbook_id, service, incident_id, at, value in rows
        if isinstance(runbook_id, str) and (when := moment(at)) is not None and (seconds := number(value) or 0) > 0
    )
    durations: dict[str, list[float]] = {}
    for success in mitigated:
        durations.setdefault(success.runbook_id, []).append(success.seconds)
    return LedgerTally(total, counts, mitigated, durations)
