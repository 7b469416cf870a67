"""The Postgres store's embed outbox: the jobs that bring entries their vectors, after the entry commits.

An entry and its job commit together; the worker claims jobs fairly across orgs (`store.queue`), leasing them
with FOR UPDATE SKIP LOCKED so concurrent workers never wait for each other, and writes a vector only while
the entry is still active with the text it was computed from and the store's space is unchanged. A job whose
entry is gone is dropped; one whose row cannot be read fails for good instead of failing the whole claim.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any

import numpy as np
import psycopg
import structlog
from psycopg.rows import dict_row

from grandbo.errors import EntryStateError
from grandbo.model import EmbeddingSpace, Status
from grandbo.ports import UNEMBEDDABLE, EmbedJob, EmbedResult, JobState
from grandbo.store import projection, queue
from grandbo.store.postgres import reach
from grandbo.store.postgres.dialect import FOR_SHARE, SET_ORG, SKIP_LOCKED
from grandbo.store.postgres.leases import HELD, LeasesMixin, held
from grandbo.store.postgres.rows import ENTRY_COLUMNS, VECTOR_UPSERT, row_from_db
from grandbo.store.sql.holders import holder
from grandbo.store.sql.outbox_holders import LOSS_MARKS, LOSSES

log = structlog.get_logger(__name__)
_VECTOR_ROW = "(%s, %s, %s, %s, %s, %s, now(), %s, %s)"

# A job a worker may claim now (the parameter: GRANDBO_EMBED_MAX_ATTEMPTS).
ORG_LOCK_WAIT_MS = 1_000  # how long filing vectors waits for an org's writer lock before giving its jobs back
BUSY_RETRY_S = 10.0  # when the jobs of an org busy then are claimed again
_READY = "available_at <= now() AND attempts < %s AND (claimed_until IS NULL OR claimed_until <= now())"
_LOSSES = LOSSES.format(p="%s")
# `/readyz`: the newest migration, and the embed jobs waiting and failed (GRANDBO_READYZ_COUNTS), in one statement
_COUNTED = "SELECT (SELECT max(version) FROM schema_migrations), waiting, failed FROM grandbo_outbox_counts(%s)"
_UNCOUNTED = "SELECT (SELECT max(version) FROM schema_migrations), 0, 0"

# Stands for an entry row the driver refused to read (see `_readable_rows`); its job fails for good.
_UNREADABLE: projection.Row = {
    "error": "the entry's row cannot be read (a value outside what the store reads back); fix or purge it"
}


class OutboxMixin(LeasesMixin):
    """The embed outbox, for `PostgresStore`."""

    def embed_backlog(self, org_id: str) -> int:
        def read() -> int:
            with self._tx(org_id, join=True) as conn:
                row = conn.execute("SELECT count(*) FROM embed_outbox WHERE org_id = %s", (org_id,)).fetchone()
            return int(row[0]) if row else 0

        return self._retrying(read)

    def embed_jobs(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, JobState]:
        def read() -> dict[str, JobState]:
            with self._tx(org_id) as conn:
                rows = conn.execute(
                    "SELECT entry_id, attempts, last_error, available_at FROM embed_outbox "
                    "WHERE org_id = %s AND entry_id = ANY(%s)",
                    (org_id, list(entry_ids)),
                ).fetchall()
            return {r[0]: JobState(r[0], r[1], r[2], r[3]) for r in rows}

        return self._retrying(read)

    def outbox_depth(self) -> int:
        def read() -> int:
            # One statement whatever the number of orgs (`/readyz` asks it without a key): the owner's function
            # counts through row-level security and hands back the number alone (migration 11).
            with self._tx() as conn:
                return int(conn.execute("SELECT grandbo_outbox_depth()").fetchone()[0])  # type: ignore[index]

        return self._retrying(read)

    def readiness(self, counted: bool = True, max_attempts: int = 5) -> tuple[int, int, int]:
        def read() -> tuple[int, int, int]:
            # Store-wide (grandbo_outbox_counts() refuses an org's transaction), and bounded: a server that takes the
            # connection but does not answer is a 503 within the store timeout, not a hung probe.
            with self._tx(statement_timeout=reach.health_timeout(self._connect_timeout)) as conn:
                row = conn.execute(_COUNTED, (max_attempts,)) if counted else conn.execute(_UNCOUNTED)
                schema, waiting, failed = row.fetchone()  # type: ignore[misc]
            return int(schema), int(waiting), int(failed)

        return self._retrying(read)

    def claim_jobs(
        self, limit: int, max_attempts: int, org_id: str | None = None, lease_seconds: float = 300.0,
        retry_seconds: float = 30.0, lost_batch: int = 1,
    ) -> list[EmbedJob]:  # fmt: skip
        # One transaction, row-level security switched org by org (grandbo.org_id). The orgs' ready jobs
        # are read in (available_at, job_id) order from embed_outbox_ready, never sorted: without fresh
        # statistics after a bulk import the planner would sort the org's whole backlog (63 ms at 100,000
        # jobs, against 0.3 ms), so sorting is switched off for the reads.
        with self._writing(None) as conn:
            orgs = [org_id] if org_id else [row[0] for row in conn.execute("SELECT org_id FROM orgs")]
            conn.execute("SELECT set_config('enable_sort', 'off', true)")

            def fetch(
                requests: Mapping[str, tuple[int, tuple[Any, ...] | None]],
            ) -> dict[str, list[queue.Candidate]]:
                cursors = []
                with conn.pipeline():  # one round trip for every org asked
                    for org, (count, after) in requests.items():
                        conn.execute(SET_ORG, (org,))
                        cursors.append((org, conn.execute(
                            f"SELECT available_at, job_id, attempts, claimed_until IS NOT NULL, {_LOSSES} "
                            f"FROM embed_outbox WHERE org_id = %s AND {_READY} "
                            "AND (available_at, job_id) > (%s::timestamptz, %s::bigint) "
                            "ORDER BY available_at, job_id LIMIT %s",
                            (*LOSS_MARKS, org, max_attempts, *(after or ("-infinity", -1)), count),
                        )))  # fmt: skip
                return {
                    org: [queue.Candidate(org, (at, job), job, attempts, lapsed, lost)
                          for at, job, attempts, lapsed, lost in cur.fetchall()]
                    for org, cur in cursors
                }  # fmt: skip

            chosen, cursor = queue.claim(orgs, limit, fetch, self._claim_after,
                                         lambda lapsed: self._count_lapsed(conn, lapsed, max_attempts),
                                         max_attempts, retry_seconds, lost_batch)  # fmt: skip
            conn.execute("SELECT set_config('enable_sort', 'on', true)")
            if org_id is None and cursor is not None:
                self._claim_after = cursor
            order = {candidate.job_id: n for n, candidate in enumerate(chosen)}
            by_org: dict[str, list[int]] = {}
            for candidate in chosen:
                by_org.setdefault(candidate.org_id, []).append(candidate.job_id)
            lost = {candidate.job_id for candidate in chosen if candidate.lapsed or candidate.lost}
            alone = {candidate.job_id for candidate in chosen if candidate.alone}
            jobs = self._lease(conn, by_org, max_attempts, lease_seconds)
        return sorted((replace(job, lost=job.job_id in lost, alone=job.job_id in alone) for job in jobs),
                      key=lambda job: order[job.job_id])  # fmt: skip

    def _count_lapsed(self, conn: psycopg.Connection[Any], lapsed: Sequence[queue.Lapsed], max_attempts: int) -> None:
        """Count a failed attempt for each job whose lease ran out (`queue.leasable`), due again after its delay; one
        pipelined round trip. A job another worker holds meanwhile is skipped (SKIP LOCKED), and one it leased or
        counted already no longer matches."""
        by_org: dict[str, list[queue.Lapsed]] = {}
        for one in lapsed:
            by_org.setdefault(one.candidate.org_id, []).append(one)
        with conn.pipeline():
            counted = {}
            for org, group in by_org.items():
                conn.execute(SET_ORG, (org,))
                counted[org] = conn.execute(
                    "UPDATE embed_outbox o SET attempts = o.attempts + 1, last_error = l.error, "
                    "claimed_until = NULL, claimed_by = NULL, "
                    "available_at = CASE WHEN l.delay > 0 THEN now() + make_interval(secs => l.delay) "
                    "ELSE o.available_at END "
                    "FROM unnest(%s::bigint[], %s::float8[], %s::text[]) l(job_id, delay, error) "
                    "WHERE o.org_id = %s AND o.job_id = l.job_id AND o.job_id IN ("
                    "  SELECT job_id FROM embed_outbox WHERE org_id = %s AND job_id = ANY(%s) "
                    f"  AND claimed_until <= now() {SKIP_LOCKED}"
                    ") RETURNING o.entry_id, o.attempts",
                    ([one.candidate.job_id for one in group], [one.delay for one in group],
                     [one.error for one in group], org, org, [one.candidate.job_id for one in group]),
                )  # fmt: skip
        for org, cursor in counted.items():
            for entry_id, attempts in cursor.fetchall():
                queue.log_lost(org, entry_id, attempts, max_attempts)

    def _lease(
        self, conn: psycopg.Connection[Any], by_org: Mapping[str, list[int]], max_attempts: int, lease_seconds: float
    ) -> list[EmbedJob]:
        """Lease those of each org's `job_ids` that no other worker holds (SKIP LOCKED: concurrent workers each
        take different jobs and none waits for another) and are still ready; the jobs with their text. Two
        pipelined round trips whatever the number of orgs (a claim serves up to one org per job)."""
        with conn.pipeline():
            leases = {}
            for org, job_ids in by_org.items():
                conn.execute(SET_ORG, (org,))
                leases[org] = conn.execute(
                    "UPDATE embed_outbox o SET claimed_until = now() + make_interval(secs => %s), claimed_by = %s "
                    "FROM ("
                    f"  SELECT job_id FROM embed_outbox WHERE org_id = %s AND job_id = ANY(%s) AND {_READY} "
                    f"  {SKIP_LOCKED}"
                    ") ready WHERE o.org_id = %s AND o.job_id = ready.job_id "
                    "RETURNING o.job_id, o.entry_id, o.attempts, o.claimed_until",
                    (lease_seconds, holder(), org, job_ids, max_attempts, org),
                )
        claimed = {org: rows for org, cursor in leases.items() if (rows := cursor.fetchall())}
        with conn.pipeline():
            reads = {}
            for org, rows in claimed.items():
                conn.execute(SET_ORG, (org,))
                reads[org] = conn.cursor(row_factory=dict_row).execute(
                    f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE org_id = %s AND entry_id = ANY(%s)",
                    (org, [row[1] for row in rows]),
                )
        jobs: list[EmbedJob] = []
        for org, rows in claimed.items():
            try:
                found = {record["entry_id"]: row_from_db(record) for record in reads[org].fetchall()}
            except (psycopg.DataError, ValueError):  # a row the driver refuses: read them one by one
                conn.execute(SET_ORG, (org,))
                found = self._readable_rows(conn, org, [row[1] for row in rows])
            jobs.extend(self._jobs_of(conn, org, rows, found))
        return jobs

    def _jobs_of(
        self,
        conn: psycopg.Connection[Any],
        org: str,
        claimed: Sequence[tuple[Any, ...]],
        rows: Mapping[str, projection.Row],
    ) -> list[EmbedJob]:
        """The leased jobs whose entry is active; a job whose entry is gone is dropped, one whose row cannot
        be read fails for good."""
        jobs, gone = [], []
        for job_id, entry_id, attempts, until in claimed:
            row = rows.get(entry_id)
            if row is _UNREADABLE:
                continue
            if row is None or row["status"] != Status.ACTIVE.value:
                gone.append(job_id)
                continue
            jobs.append(EmbedJob(job_id, org, entry_id, row["content_hash"], projection.embed_text(row), attempts,
                                 leased_until=until))  # fmt: skip
        unreadable = [job_id for job_id, entry_id, *_ in claimed if rows.get(entry_id) is _UNREADABLE]
        if gone or unreadable:
            conn.execute(SET_ORG, (org,))
        if gone:
            conn.execute("DELETE FROM embed_outbox WHERE org_id = %s AND job_id = ANY(%s)", (org, gone))
        if unreadable:
            conn.execute(
                "UPDATE embed_outbox SET attempts = 1000000, claimed_until = NULL, claimed_by = NULL, last_error = %s "
                "WHERE org_id = %s AND job_id = ANY(%s)",
                (_UNREADABLE["error"], org, unreadable),
            )
        return jobs

    def _readable_rows(
        self, conn: psycopg.Connection[Any], org_id: str, entry_ids: Sequence[str]
    ) -> dict[str, projection.Row]:
        """`_rows`, but a row that cannot be read (a value the driver refuses, written before the write seam
        checked it) maps to `_UNREADABLE` instead of failing every other job of the claim, and of other orgs."""
        try:
            with conn.transaction():  # a savepoint: the claim survives a refused read
                return self._rows(conn, org_id, entry_ids)
        except (psycopg.DataError, ValueError):
            pass
        rows: dict[str, projection.Row] = {}
        for entry_id in entry_ids:
            try:
                with conn.transaction():
                    rows.update(self._rows(conn, org_id, [entry_id]))
            except (psycopg.DataError, ValueError) as error:
                log.error("store.row_unreadable", org_id=org_id, entry_id=entry_id, error=str(error)[:200])
                rows[entry_id] = _UNREADABLE
        return rows

    def complete_jobs(self, space: EmbeddingSpace, results: Sequence[EmbedResult]) -> int:
        written = 0
        by_org: dict[str, list[EmbedResult]] = {}
        busy: list[EmbedJob] = []
        for result in results:
            if result.vector is not None:
                by_org.setdefault(result.job.org_id, []).append(result)
        for org_id, group in by_org.items():
            try:
                filed = self._complete_org(space, org_id, group)
            except (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError) as error:
                # One org's refused write must not stop the others; its jobs come back when the lease ends, each
                # counted as a failed attempt then (`queue.leasable`): a write refused every time stops.
                log.error("store.complete_failed", org_id=org_id, jobs=len(group), error=str(error)[:200])
                continue
            if filed is None:
                log.info("store.complete_deferred", org_id=org_id, jobs=len(group), reason="org_busy")
                busy += [result.job for result in group]
            else:
                written += filed
        if busy:
            self._release_busy(busy)
        return written

    def _release_busy(self, jobs: Sequence[EmbedJob]) -> None:
        """Give back the claim of jobs whose org was busy (`_complete_org`), to be claimed again BUSY_RETRY_S later
        (not at once: a worker claimed them, embedded them and gave them back every second while the lock was held,
        a paid provider call each time), counting no attempt; when their rows are held too, they come back when the
        lease ends (counted then as a lost lease: rare, and one attempt). Only the jobs still held under the lease
        they were claimed with, as `fail_jobs`: one leased again since is its new holder's."""
        done: set[int] = set()
        for org_id in {job.org_id for job in jobs}:
            with self._writing(org_id) as conn, suppress(psycopg.errors.LockNotAvailable), _briefly(conn):
                done |= {row[0] for row in conn.execute(
                    "UPDATE embed_outbox o SET claimed_until = NULL, claimed_by = NULL, "
                    f"available_at = greatest(o.available_at, now() + make_interval(secs => %s)) {HELD}",
                    (BUSY_RETRY_S, *held(org_id, jobs)),
                )}  # fmt: skip
                queue.log_not_held("release", [job for job in jobs if job.org_id == org_id and job.job_id not in done])

    def _complete_org(self, space: EmbeddingSpace, org_id: str, group: Sequence[EmbedResult]) -> int | None:
        """File one org's vectors; the count filed, or None when the org was busy: its writer lock held by a long
        transaction past ORG_LOCK_WAIT_MS (a language change re-derives every entry under it). A worker waited for it
        without a bound, and with it every other org's vectors it had computed and its next claim: another org's new
        memories waited 4.5-5 s for their vectors after each of one org's language changes (probe 18)."""
        with self._writing(org_id) as conn:
            try:
                with _briefly(conn):
                    # The space cannot change until this commits: ROW SHARE waits for `switch_space`'s EXCLUSIVE
                    # lock and holds it off. (Not SELECT ... FOR SHARE: that is filtered by store_meta's UPDATE
                    # policy, which an org's transaction does not pass.) Taken before the org's row, as
                    # `switch_space` takes them (it renews every org's epoch under its lock): the other way round
                    # the two deadlock.
                    conn.execute("LOCK TABLE store_meta IN ROW SHARE MODE")
                    # Then the org's writer lock, before the entries' rows below (as the write path takes them):
                    # the vectors' sequence numbers are taken under it.
                    found = self._lock_org(conn, org_id)
            except psycopg.errors.LockNotAvailable:
                return None
            if not found:
                return 0  # dropped meanwhile: its jobs went with it
            current = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
            if (current.get("provider"), current.get("model"), current.get("dimension")) != (
                space.provider,
                space.model,
                str(space.dimension),
            ):
                raise EntryStateError(
                    f"The store's embedding space changed while vectors of {space} were being computed; "
                    "they were not written. Restart the worker.",
                    detail={"worker_space": str(space)},
                )
            # Only for entries still active with the text the vector was computed from. FOR SHARE waits for
            # a retire or correction of the row in flight and reads the row it commits (so a vector never
            # lands on an entry retired meanwhile); the write path deletes a retired entry's vector in its
            # own transaction, after which this one finds the row no longer active. And only while the job is
            # queued: its id is never given again, so the job of an org dropped since (maybe created again
            # under its name, with the same entry) files nothing in the new org (`grandbo.incarnation`).
            current_hash = dict(
                conn.execute(
                    "SELECT entry_id, content_hash FROM memory_entries e WHERE org_id = %s AND status = 'active' "
                    "AND entry_id = ANY(%s) AND EXISTS (SELECT 1 FROM embed_outbox o WHERE o.org_id = e.org_id "
                    f"AND o.entry_id = e.entry_id AND o.job_id = ANY(%s)) {FOR_SHARE}",
                    (org_id, [r.job.entry_id for r in group], [r.job.job_id for r in group]),
                ).fetchall()
            )
            fresh = [r for r in group if current_hash.get(r.job.entry_id) == r.job.content_hash]
            last = self._take_vector_seqs(conn, org_id, len(fresh)) if fresh else 0
            rows = [(org_id, r.job.entry_id, space.provider, space.model, space.dimension, r.job.content_hash,
                     np.asarray(r.vector, dtype=np.float32), vseq)
                    for vseq, r in enumerate(fresh, last + 1)]  # fmt: skip
            for start in range(0, len(rows), 1000):  # a statement a thousand: migration 34's count runs once each
                chunk = rows[start : start + 1000]
                conn.execute(
                    "INSERT INTO entry_vectors (org_id, entry_id, provider, model, dimension, content_hash, "
                    f"embedded_at, embedding, vseq) VALUES {', '.join([_VECTOR_ROW] * len(chunk))} {VECTOR_UPSERT}",
                    [value for row in chunk for value in row],
                )
            conn.execute(
                "DELETE FROM embed_outbox WHERE org_id = %s AND job_id = ANY(%s)",
                (org_id, [r.job.job_id for r in group]),
            )
        if fresh:
            self._want_vector_index(org_id, last + len(fresh))
        return len(fresh)

    def retry_failed(self, org_id: str | None = None) -> int:
        return self._update_each_org(
            org_id,
            "UPDATE embed_outbox SET attempts = 0, available_at = now(), claimed_until = NULL, claimed_by = NULL "
            "WHERE org_id = %s AND (attempts > 0 OR claimed_until IS NOT NULL OR available_at > now()) "
            "AND attempts <> %s",
            UNEMBEDDABLE,
        )

    def enqueue_missing(self, org_id: str | None = None) -> int:
        space = self.space()
        if space is None:
            return 0
        count = 0
        for org in [org_id] if org_id else self.orgs():
            with self._writing(org) as conn:
                count += self._enqueue_missing(conn, org, space)
        return count

    def _enqueue_missing(self, conn: psycopg.Connection[Any], org_id: str, space: EmbeddingSpace) -> int:
        if not self._hold_org(conn, org_id):
            return 0
        return conn.execute(
            "INSERT INTO embed_outbox (org_id, entry_id, content_hash) "
            "SELECT e.org_id, e.entry_id, e.content_hash FROM memory_entries e "
            "LEFT JOIN entry_vectors v ON v.org_id = e.org_id AND v.entry_id = e.entry_id "
            "  AND v.provider = %s AND v.model = %s AND v.dimension = %s AND v.content_hash = e.content_hash "
            "WHERE e.org_id = %s AND e.status = 'active' AND v.entry_id IS NULL "
            "ON CONFLICT (org_id, entry_id) DO NOTHING",
            (space.provider, space.model, space.dimension, org_id),
        ).rowcount


@contextmanager
def _briefly(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Within, each lock is waited for ORG_LOCK_WAIT_MS at most, in a savepoint: LockNotAvailable leaves the
    transaction going (the caller decides); after, locks are waited for as the role's setting says."""
    conn.execute(f"SET LOCAL lock_timeout = '{ORG_LOCK_WAIT_MS}ms'")
    with conn.transaction():
        yield
    conn.execute("SET LOCAL lock_timeout TO DEFAULT")
