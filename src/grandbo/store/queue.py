"""Which embed jobs one claim takes: round-robin across the organizations that have work, both backends.

A claim of `limit` jobs deals them like cards: one job from each org with ready work in turn, then round
again, until the claim is full or no org has more. So a small org's new job is in the first provider batch
of the next claim however large another org's backlog is, and a claim serves at most as many orgs as it
has jobs. The orgs go in name order starting after a cursor the store keeps between claims: after the
first org served when every org got a job (so the first place rotates), else after the last one served
(so the orgs a full claim left out are served first next time).

Each backend reads candidates through `fetch`, a batch of (org, how many, after which key) requests
answered from the outbox index in (available_at, job_id) order; it asks each org for an even share first
and tops up only the orgs that had more, so no claim reads a large backlog.

A job whose lease ran out lost its worker (killed, crashed, stuck past its lease, or proved gone: the worker's
`take_over`): the claim that deals it counts that as a failed attempt (`leasable`), so a text that ends every worker
that takes it stops after GRANDBO_EMBED_MAX_ATTEMPTS; it was leased again by each new worker, never counted, and
dealt into the first batch with other orgs' jobs. Such jobs are leased one group a claim, which the worker embeds
in a batch of its own, last: up to a provider batch of jobs lost once (`ports.LOST`: a deploy's kill comes back a
batch a claim), or one job lost twice in a row (`ports.LOST_AGAIN`: it was in the lost batch that ended a worker
again), alone; or up to a provider batch of jobs whose batch timed out twice in a row (`TIMED_OUT_TWICE`), each
embedded alone. One group only: should it end the worker, no other lost job of the claim is counted again untried.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from grandbo.pending_work import EMBED_MOST_SECONDS, lost_delay
from grandbo.ports import LOST, LOST_AGAIN, EmbedJob

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A ready job as the outbox index orders it within its org."""

    org_id: str
    key: tuple[Any, ...]  # (available_at, job_id): where the next read of this org resumes
    job_id: int
    attempts: int = 0
    lapsed: bool = False  # leased, and the lease ran out: its worker is gone
    # its last attempts lost their worker or timed out (`outbox_holders.LOSS_MARKS`), counted already: 1 (`ports.LOST`,
    # `embed_jobs.TIMED_OUT`), 2 or more (`LOST_AGAIN`); TIMED_OUT_TWICE: its batches timed out twice in a row
    # (`embed_jobs.TIMED_OUT_AGAIN`)
    lost: int = 0

    @property
    def alone(self) -> bool:
        """Embedded alone: lost again, or timed out twice (its lease ran out since: lost again)."""
        return self.lost >= 1 if self.lapsed else self.lost >= 2


TIMED_OUT_TWICE = 3
"""`Candidate.lost` of a job whose batch timed out twice in a row: embedded alone, as a job lost again is, but several
of them a claim (up to its lost batch), each in a provider call of its own: a timeout ends no worker, so the others are
not counted again untried should one be slow again, and a backlog of them drains a claim's budget at a time, not a job
a claim."""


def room_of(losses: int, lost_batch: int) -> int:
    """How many lost jobs a claim's group of `losses` takes: one lost again, else up to `lost_batch`."""
    return 1 if losses == 2 else max(1, lost_batch)


Fetch = Callable[[Mapping[str, tuple[int, tuple[Any, ...] | None]]], Mapping[str, Sequence[Candidate]]]


def rotated(orgs: Sequence[str], after: str | None) -> list[str]:
    """The orgs in name order, starting with the first one after `after` (wrapping round)."""
    ordered = sorted(set(orgs))
    if after is None:
        return ordered
    start = next((i for i, org in enumerate(ordered) if org > after), 0)
    return ordered[start:] + ordered[:start]


