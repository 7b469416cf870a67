"""The embed outbox's records as the store hands them up (`ports.Outbox`, `ports.OrgEntries.jobs`), named in
`grandbo.ports` too."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class EmbedJob:
    """One entry waiting for its vector."""

    job_id: int
    org_id: str
    entry_id: str
    content_hash: str
    text: str
    attempts: int
    # Its last attempt lost its worker (`LOST`): the worker embeds it alone, after the claim's other batches, so
    # that a text that ends every worker that takes it takes no other job, nor org, with it.
    lost: bool = False


UNEMBEDDABLE = 2_000_000
"""An embed job's `attempts` once its text proved unembeddable (the provider's vector for it is all zeros, as the
deterministic provider's is for a text of stopwords only): settled, not failed. It is never claimed again nor
reset by `retry_failed` (the same text would get the same answer); a new text (an edit) or another provider
(`grandbo reembed`) queues it afresh. The entry stays found by the lexical arm."""


LOST = (
    "its worker's lease ran out while it held it (the worker was killed, crashed, or stuck past its lease); "
    "counted as a failed attempt, and embedded alone next"
)
"""An embed job's `last_error` once a claim counted the lease its worker lost (`store.queue.leasable`): the job
was in a provider batch, or a claim, when its worker ended (a text that ends every worker that takes it: a crash,
the OOM killer), and it was leased again by each new worker, never counted, and dealt into the first batch with
other orgs' jobs. While it is so, the job is leased one a claim and embedded alone (`EmbedJob.lost`)."""


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
