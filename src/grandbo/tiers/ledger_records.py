"""The records of a few runbooks counted by the store: what a runbook's record (`grandbo runbook stats`,
`GET /v1/runbooks`), the console's card and triage's plan read. Each read every outcome of the org whole into its
snapshot the first time in a process: ~2 s of CPU holding the GIL at 100,000 outcomes, every other
org's requests waiting. Now the outcomes of the runbooks named are counted by the store (`OrgDocuments.tally` by ref,
on its index: a GROUP BY by runbook, service, kind and rating, and a few values of each success read), none parsed.
The records are `summarize`'s, to the bit: the same counts, the same times to mitigate in the same order, through
the same arithmetic (`effectiveness.record`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from grandbo.names import service_name
from grandbo.ports import OrgDocuments
from grandbo.tiers.effectiveness import Effectiveness, OutcomeKind, record
from grandbo.tiers.ledger_odd import tallied
from grandbo.tiers.tallied_values import moment, number

BY = [("runbook_id",), ("service",), ("kind",), ("rating",)]
VALUES = [("runbook_id",), ("service",), ("at",), ("time_to_mitigate_s",)]
PLACE = {OutcomeKind.SUCCEEDED: 0, OutcomeKind.FAILED: 1, OutcomeKind.RECOMMENDED: 2}
UP, DOWN = 3, 4  # a rating's place in the counts
Counts = tuple[int, int, int, int, int]  # successes, failures, recommendations, thumbs up, thumbs down
NONE: Counts = (0, 0, 0, 0, 0)


@dataclass(frozen=True)
class Counted:
    """A runbook's outcomes counted: how many (of any kind), the counts on every service (None) and on each service
    its outcomes name (as `service_name` keeps it; "" one of them), and the times to mitigate of its successes,
    oldest first."""

    outcomes: int = 0
    counts: dict[str | None, Counts] = field(default_factory=dict)
    durations: dict[str | None, list[float]] = field(default_factory=dict)

    def effectiveness(self, runbook_id: str, service: str | None = None) -> Effectiveness:
        """Its record (on one service), as `summarize` of its outcomes gives it."""
        name = service_name(service) if service is not None else None
        return record(runbook_id, name, self.counts.get(name, NONE), self.durations.get(name, []))


NEVER = Counted()


def counted(documents: OrgDocuments, collection: str, runbook_ids: Sequence[str]) -> dict[str, Counted]:
    """The outcomes of each of `runbook_ids` counted by the store in one read (sought by ref, on its index; none parsed
    but the odd few: `ledger_odd`). A document no outcome could be read from (no runbook id, a kind of none of
    OutcomeKind, a service that is no text) is left out, as `ledger_source.tried` leaves it out; a time to mitigate as
    analytics reads it (`tallied_values`)."""
    wanted = list(dict.fromkeys(runbook_ids))
    if not wanted:
        return {}
    held: dict[str, tuple[list[int], dict[str | None, list[int]]]] = {rid: ([0], {}) for rid in wanted}
    groups, rows = tallied(documents, collection, BY, {("kind",): OutcomeKind.SUCCEEDED.value}, VALUES, refs=wanted)
    for runbook_id, service, kind, rating, count in groups:
        mine = held.get(runbook_id) if isinstance(runbook_id, str) else None
        known = kind_of(kind)
        if mine is None or known is None or not (service is None or isinstance(service, str)):
            continue
        mine[0][0] += count
        at = PLACE.get(known)
        if known is OutcomeKind.RATED and (thumb := number(rating)):
            at = UP if thumb > 0 else DOWN
        if at is None:
            continue
        name = service_name(service) if service is not None else None  # "" too: `summarize` compares it so
        for scope in (None, name) if name is not None else (None,):
            mine[1].setdefault(scope, [0, 0, 0, 0, 0])[at] += count
    durations: dict[str, dict[str | None, list[tuple[datetime, str, float]]]] = {rid: {} for rid in wanted}
    for doc_id, runbook_id, service, at, value in rows:
        mine = held.get(runbook_id) if isinstance(runbook_id, str) else None
        if mine is None or not (service is None or isinstance(service, str)):
            continue
        if (when := moment(at)) is None or (seconds := number(value) or 0) <= 0:
            continue
        name = service_name(service) if service is not None else None
        for scope in (None, name) if name is not None else (None,):
            durations[runbook_id].setdefault(scope, []).append((when, doc_id, seconds))
    return {
        rid: Counted(
            total[0],
            {scope: (c[0], c[1], c[2], c[3], c[4]) for scope, c in sorted(by.items(), key=_scope)},
            {scope: [seconds for *_, seconds in sorted(found)] for scope, found in durations[rid].items()},
        )
        for rid, (total, by) in held.items()
    }


def _scope(item: tuple[str | None, object]) -> tuple[bool, str]:
    return item[0] is not None, item[0] or ""


def kind_of(value: object) -> OutcomeKind | None:
    """The kind of outcome a stored value is (as `Outcome` reads it: whatever the case and the spaces), or None."""
    try:
        return OutcomeKind(value)  # type: ignore[arg-type]  # any stored value: None when it is no kind
    except ValueError:
        return None


def oldest(documents: OrgDocuments, collection: str, runbook_ids: Sequence[str]) -> dict[str, tuple[datetime, str]]:
    """The time and id of each runbook's oldest outcome (of those with one): the place that orders runbooks by their
    first outcome (`Ledger.of_incidents`). Their times read by the store (by ref, on its index), none parsed."""
    if not runbook_ids:
        return {}
    first: dict[str, tuple[datetime, str]] = {}
    _, rows = tallied(documents, collection, [("runbook_id",)], {}, [("runbook_id",), ("kind",), ("at",)],
                      refs=list(runbook_ids))  # fmt: skip
    wanted = set(runbook_ids)
    for doc_id, runbook_id, kind, at in rows:
        if runbook_id in wanted and kind_of(kind) is not None and (when := moment(at)) is not None:
            first[runbook_id] = min(first.get(runbook_id, (when, doc_id)), (when, doc_id))
    return first
