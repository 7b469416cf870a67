"""The Postgres store's unembeddable embed jobs: texts whose vector is all zeros, settled once in the outbox
(`ports.UNEMBEDDABLE`), never claimed or retried again, counted in `corpus_stats`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from grandbo.ports import UNEMBEDDABLE, EmbedJob
from grandbo.store.postgres.connection import PostgresConnection


def requeue_entries(conn: psycopg.Connection[Any], org_id: str, entry_ids: Sequence[str]) -> None:
    """Within a write: those entries' unembeddable jobs are claimable again (their text is the same, but what the
    provider makes of it changed: the deterministic provider's terms, migration step REDERIVE_TERMS)."""
    conn.execute(
        "UPDATE embed_outbox SET attempts = 0, last_error = NULL, claimed_until = NULL, claimed_by = NULL, "
        "available_at = now() "
        "WHERE org_id = %s AND entry_id = ANY(%s) AND attempts = %s",
        (org_id, list(entry_ids), UNEMBEDDABLE),
    )


class UnembeddableMixin(PostgresConnection):
    """Unembeddable embed jobs, for `PostgresStore`."""

    def mark_unembeddable(self, jobs: Sequence[EmbedJob], reason: str) -> int:
        """See `ports.Outbox.mark_unembeddable`: a job whose entry changed text since its claim is left alone
        (the write that changed it queued the new text)."""
        count = 0
        for org_id in sorted({job.org_id for job in jobs}):
            mine = [job for job in jobs if job.org_id == org_id]
            with self._writing(org_id) as conn:
                count += conn.execute(
                    "UPDATE embed_outbox SET attempts = %s, last_error = %s, claimed_until = NULL, claimed_by = NULL "
                    "FROM unnest(%s::bigint[], %s::text[]) AS job(job_id, content_hash) "
                    "WHERE embed_outbox.org_id = %s AND embed_outbox.job_id = job.job_id "
                    "AND embed_outbox.content_hash = job.content_hash",
                    (UNEMBEDDABLE, reason[:2000], [j.job_id for j in mine], [j.content_hash for j in mine], org_id),
                ).rowcount
        return count

    def requeue_unembeddable(self) -> int:
        """Make every unembeddable job claimable again (another provider may embed those texts); return how many."""
        return self._update_each_org(
            None,
            "UPDATE embed_outbox SET attempts = 0, last_error = NULL, claimed_until = NULL, claimed_by = NULL, "
            "available_at = now() WHERE org_id = %s AND attempts = %s",
            UNEMBEDDABLE,
        )
