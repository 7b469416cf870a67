"""The embedded store's unembeddable embed jobs: texts whose vector is all zeros, settled once in the outbox
(`ports.UNEMBEDDABLE`), never claimed or retried again, counted in `corpus_stats`."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from grandbo.ports import UNEMBEDDABLE, EmbedJob
from grandbo.store.sqlite.connection import Connection


def requeue_entries(db: sqlite3.Connection, org_id: str, entry_ids: Sequence[str]) -> None:
    """Within a write: those entries' unembeddable jobs are claimable again (their text is the same, but what the
    provider makes of it changed: the deterministic provider's terms, migration step REDERIVE_TERMS)."""
    db.executemany(
        "UPDATE embed_outbox SET attempts = 0, last_error = NULL, claimed_until = NULL, claimed_by = NULL "
        "WHERE org_id = ? AND entry_id = ? AND attempts = ?",
        [(org_id, entry_id, UNEMBEDDABLE) for entry_id in entry_ids],
    )


class Unembeddable(Connection):
    def mark_unembeddable(self, jobs: Sequence[EmbedJob], reason: str) -> int:
        """See `ports.Outbox.mark_unembeddable`: a job whose entry changed text since its claim is left alone
        (the write that changed it queued the new text)."""
        with self._write() as db:
            cursor = db.executemany(
                "UPDATE embed_outbox SET attempts = ?, last_error = ?, claimed_until = NULL, claimed_by = NULL "
                "WHERE job_id = ? AND content_hash = ?",
                [(UNEMBEDDABLE, reason[:2000], job.job_id, job.content_hash) for job in jobs],
            )
            return max(0, cursor.rowcount)

    def requeue_unembeddable(self) -> int:
        """Make every unembeddable job claimable again (another provider may embed those texts); return how many."""
        with self._write() as db:
            return db.execute(
                "UPDATE embed_outbox SET attempts = 0, last_error = NULL, claimed_until = NULL, claimed_by = NULL "
                "WHERE attempts = ?",
                (UNEMBEDDABLE,),
            ).rowcount