def gather(
    orgs: Sequence[str], limit: int, fetch: Fetch, keep: Callable[[Candidate], bool] | None = None
) -> dict[str, list[Candidate]]:
    """Enough candidates per org for a fair deal of `limit` jobs; with `keep`, only those it keeps.

    Every org still open (its last read came back full) is asked for an even share of what the claim
    still lacks. After each round every org holds min(its ready jobs, what the open orgs were asked in
    all), so once the claim is covered no deal can give an org more than it holds; a round that leaves it
    short has exhausted some org, so the rounds end. The rows `keep` passes over take no share: an org is
    asked for as many more as it had passed over (its lost jobs past the claim's lost group, `LostGroup`),
    so that its fresh jobs behind them are reached in a few rounds, not one round trip a row.
    """
    found: dict[str, list[Candidate]] = {org: [] for org in orgs}
    resume: dict[str, tuple[Any, ...] | None] = dict.fromkeys(orgs)
    skipped = dict.fromkeys(orgs, 0)
    more, total = list(orgs), 0
    while more and total < limit:
        share = -(-(limit - total) // len(more))
        asked = {org: share + skipped[org] for org in more}
        answers = fetch({org: (asked[org], resume[org]) for org in more})
        full = []
        for org in more:
            got = list(answers.get(org, ()))[: asked[org]]
            if got:
                resume[org] = got[-1].key
            kept = got if keep is None else [candidate for candidate in got if keep(candidate)]
            found[org].extend(kept)
            skipped[org] += len(got) - len(kept)
            total += len(kept)
            if len(got) == asked[org]:
                full.append(org)
        more = full
    return found


def deal(
    found: Mapping[str, Sequence[Candidate]], order: Sequence[str], limit: int
) -> tuple[list[Candidate], str | None]:
    """One job per org in `order` per round until `limit`; and the org the next claim starts after."""
    queues = [(org, list(found.get(org, ()))) for org in order if found.get(org)]
    dealt: list[Candidate] = []
    served: list[str] = []
    depth = 0
    while len(dealt) < limit and queues:
        for org, jobs in queues:
            if len(dealt) >= limit:
                break
            dealt.append(jobs[depth])
            if depth == 0:
                served.append(org)
        depth += 1
        queues = [(org, jobs) for org, jobs in queues if len(jobs) > depth]
    if not served:
        return dealt, None
    every = len(served) == len([org for org in order if found.get(org)])
    return dealt, served[0] if every else served[-1]


def fair_claim(
    orgs: Sequence[str], limit: int, fetch: Fetch, after: str | None, keep: Callable[[Candidate], bool] | None = None
) -> tuple[list[Candidate], str | None]:
    """The jobs one claim takes, in the order to embed them, and the cursor for the next claim (None: keep)."""
    order = rotated(orgs, after)
    if limit <= 0 or not order:
        return [], None
    return deal(gather(order, limit, fetch, keep), order, limit)


class LostGroup:
    """The lost jobs one claim may lease, as its candidates are read (`gather`'s `keep`): the first read decides
    the group, a batch of jobs lost once (up to `lost_batch`) or one lost again; the others are passed over, so they
    take no place of the claim's fresh jobs (they waited, place by place, one claim each). A job whose lease ran out
    is kept: the claim counts it, then deals again (`claim`)."""

    def __init__(self, lost_batch: int) -> None:
        self.lost_batch = max(1, lost_batch)
        self.losses = self.room = 0

    def keep(self, candidate: Candidate) -> bool:
        if candidate.lapsed or not candidate.lost:
            return True
        losses = candidate.lost
        if not self.losses:
            self.losses, self.room = losses, room_of(losses, self.lost_batch)
        if losses != self.losses or not self.room:
            return False
        self.room -= 1
        return True


@dataclass(frozen=True, slots=True)
class Lapsed:
    """A dealt job whose lease ran out: its attempt to count, the seconds before it is due again, and its error
    (`ports.LOST` the first time in a row, `ports.LOST_AGAIN` after)."""

    candidate: Candidate
    delay: float
    error: str


def leasable(
    chosen: Sequence[Candidate], max_attempts: int, retry_seconds: float, lost_batch: int = 1
) -> tuple[list[Candidate], list[Lapsed]]:
    """Of a claim's dealt jobs, those to lease, and those whose lease ran out, each to count as a failed attempt:
    due at once the first time (a deploy's kill), then after GRANDBO_EMBED_RETRY_SECONDS doubling one step behind
    (`pending_work.lost_delay`), not leased once it has used `max_attempts` (it counts as failed: `retry_failed`
    gives it back). Of the jobs that lost their worker, one group (the first dealt decides which): up to
    `lost_batch` lost once, or one lost twice or more in a row, or up to `lost_batch` timed out twice (`room_of`)."""
    lease: list[Candidate] = []
    lapsed: list[Lapsed] = []
    group, room = 0, 0  # the claim's lost group: its jobs' losses (1; 2: alone; TIMED_OUT_TWICE), and its room left
    for candidate in chosen:
        losses = candidate.lost
        if candidate.lapsed:
            delay = lost_delay(candidate.attempts + 1, retry_seconds, EMBED_MOST_SECONDS)
            lapsed.append(Lapsed(candidate, delay, LOST if not losses else LOST_AGAIN))
            if delay > 0 or candidate.attempts + 1 >= max_attempts:
                continue
            losses = min(losses + 1, 2)  # lost (again): a job timed out twice whose worker ended too is lost again
        if losses:
            if not group:
                group, room = losses, room_of(losses, lost_batch)
            # Not in the group: left for a later claim (leased with the group, it would be counted again, untried,
            # should the group end the worker).
            if losses != group or not room:
                continue
            room -= 1
        lease.append(candidate)
    return lease, lapsed


def claim(
    orgs: Sequence[str], limit: int, fetch: Fetch, after: str | None, count: Callable[[list[Lapsed]], None],
    max_attempts: int, retry_seconds: float, lost_batch: int = 1,
) -> tuple[list[Candidate], str | None]:  # fmt: skip
    """An embed claim (`fair_claim`, then `leasable`): the jobs to lease, in the order to embed them, and the cursor
    for the next claim. Jobs whose lease ran out are counted through `count`, then the claim is dealt again: they held
    places of the deal, and those due later (or past a lost group) would have left it short, or empty while other
    jobs were ready (a drain stops at an empty claim). Dealt again, none has lapsed: those counted are now due later
    or lost, and take a place only where they are leased."""
    for again in (False, True):
        chosen, cursor = fair_claim(orgs, limit, fetch, after, LostGroup(lost_batch).keep)
        lease, lapsed = leasable(chosen, max_attempts, retry_seconds, lost_batch)
        if lapsed:
            count(lapsed)
        if not lapsed or again:
            break
    return lease, cursor


def log_lost(org_id: str, entry_id: str, attempt: int, max_attempts: int) -> None:
    """One line per job a lost lease was counted for; the remedy once it has used its attempts."""
    given_up = attempt >= max_attempts
    log.warning("memory.embedding_runner_lost", org_id=org_id, entry_id=entry_id, attempt=attempt, gave_up=given_up,
                remedy=("its last attempt ended its worker, and it has used its attempts: it counts as failed "
                        "(`grandbo stats`, GET /v1/stats). Find why in the worker's last lines (memory, a crash), "
                        "then `grandbo backfill` gives it back" if given_up else None))  # fmt: skip


def log_not_held(action: str, left: Sequence[EmbedJob]) -> None:
    """One line for the jobs a worker would fail or give back (`action`) that it no longer holds: its lease ran out
    and another worker leased them (counted lost already), a holder proved gone had its leases ended, `retry_failed`
    gave them back, or an edit queued a new text. They are left to their new holder, or their new text."""
    if left:
        log.info("memory.embedding_lease_moved_on", action=action, jobs=len(left),
                 orgs=sorted({job.org_id for job in left})[:10],
                 entries=[job.entry_id for job in left][:10])  # fmt: skip
