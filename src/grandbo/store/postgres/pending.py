"""The Postgres store's pending work (`ports.PendingWork`): write-behinds a request acknowledged, recorded in
the write's own transaction (`put_documents(..., work)`), leased by the runner that does them (SKIP LOCKED:
concurrent runners take different work), deleted when done. A lease records its holder (`store.sql.holders`): a
runner that dies leaves its lease to run out, or to be freed at once by a re-driver that proves its process gone.
A lease that ends names no holder: a runner from before migration 29 leases without naming itself, and its live
lease must not name the runner that held the piece before (a re-driver that found that one gone would end it).

Row-level security walls the table by org like every other (migration 14); which orgs have ready work, and
the store-wide counts, come from the owner's `grandbo_pending_work()` in one statement."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from grandbo.errors import WorkDoneError
from grandbo.ports import NewWork, Work
from grandbo.store import queue
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.sql.beats import Beating
from grandbo.store.sql.holders import LAPSED, LAPSED_COUNTED, holder

_READY = "available_at <= now() AND attempts < %s AND (claimed_until IS NULL OR claimed_until <= now())"
_LEASABLE = "attempts < %s AND (claimed_until IS NULL OR claimed_until <= now())"  # due or not
_LEASE = (
    "UPDATE pending_work w SET claimed_until = now() + make_interval(secs => %s), claimed_by = %s, "
    f"{LAPSED_COUNTED.format('%s').replace('claimed_until', 'w.claimed_until')} FROM ("
    f"  SELECT work_id FROM pending_work WHERE org_id = %s AND {{which}} AND {_LEASABLE} FOR UPDATE SKIP LOCKED"
    ") ready WHERE w.org_id = %s AND w.work_id = ready.work_id "
    "RETURNING w.work_id, w.org_id, w.kind, w.subject, w.payload, w.attempts, "
    "(SELECT incarnation FROM orgs WHERE orgs.org_id = w.org_id)"  # in the lease's snapshot (`Work.incarnation`)
)


def _works(rows: Sequence[tuple[Any, ...]]) -> list[Work]:
    return sorted((Work(*row) for row in rows), key=lambda w: w.work_id)


def _grouped(work: Sequence[Work]) -> list[tuple[str, list[int]]]:
    return [(org, [w.work_id for w in work if w.org_id == org]) for org in sorted({w.org_id for w in work})]


def record_work(conn: psycopg.Connection[Any], org_id: str, work: Sequence[NewWork]) -> None:
    """Within the org's write transaction (`put_documents`): record `work`, due after each one's `after`."""
    if work:
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO pending_work (org_id, kind, subject, payload, available_at) "
                "VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))",
                [(org_id, w.kind, w.subject, Jsonb(dict(w.payload)), w.after) for w in work],
            )


def complete_work_in(conn: psycopg.Connection[Any], org_id: str, done: Sequence[Work]) -> None:
    """Within the org's write transaction (`put_documents`): delete the leased work `done` completes; WorkDoneError
    (the write is rolled back) when any of it is gone: another runner completed it first."""
    if done and conn.execute(
        "DELETE FROM pending_work WHERE org_id = %s AND work_id = ANY(%s)", (org_id, [w.work_id for w in done])
    ).rowcount != len(done):
        raise WorkDoneError(f"The work {done[0].kind} of {done[0].subject!r} was done by another runner.", detail={})


class PendingWorkMixin(Beating, PostgresConnection):
    """`ports.PendingWork` for `PostgresStore` (its transactions, scoped by org)."""

    _work_after: str | None = None  # the claim's round-robin cursor (`store.queue`)

    def _renew_leases(self, org_id: str, ids: Sequence[int], seconds: float) -> list[int]:
        with self._writing(org_id) as conn:
            return [int(row[0]) for row in conn.execute(
                "UPDATE pending_work SET claimed_until = now() + make_interval(secs => %s) WHERE org_id = %s "
                "AND work_id = ANY(%s) AND claimed_by = %s AND claimed_until IS NOT NULL RETURNING work_id",
                (seconds, org_id, list(ids), holder()),
            ).fetchall()]  # fmt: skip

    def _per_org(self, max_attempts: int) -> list[tuple[str, int, int, int]]:
        """(org, ready, waiting, failed) of every org with pending work, in one statement."""
        with self._tx() as conn:  # store-wide: the function refuses an org's transaction
            rows = conn.execute("SELECT * FROM grandbo_pending_work(%s)", (max_attempts,)).fetchall()
        return [(str(org), int(ready), int(waiting), int(failed)) for org, ready, waiting, failed in rows]

    def claim_work(self, limit: int, max_attempts: int, lease_seconds: float) -> list[Work]:
        orgs = [org for org, ready, _, _ in self._retrying(lambda: self._per_org(max_attempts)) if ready]
        if not orgs:
            return []
        beats = self._heartbeat()
        with self._writing(None) as conn:

            def fetch(requests: Mapping[str, tuple[int, tuple[Any, ...] | None]]) -> dict[str, list[queue.Candidate]]:
                found: dict[str, list[queue.Candidate]] = {}
                for org, (count, after) in requests.items():
                    conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
                    rows = conn.execute(
                        f"SELECT available_at, work_id FROM pending_work WHERE org_id = %s AND {_READY} "
                        "AND (available_at, work_id) > (%s::timestamptz, %s::bigint) "
                        "ORDER BY available_at, work_id LIMIT %s",
                        (org, max_attempts, *(after or ("-infinity", -1)), count),
                    ).fetchall()
                    found[org] = [queue.Candidate(org, (at, work_id), work_id) for at, work_id in rows]
                return found

            chosen, cursor = queue.fair_claim(orgs, limit, fetch, self._work_after)
            if cursor is not None:
                self._work_after = cursor
            order = {candidate.job_id: n for n, candidate in enumerate(chosen)}
            by_org: dict[str, list[int]] = {}
            for candidate in chosen:
                by_org.setdefault(candidate.org_id, []).append(candidate.job_id)
            leased: list[Work] = []
            for org, ids in by_org.items():
                conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
                leased += _works(conn.execute(
                    _LEASE.format(which="work_id = ANY(%s)"), (beats.lease(lease_seconds), holder(), LAPSED, org,
                                                               ids, max_attempts, org)
                ).fetchall())  # fmt: skip
        beats.held(leased, lease_seconds)
        return sorted(leased, key=lambda w: order[w.work_id])

    def claim_work_of(
        self, org_id: str, kind: str, subjects: Sequence[str], max_attempts: int, lease_seconds: float
    ) -> list[Work]:
        beats = self._heartbeat()
        with self._writing(org_id) as conn:
            leased = _works(conn.execute(
                _LEASE.format(which="kind = %s AND subject = ANY(%s)"),
                (beats.lease(lease_seconds), holder(), LAPSED, org_id, kind, list(subjects), max_attempts, org_id),
            ).fetchall())  # fmt: skip
        beats.held(leased, lease_seconds)
        return leased

    def work_holders(self) -> list[tuple[str, str]]:
        def read() -> list[tuple[str, str]]:
            with self._tx() as conn:  # store-wide: the function refuses an org's transaction
                rows = conn.execute("SELECT org_id, claimed_by FROM grandbo_pending_holders()").fetchall()
            return [(str(org), str(by)) for org, by in rows]

        return self._retrying(read)

    def free_work_held_by(self, org_id: str, holder: str, error: str, retry_seconds: float) -> list[Work]:
        # The delay as `pending_work.lost_delay` gives it, of the attempt counted now (attempts + 1: SET reads the
        # row as it was): none the first time, then the retry delay, doubling, one step behind, an hour at most.
        with self._writing(org_id) as conn:
            return _works(conn.execute(
                "UPDATE pending_work SET claimed_until = NULL, claimed_by = NULL, attempts = attempts + 1, "
                "last_error = %s, available_at = now() + make_interval(secs => CASE WHEN attempts = 0 THEN 0 "
                "ELSE least(3600, %s * power(2, least(attempts - 1, 32))) END) "
                "WHERE org_id = %s AND claimed_by = %s AND claimed_until > now() "
                "RETURNING work_id, org_id, kind, subject, payload, attempts, NULL::bigint",
                (error[:2000], retry_seconds, org_id, holder),
            ).fetchall())  # fmt: skip

    def release_work(self, work: Sequence[Work]) -> None:
        self._heartbeat().dropped(work)
        for org_id, ids in _grouped(work):
            with self._writing(org_id) as conn:
                conn.execute("UPDATE pending_work SET claimed_until = NULL, claimed_by = NULL "
                             "WHERE org_id = %s AND work_id = ANY(%s)", (org_id, ids))  # fmt: skip

    def complete_work(self, work: Sequence[Work]) -> None:
        self._heartbeat().dropped(work)
        for org_id, ids in _grouped(work):
            with self._writing(org_id) as conn:
                conn.execute("DELETE FROM pending_work WHERE org_id = %s AND work_id = ANY(%s)", (org_id, ids))

    def fail_work(self, work: Sequence[Work], error: str, retry_at: datetime) -> None:
        self._heartbeat().dropped(work)
        for org_id, ids in _grouped(work):
            with self._writing(org_id) as conn:
                conn.execute(
                    "UPDATE pending_work SET attempts = attempts + 1, last_error = %s, available_at = %s, "
                    "claimed_until = NULL, claimed_by = NULL WHERE org_id = %s AND work_id = ANY(%s)",
                    (error[:2000], retry_at, org_id, ids),
                )

    def work_counts(self, max_attempts: int) -> tuple[int, int]:
        def read() -> tuple[int, int]:
            with self._tx() as conn:  # one statement, one row, whatever the number of orgs (`/readyz`)
                row = conn.execute(
                    "SELECT coalesce(sum(waiting), 0), coalesce(sum(failed), 0) FROM grandbo_pending_work(%s)",
                    (max_attempts,),
                ).fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

        return self._retrying(read)

    def org_work_counts(self, org_id: str, max_attempts: int) -> tuple[int, int]:
        def read() -> tuple[int, int]:
            with self._tx(org_id) as conn:
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE attempts < %s), count(*) FILTER (WHERE attempts >= %s) "
                    "FROM pending_work WHERE org_id = %s",
                    (max_attempts, max_attempts, org_id),
                ).fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

        return self._retrying(read)

    def retry_failed_work(self, org_id: str | None = None) -> int:
        # Counted against 0 attempts, every org with any pending work counts it all as failed: those are asked.
        orgs = [org_id] if org_id else [org for org, _, _, failed in self._per_org(0) if failed]
        count = 0
        for org in orgs:
            with self._writing(org) as conn:
                count += conn.execute(
                    "UPDATE pending_work SET attempts = 0, available_at = now(), claimed_until = NULL, "
                    "claimed_by = NULL WHERE org_id = %s AND attempts > 0",
                    (org,),
                ).rowcount
        return count
