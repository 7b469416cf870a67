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

A job whose lease ran out lost its worker (killed, crashed, stuck past its lease): the claim that deals it counts
that as a failed attempt (`leasable`), so a text that ends every worker that takes it stops after
GRANDBO_EMBED_MAX_ATTEMPTS; it was leased again by each new worker, never counted, and dealt into the first batch
with other orgs' jobs. Such a job (`ports.LOST`) is leased one a claim, and the worker embeds it alone, last.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from grandbo.pending_work import EMBED_MOST_SECONDS, lost_delay

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A ready job as the outbox index orders it within its org."""

    org_id: str
    key: tuple[Any, ...]  # (available_at, job_id): where the next read of this org resumes
    job_id: int
    attempts: int = 0
    lapsed: bool = False  # leased, and the lease ran out: its worker is gone
    lost: bool = False  # its last attempt lost its worker, counted already (`ports.LOST`)


Fetch = Callable[[Mapping[str, tuple[int, tuple[Any, ...] | None]]], Mapping[str, Sequence[Candidate]]]


def rotated(orgs: Sequence[str], after: str | None) -> list[str]:
    """The orgs in name order, starting with the first one after `after` (wrapping round)."""
    ordered = sorted(set(orgs))
    if after is None:
        return ordered
    start = next((i for i, org in enumerate(ordered) if org > after), 0)
    return ordered[start:] + ordered[:start]


def gather(orgs: Sequence[str], limit: int, fetch: Fetch) -> dict[str, list[Candidate]]:
    """Enough candidates per org for a fair deal of `limit` jobs.

    Every org still open (its last read came back full) is asked for an even share of what the claim
    still lacks. After each round every org holds min(its ready jobs, what the open orgs were asked in
    all), so once the claim is covered no deal can give an org more than it holds; a round that leaves it
    short has exhausted some org, so the rounds end.
    """
    found: dict[str, list[Candidate]] = {org: [] for org in orgs}
    more, total = list(orgs), 0
    while more and total < limit:
        share = -(-(limit - total) // len(more))
        answers = fetch({org: (share, found[org][-1].key if found[org] else None) for org in more})
        full = []
        for org in more:
            got = list(answers.get(org, ()))[:share]
            found[org].extend(got)
            total += len(got)
            if len(got) == share:
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


def fair_claim(orgs: Sequence[str], limit: int, fetch: Fetch, after: str | None) -> tuple[list[Candidate], str | None]:
    """The jobs one claim takes, in the order to embed them, and the cursor for the next claim (None: keep)."""
    order = rotated(orgs, after)
    if limit <= 0 or not order:
        return [], None
    return deal(gather(order, limit, fetch), order, limit)


@dataclass(frozen=True, slots=True)
class Lapsed:
    """A dealt job whose lease ran out: its attempt to count, and the seconds before it is due again."""

    candidate: Candidate
    delay: float


def leasable(
    chosen: Sequence[Candidate], max_attempts: int, retry_seconds: float
) -> tuple[list[Candidate], list[Lapsed]]:
    """Of a claim's dealt jobs, those to lease (at most one that lost its worker: the first dealt), and those whose
    lease ran out, each to count as a failed attempt: due at once the first time (a deploy's kill), then after
    GRANDBO_EMBED_RETRY_SECONDS doubling one step behind (`pending_work.lost_delay`), not leased once it has used
    `max_attempts` (it counts as failed: `retry_failed` gives it back)."""
    lease: list[Candidate] = []
    lapsed: list[Lapsed] = []
    alone = False
    for candidate in chosen:
        if candidate.lapsed:
            delay = lost_delay(candidate.attempts + 1, retry_seconds, EMBED_MOST_SECONDS)
            lapsed.append(Lapsed(candidate, delay))
            if delay > 0 or candidate.attempts + 1 >= max_attempts:
                continue
        if candidate.lapsed or candidate.lost:
            if alone:  # for a later claim: leased with the first, it would be counted again, untried, should the
                continue  # first end the worker
            alone = True
        lease.append(candidate)
    return lease, lapsed


def log_lost(org_id: str, entry_id: str, attempt: int, max_attempts: int) -> None:
    """One line per job a lost lease was counted for; the remedy once it has used its attempts."""
    given_up = attempt >= max_attempts
    log.warning("memory.embedding_runner_lost", org_id=org_id, entry_id=entry_id, attempt=attempt, gave_up=given_up,
                remedy=("its last attempt ended its worker, and it has used its attempts: it counts as failed "
                        "(`grandbo stats`, GET /v1/stats). Find why in the worker's last lines (memory, a crash), "
                        "then `grandbo backfill` gives it back" if given_up else None))  # fmt: skip
