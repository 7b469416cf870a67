"""Write-behinds, as the store hands them up: work a write acknowledged and left for later (`NewWork`, recorded
in the write's transaction), a leased piece of it (`Work`), and the two protocols that lease it: one org's
(`OrgWork`, what the process that wrote it runs at once) and every org's (`PendingWork`, what `redrive` re-drives).
`grandbo.ports` names them too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class NewWork:
    """Work a write acknowledges and leaves for later (a write-behind), recorded in the write's transaction."""

    kind: str  # what to do: "incident.sync", "learning.settle", "alert.triage"
    subject: str  # to what: an incident, signal or alert id
    payload: Mapping[str, Any] = field(default_factory=dict)
    after: float = 0.0  # seconds before a re-driver may take it: the process that wrote it runs it first


@dataclass(frozen=True, slots=True)
class Work:  # one leased piece of pending work
    work_id: int
    org_id: str
    kind: str
    subject: str
    payload: dict[str, Any]
    attempts: int  # failed attempts before this one
    # The incarnation of its org when it was leased (`claim_work`; None: the org's row went, its rows going): the
    # re-driver acts for that org or none, never for one created again under its name (`grandbo.incarnation`).
    incarnation: int | None = None


class OrgWork(Protocol):
    """An org's pending work: leased by kind and subjects unless leased already; counted (waiting, failed)."""

    def claim(self, kind: str, subjects: Sequence[str], max_attempts: int, lease_seconds: float) -> list[Work]: ...
    def complete(self, work: Sequence[Work]) -> None: ...
    def release(self, work: Sequence[Work]) -> None: ...
    def fail(self, work: Sequence[Work], error: str, retry_at: datetime) -> None: ...
    def counts(self, max_attempts: int) -> tuple[int, int]: ...


class PendingWork(Protocol):
    """Every org's pending work: leased round-robin across orgs (`store.queue`), counted in one statement."""

    def claim_work(self, limit: int, max_attempts: int, lease_seconds: float) -> list[Work]: ...
    def complete_work(self, work: Sequence[Work]) -> None: ...
    def fail_work(self, work: Sequence[Work], error: str, retry_at: datetime) -> None: ...
    def work_counts(self, max_attempts: int) -> tuple[int, int]: ...
    def retry_failed_work(self, org_id: str | None = None) -> int: ...
    def work_holders(self) -> list[tuple[str, str]]: ...
    def free_work_held_by(self, org_id: str, holder: str, error: str, retry_seconds: float) -> list[Work]: ...
    def beat_work(self) -> int: ...


EMBED_MOST_SECONDS = 86_400.0  # the longest an embed job waits between attempts (GRANDBO_EMBED_RETRY_SECONDS, doubling)


def retry_delay(attempt: int, retry_seconds: float, most: float = 3600.0) -> float:
    """Seconds before a write-behind's `attempt`-th failed attempt is tried again: GRANDBO_WRITE_BEHIND_RETRY_SECONDS,
    doubling per attempt, an hour at most (`most`: an embed job's, GRANDBO_EMBED_RETRY_SECONDS, a day)."""
    return min(most, retry_seconds * 2.0 ** min(attempt - 1, 32))


def lost_delay(attempt: int, retry_seconds: float, most: float = 3600.0) -> float:
    """Seconds before a write-behind (or an embed job) whose runner ended while running it (its `attempt`-th) is
    tried again: none the first time (a process killed in a deploy: its work is done at once by the next), then as a
    failed attempt's, one doubling behind: a piece that ends every runner that takes it waits, and other orgs' work
    is done meanwhile."""
    return 0.0 if attempt <= 1 else retry_delay(attempt - 1, retry_seconds, most)
