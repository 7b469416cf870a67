"""The embed outbox's records as the store hands them up (`Outbox`, `ports.OrgEntries.jobs`), and its port
(`Outbox`), named in `grandbo.ports` too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np
import numpy.typing as npt

from grandbo.model import EmbeddingSpace


@dataclass(frozen=True, slots=True)
class EmbedJob:
    """One entry waiting for its vector."""

    job_id: int
    org_id: str
    entry_id: str
    content_hash: str
    text: str
    attempts: int
    # Its last attempt lost its worker (`LOST`, `LOST_AGAIN`) or ran out of time (`TIMED_OUT`, `TIMED_OUT_AGAIN`): one
    # of the claim's lost jobs, which the worker embeds in a batch of their own after the claim's other batches (the
    # store deals a batch of jobs lost once, or one lost again alone), so that a text that ends every worker that takes
    # it, or makes the provider slow, takes no fresh job, nor org, with it.
    lost: bool = False
    # Of the lost jobs, one embedded alone in a provider call of its own: lost again (one a claim), or whose batches
    # timed out twice in a row (`TIMED_OUT_AGAIN`: several a claim, each alone, within the claim's budget).
    alone: bool = False
    # The lease it was claimed under: its end, as the claim wrote it (the holder, `store.sql.holders`, is this process).
    # A failure or a give-back is recorded only while the job still holds it: a worker that ran past its lease (a slow
    # provider, a batch halved) finds its jobs leased again by another, counted lost already, and its late failure
    # counted the attempt a second time, its give-back ended the other's lease, and a third worker embedded them too.
    # None: no lease (refused by `Outbox.fail_jobs` and `Outbox.release_jobs`).
    leased_until: datetime | None = None


UNEMBEDDABLE = 2_000_000
"""An embed job's `attempts` once its text proved unembeddable (the provider's vector for it is all zeros, as the
deterministic provider's is for a text of stopwords only): settled, not failed. It is never claimed again nor
reset by `retry_failed` (the same text would get the same answer); a new text (an edit) or another provider
(`grandbo reembed`) queues it afresh. The entry stays found by the lexical arm."""


LOST = (
    "its worker's lease ran out while it held it (the worker was killed, crashed, or stuck past its lease); "
    "counted as a failed attempt, and embedded next in a batch of lost jobs only"
)
"""An embed job's `last_error` once a claim counted the lease its worker lost (`store.queue.leasable`): the job
was in a provider batch, or a claim, when its worker ended (a deploy's kill; or a text that ends every worker that
takes it: a crash, the OOM killer), and it was leased again by each new worker, never counted, and dealt into the
first batch with other orgs' jobs. While it is so, the job is embedded with other lost jobs only, one batch of them
a claim, after the claim's fresh batches (`EmbedJob.lost`): a killed worker's claim comes back a batch a claim."""

LOST_AGAIN = (
    "its worker's lease ran out while it held it, and its previous attempt had lost its worker too; counted as a "
    "failed attempt, and embedded alone next"
)
"""An embed job's `last_error` once a claim counted a second lost lease in a row: it was in the batch of lost jobs
that ended its worker again, so it may be the text that does. While it is so, the job is leased one a claim and
embedded alone: the poison is isolated at its third attempt, and each job of its batch is counted twice, then
embedded."""


TIMED_OUT = (
    "the provider did not answer its batch within GRANDBO_HTTP_TIMEOUT_SECONDS; counted as a failed attempt, and "
    "embedded next in a batch of such jobs only"
)
"""An embed job's `last_error` once its batch ran out of time (`errors.ProviderUnavailableError` with `timed_out`):
a slow provider, or one text that makes it slow. Dealt as a job lost once (`LOST`): in a batch of such jobs, after
the claim's fresh batches, so that a text that makes the provider slow takes no fresh job, nor org, with it. A batch
that times out is not halved (a provider that is down would be asked twice as often, and hold the lease longer)."""

TIMED_OUT_AGAIN = (
    "the provider did not answer its batch within GRANDBO_HTTP_TIMEOUT_SECONDS twice in a row; counted as a failed "
    "attempt, and embedded alone next"
)
"""An embed job's `last_error` once its batch of jobs that timed out (`TIMED_OUT`) timed out again: it may hold the
text that makes the provider slow. Embedded alone, as `LOST_AGAIN` is: the text at fault waits and fails by itself,
and its batch-mates (another org's entries) are embedded at their third attempt (probe 31). Several a claim, though,
each in a provider call of its own while the claim's budget lasts (`store.queue.TIMED_OUT_TWICE`): a timeout ends no
worker, and a backlog of them (a provider slow for a while) drained one job a claim."""


@dataclass(frozen=True, slots=True)
class JobState:
    """Where one entry's embed job stands in the outbox: how often it was tried, why it last failed, and when
    the worker may try it next."""

    entry_id: str
    attempts: int
    last_error: str | None
    available_at: datetime

    @property
    def unembeddable(self) -> bool:
        return self.attempts == UNEMBEDDABLE


@dataclass(frozen=True, slots=True)
class EmbedResult:
    """A vector for a job, or None when the provider's answer for it was unusable."""

    job: EmbedJob
    vector: npt.NDArray[np.float32] | None


class Outbox(Protocol):
    """The embed jobs of every organization."""

    def space(self) -> EmbeddingSpace | None: ...
    def claim_jobs(
        self, limit: int, max_attempts: int, org_id: str | None = None, lease_seconds: float = 300.0,
        retry_seconds: float = 30.0, lost_batch: int = 1,
    ) -> list[EmbedJob]:  # fmt: skip
        """Reserve up to `limit` ready jobs for `lease_seconds`, recording this process as their holder. A crashed
        worker's jobs come back after it (its lease ran out, or `end_leases_of` ended it), each counted as a failed
        attempt by the claim that deals it (due again after `retry_seconds`, GRANDBO_EMBED_RETRY_SECONDS, from the
        second); of the jobs whose last attempt lost its worker (`EmbedJob.lost`), one group a claim: up to
        `lost_batch` lost once (`LOST`), or one lost again (`LOST_AGAIN`)."""
        ...

    def job_holders(self) -> list[tuple[str, str]]:
        """(org, holder) of every embed job lease not run out, every org's, in one statement: the holder as
        `store.sql.holders` recorded it."""
        ...

    def end_leases_of(self, org_id: str, holder: str) -> int:
        """End now the org's embed job leases `holder` (a process proved gone) holds: the next claim deals them as
        it deals a lease that ran out (counted, `LOST`); how many."""
        ...

    def complete_jobs(self, space: EmbeddingSpace, results: Sequence[EmbedResult]) -> int:
        """Write vectors (with provider, model and dimension) and drop their jobs; return vectors written."""
        ...

    def fail_jobs(self, jobs: Sequence[EmbedJob], error: str, retry_at: datetime) -> None:
        """Record a failed attempt; past the worker's maximum the jobs count as failed (until `retry_failed`). Only
        for the jobs still held under the lease they were claimed with (`EmbedJob.leased_until`) and still of the
        text they were claimed with: one leased again since (its lease ran out, it was taken over, `retry_failed`
        gave it back) or edited is left to its new holder or its new text (logged once, at info)."""
        ...

    def release_jobs(self, jobs: Sequence[EmbedJob]) -> None:
        """Give claimed jobs back untried: claimable at once, no attempt counted. Only for the jobs still held under
        the lease they were claimed with, as `fail_jobs`."""
        ...

    def mark_unembeddable(self, jobs: Sequence[EmbedJob], reason: str) -> int:
        """Settle the jobs whose text has no vector (`UNEMBEDDABLE`), each only while its entry still holds the
        text it was claimed with; return how many were marked."""
        ...

    def maintain(self) -> list[str]:
        """The worker's maintenance (Postgres: HNSW indexes writes asked for; SQLite: erasures a crash cut short)."""
        ...
