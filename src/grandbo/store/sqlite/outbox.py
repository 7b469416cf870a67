"""The embedded store's embed outbox: the jobs the worker claims (`store.queue`'s fair claim), completes,
fails or releases, and what the corpus has embedded."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import structlog

from grandbo.errors import EntryStateError
from grandbo.model import CorpusStats, EmbeddingSpace, Status, utcnow
from grandbo.ports import UNEMBEDDABLE, EmbedJob, EmbedResult, JobState
from grandbo.store import fence, projection, queue
from grandbo.store.sql import corpus_counts
from grandbo.store.sql.holders import holder
from grandbo.store.sql.outbox_holders import LOSS_MARKS, LOSSES
from grandbo.store.sql.unembeddable import COUNT as COUNT_UNEMBEDDABLE
from grandbo.store.sqlite.connection import Connection
from grandbo.store.sqlite.dialect import chunks, marks
from grandbo.store.sqlite.entries import rows
from grandbo.store.sqlite.vectors import write_vectors

log = structlog.get_logger(__name__)

_LOSSES = LOSSES.format(p="?")
_UNREADABLE = "the entry's row cannot be read (a damaged value); fix or purge it"
# A job still held under the lease it was claimed with, of the text it was claimed with (`ports.Outbox.fail_jobs`).
_HELD = "job_id = ? AND content_hash = ? AND claimed_by = ? AND claimed_until = ?"


def _held(job: EmbedJob, by: str) -> tuple[Any, ...]:
    """`_HELD`'s parameters for `job`, held by `by` (this process)."""
    until = job.leased_until.isoformat() if job.leased_until else None
    return job.job_id, job.content_hash, by, until


def enqueue_missing(db: sqlite3.Connection, org_id: str | None, space: EmbeddingSpace) -> int:
    """Queue every active entry (of `org_id`, or of every org) without a vector of `space` for its text."""
    now = utcnow().isoformat()
    cursor = db.execute(
        "INSERT INTO embed_outbox (org_id, entry_id, content_hash, available_at, created_at) "
        "SELECT e.org_id, e.entry_id, e.content_hash, ?, ? FROM memory_entries e "
        "LEFT JOIN entry_vectors v ON v.org_id = e.org_id AND v.entry_id = e.entry_id "
        "  AND v.provider = ? AND v.model = ? AND v.dimension = ? AND v.content_hash = e.content_hash "
        "WHERE e.status = 'active' AND v.entry_id IS NULL"
        + (" AND e.org_id = ?" if org_id else "")
        + " ON CONFLICT (org_id, entry_id) DO NOTHING",
        (now, now, space.provider, space.model, space.dimension, *((org_id,) if org_id else ())),
    )
    return cursor.rowcount


def _readable_rows(
    db: sqlite3.Connection, org_id: str, entry_ids: Sequence[str]
) -> tuple[dict[str, projection.Row], set[str]]:
    """`entries.rows`, and the ids of rows that cannot be read (damaged JSON, say): one bad row must not stop the
    claim for every other job and org."""
    try:
        return rows(db, org_id, entry_ids), set()
    except (ValueError, sqlite3.DataError):
        pass
    found: dict[str, projection.Row] = {}
    unreadable: set[str] = set()
    for entry_id in entry_ids:
        try:
            found.update(rows(db, org_id, [entry_id]))
        except (ValueError, sqlite3.DataError) as error:
            log.error("store.row_unreadable", org_id=org_id, entry_id=entry_id, error=str(error)[:200])
            unreadable.add(entry_id)
    return found, unreadable


