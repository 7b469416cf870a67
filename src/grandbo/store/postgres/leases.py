"""The Postgres store's embed job leases: who holds them (`job_holders`), ending those of a holder proved gone
(`end_leases_of`), and a worker's failure or give-back of the jobs it claimed, recorded only while it still holds
them under the lease it claimed them with (`ports.EmbedJob.leased_until`): one whose lease ran out and which another
worker leased since (counted lost already) is that worker's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from grandbo.ports import EmbedJob
from grandbo.store import queue
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.sql.holders import holder

# The jobs still held under the lease they were claimed with, of the text they were claimed with
# (`ports.Outbox.fail_jobs`; parameters: `held`), as an UPDATE's FROM and WHERE of `embed_outbox o`: it returns the
# ids of those it changed.
HELD = (
    "FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[]) AS held(job_id, content_hash, claimed_until) "
    "WHERE o.org_id = %s AND o.job_id = held.job_id AND o.content_hash = held.content_hash "
    "AND o.claimed_by = %s AND o.claimed_until = held.claimed_until RETURNING o.job_id"
)


def held(org_id: str, jobs: Sequence[EmbedJob]) -> tuple[Any, ...]:
    """`HELD`'s parameters for the jobs of `org_id`, held by this process."""
    mine = [job for job in jobs if job.org_id == org_id]
    return ([job.job_id for job in mine], [job.content_hash for job in mine], [job.leased_until for job in mine],
            org_id, holder())  # fmt: skip


class LeasesMixin(PostgresConnection):
    """Embed job leases, for `PostgresStore` (through `outbox.OutboxMixin`)."""

    def job_holders(self) -> list[tuple[str, str]]:
        def read() -> list[tuple[str, str]]:
            with self._tx() as conn:  # store-wide: the function refuses an org's transaction
                rows = conn.execute("SELECT org_id, claimed_by FROM grandbo_outbox_holders()").fetchall()
            return [(str(org), str(by)) for org, by in rows]

        return self._retrying(read)

    def end_leases_of(self, org_id: str, holder: str) -> int:
        with self._writing(org_id) as conn:
            return conn.execute(
                "UPDATE embed_outbox SET claimed_until = now(), claimed_by = NULL "
                "WHERE org_id = %s AND claimed_by = %s AND claimed_until IS NOT NULL AND claimed_until > now()",
                (org_id, holder),
            ).rowcount

    def fail_jobs(self, jobs: Sequence[EmbedJob], error: str, retry_at: datetime) -> None:
        done: set[int] = set()
        for org_id in {job.org_id for job in jobs}:
            with self._writing(org_id) as conn:
                done |= {row[0] for row in conn.execute(
                    "UPDATE embed_outbox o SET attempts = o.attempts + 1, last_error = %s, available_at = %s, "
                    f"claimed_until = NULL, claimed_by = NULL {HELD}",
                    (error[:2000], retry_at, *held(org_id, jobs)),
                )}  # fmt: skip
        queue.log_not_held("fail", [job for job in jobs if job.job_id not in done])

    def release_jobs(self, jobs: Sequence[EmbedJob]) -> None:
        done: set[int] = set()
        for org_id in {job.org_id for job in jobs}:
            with self._writing(org_id) as conn:
                done |= {row[0] for row in conn.execute(
                    f"UPDATE embed_outbox o SET claimed_until = NULL, claimed_by = NULL {HELD}", held(org_id, jobs)
                )}  # fmt: skip
        queue.log_not_held("release", [job for job in jobs if job.job_id not in done])