class Outbox(Connection):
    def outbox_depth(self) -> int:
        with self._reading() as db:
            (count,) = db.execute("SELECT count(*) FROM embed_outbox").fetchone()
        return int(count)

    def readiness(self, counted: bool = True, max_attempts: int = 5) -> tuple[int, int, int]:
        with self._reading() as db:
            if counted:  # one statement: the outbox read once, whatever the number of orgs
                schema, waiting, failed = db.execute(
                    f"SELECT {fence.NEWEST}, count(*) FILTER (WHERE attempts < ?), "
                    "count(*) FILTER (WHERE attempts >= ? AND attempts <> ?) FROM embed_outbox",
                    (max_attempts, max_attempts, UNEMBEDDABLE),
                ).fetchone()
            else:
                schema, waiting, failed = db.execute(f"SELECT {fence.NEWEST}, 0, 0").fetchone()
        self._hold(schema)  # `/readyz` answers 503 store_upgraded: the balancer sends no request
        return int(schema), int(waiting), int(failed)

    def job_holders(self) -> list[tuple[str, str]]:
        with self._reading() as db:
            return [(str(org), str(by)) for org, by in db.execute(
                "SELECT DISTINCT org_id, claimed_by FROM embed_outbox WHERE claimed_until IS NOT NULL "
                "AND claimed_until > ? AND claimed_by IS NOT NULL",
                (utcnow().isoformat(),),
            )]  # fmt: skip

    def end_leases_of(self, org_id: str, holder: str) -> int:
        now = utcnow().isoformat()
        with self._write(org_id) as db:
            return db.execute(
                "UPDATE embed_outbox SET claimed_until = ?, claimed_by = NULL WHERE org_id = ? AND claimed_by = ? "
                "AND claimed_until IS NOT NULL AND claimed_until > ?",
                (now, org_id, holder, now),
            ).rowcount

    def claim_jobs(
        self, limit: int, max_attempts: int, org_id: str | None = None, lease_seconds: float = 300.0,
        retry_seconds: float = 30.0, lost_batch: int = 1,
    ) -> list[EmbedJob]:  # fmt: skip
        at = utcnow()
        now = at.isoformat()
        until = utcnow() + timedelta(seconds=lease_seconds)
        lease = until.isoformat()
        with self._write() as db:
            if org_id is not None:
                orgs = [org_id]
            else:  # the orgs with any outbox row, one index step each (a loose index scan)
                orgs = [
                    row[0]
                    for row in db.execute(
                        "WITH RECURSIVE busy(org) AS (SELECT min(org_id) FROM embed_outbox UNION ALL "
                        "SELECT (SELECT min(org_id) FROM embed_outbox WHERE org_id > busy.org) FROM busy "
                        "WHERE busy.org IS NOT NULL) SELECT org FROM busy WHERE org IS NOT NULL"
                    )
                ]

            def fetch(
                requests: Mapping[str, tuple[int, tuple[Any, ...] | None]],
            ) -> dict[str, list[queue.Candidate]]:
                found: dict[str, list[queue.Candidate]] = {}
                for org, (count, after) in requests.items():
                    ready = db.execute(
                        f"SELECT available_at, job_id, attempts, claimed_until IS NOT NULL, {_LOSSES} "
                        "FROM embed_outbox WHERE org_id = ? AND available_at <= ? "
                        "AND (available_at, job_id) > (?, ?) AND attempts < ? "
                        "AND (claimed_until IS NULL OR claimed_until <= ?) ORDER BY available_at, job_id LIMIT ?",
                        (*LOSS_MARKS, org, now, *(after or ("", -1)), max_attempts, now, count),
                    ).fetchall()
                    found[org] = [queue.Candidate(org, (row[0], row[1]), row[1], row[2], bool(row[3]), row[4])
                                  for row in ready]  # fmt: skip
                return found

            def count(lapsed: list[queue.Lapsed]) -> None:
                for counted in lapsed:  # its worker is gone: a failed attempt (`queue.leasable`)
                    ((entry_id, attempts),) = db.execute(
                        "UPDATE embed_outbox SET attempts = attempts + 1, last_error = ?, "
                        "claimed_until = NULL, claimed_by = NULL, "
                        "available_at = CASE WHEN ? > 0 THEN ? ELSE available_at END WHERE job_id = ? "
                        "RETURNING entry_id, attempts",
                        (counted.error, counted.delay, (at + timedelta(seconds=counted.delay)).isoformat(),
                         counted.candidate.job_id),
                    ).fetchall()  # fmt: skip
                    queue.log_lost(counted.candidate.org_id, entry_id, attempts, max_attempts)

            chosen, cursor = queue.claim(orgs, limit, fetch, self._claim_after, count, max_attempts, retry_seconds,
                                         lost_batch)  # fmt: skip
            if org_id is None and cursor is not None:
                self._claim_after = cursor
            if not chosen:
                return []
            order = {candidate.job_id: n for n, candidate in enumerate(chosen)}
            lost = {candidate.job_id for candidate in chosen if candidate.lapsed or candidate.lost}
            alone = {candidate.job_id for candidate in chosen if candidate.alone}
            claimed = db.execute(
                f"UPDATE embed_outbox SET claimed_until = ?, claimed_by = ? WHERE job_id IN ({marks(len(chosen))}) "
                "RETURNING job_id, org_id, entry_id, attempts",
                (lease, holder(), *order),
            ).fetchall()
            jobs: list[EmbedJob] = []
            gone: list[int] = []
            broken: list[int] = []
            for org, group in itertools.groupby(
                sorted(claimed, key=lambda r: (r["org_id"], r["job_id"])), key=lambda r: r["org_id"]
            ):
                records = list(group)
                found, unreadable = _readable_rows(db, org, [record["entry_id"] for record in records])
                for record in records:
                    row = found.get(record["entry_id"])
                    if record["entry_id"] in unreadable:
                        broken.append(record["job_id"])
                        continue
                    if row is None or row["status"] != Status.ACTIVE.value:
                        gone.append(record["job_id"])
                        continue
                    jobs.append(
                        EmbedJob(record["job_id"], org, row["id"], row["content_hash"], projection.embed_text(row),
                                 record["attempts"], record["job_id"] in lost, record["job_id"] in alone, until)
                    )  # fmt: skip
            db.executemany("DELETE FROM embed_outbox WHERE job_id = ?", [(job_id,) for job_id in gone])
            db.executemany(  # fails for good, never again in the way of other jobs or orgs
                "UPDATE embed_outbox SET attempts = 1000000, claimed_until = NULL, claimed_by = NULL, last_error = ? "
                "WHERE job_id = ?",
                [(_UNREADABLE, job_id) for job_id in broken],
            )
        return sorted(jobs, key=lambda job: order[job.job_id])  # as dealt: every org in the first batch

    def complete_jobs(self, space: EmbeddingSpace, results: Sequence[EmbedResult]) -> int:
        written = [result for result in results if result.vector is not None]
        with self._write() as db:
            current = self.space()
            if current != space:
                raise EntryStateError(
                    f"The store's embedding space changed to {current} while vectors of {space} were being "
                    "computed; they were not written. Restart the worker.",
                    detail={"store_space": str(current), "worker_space": str(space)},
                )
            count = 0
            for org_id, group in itertools.groupby(sorted(written, key=lambda r: r.job.org_id), lambda r: r.job.org_id):
                results = list(group)
                db.execute("SAVEPOINT complete_org")  # one org's refused write must not stop the others
                # Only jobs still queued: a job's id is never given again, so the job of an org dropped since (maybe
                # created again under its name, with the same entry) files nothing in the new org.
                ids = [r.job.job_id for r in results]
                queued = {job_id for (job_id,) in db.execute(
                    f"SELECT job_id FROM embed_outbox WHERE job_id IN ({marks(len(ids))})", ids
                )}  # fmt: skip
                results = [r for r in results if r.job.job_id in queued]
                try:
                    count += write_vectors(
                        db, space, [(r.job.org_id, r.job.entry_id, r.job.content_hash, r.vector) for r in results]
                    )
                    db.executemany(
                        "DELETE FROM embed_outbox WHERE job_id = ? AND content_hash = ?",
                        [(r.job.job_id, r.job.content_hash) for r in results],
                    )
                except sqlite3.DatabaseError as error:
                    db.execute("ROLLBACK TO complete_org")
                    log.error("store.complete_failed", org_id=org_id, jobs=len(results), error=str(error)[:200])
                db.execute("RELEASE complete_org")
        return count

    def fail_jobs(self, jobs: Sequence[EmbedJob], error: str, retry_at: datetime) -> None:
        by = holder()
        with self._write() as db:
            left = [job for job in jobs if not db.execute(
                "UPDATE embed_outbox SET attempts = attempts + 1, last_error = ?, available_at = ?, "
                f"claimed_until = NULL, claimed_by = NULL WHERE {_HELD}",
                (error[:2000], retry_at.isoformat(), *_held(job, by)),
            ).rowcount]  # fmt: skip
        queue.log_not_held("fail", left)

    def release_jobs(self, jobs: Sequence[EmbedJob]) -> None:
        by = holder()
        with self._write() as db:
            left = [job for job in jobs if not db.execute(
                f"UPDATE embed_outbox SET claimed_until = NULL, claimed_by = NULL WHERE {_HELD}", _held(job, by)
            ).rowcount]  # fmt: skip
        queue.log_not_held("release", left)

    def retry_failed(self, org_id: str | None = None) -> int:
        with self._write(org_id) as db:
            cursor = db.execute(
                "UPDATE embed_outbox SET attempts = 0, available_at = ?1, claimed_until = NULL, claimed_by = NULL "
                "WHERE (attempts > 0 OR claimed_until IS NOT NULL OR available_at > ?1) AND attempts <> ?2"
                + (" AND org_id = ?3" if org_id else ""),
                (utcnow().isoformat(), UNEMBEDDABLE, *((org_id,) if org_id else ())),
            )
            return cursor.rowcount

    def enqueue_missing(self, org_id: str | None = None) -> int:
        space = self.space()
        if space is None:
            return 0
        with self._write(org_id) as db:
            return enqueue_missing(db, org_id, space)

    def embed_jobs(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, JobState]:
        found: dict[str, JobState] = {}
        with self._read() as db:
            for chunk in chunks(entry_ids):
                for r in db.execute(
                    "SELECT entry_id, attempts, last_error, available_at FROM embed_outbox "
                    f"WHERE org_id = ? AND entry_id IN ({marks(len(chunk))})",
                    (org_id, *chunk),
                ):
                    found[r[0]] = JobState(r[0], r[1], r[2], datetime.fromisoformat(r[3]))
        return found

    def unembeddable_jobs(self, org_id: str) -> int:
        with self._read() as db:
            return int(db.execute(COUNT_UNEMBEDDABLE.format(p="?"), (org_id,)).fetchone()[0])

    def corpus_stats(self, org_id: str, max_attempts: int) -> CorpusStats:
        space = self.space()
        with self._read() as db:
            found = db.execute(corpus_counts.READ.format(p="?"), (org_id,)).fetchone()
            total = int(found[0]) if found else 0
            readable, stale = corpus_counts.readable_and_stale(
                db.execute(corpus_counts.READ_VECTORS.format(p="?"), (org_id,)).fetchall(), space
            )
            pending, failed, unembeddable = db.execute(
                "SELECT count(*) FILTER (WHERE attempts < ?), count(*) FILTER (WHERE attempts >= ? AND attempts <> ?), "
                "count(*) FILTER (WHERE attempts = ?) FROM embed_outbox WHERE org_id = ?",
                (max_attempts, max_attempts, UNEMBEDDABLE, UNEMBEDDABLE, org_id),
            ).fetchone()
        return CorpusStats(
            org_id=org_id,
            total=total,
            readable=readable,
            unreadable=total - readable,
            pending=pending or 0,
            failed=failed or 0,
            unembeddable=unembeddable or 0,
            stale=stale,
            space=space,
        )
