"""The embedded store's pending work (`ports.PendingWork`): write-behinds a request acknowledged, recorded in
the write's own transaction (`put_documents(..., work)`), leased by the runner that does them, deleted when
done. A lease records its holder (`store.sql.holders`): a runner that dies leaves its lease to run out, or to be
freed at once by a re-driver that proves its process gone. A lease that ends names no holder: a runner from before
migration 29 leases without naming itself, and its live lease must not name the runner that held the piece before
(a re-driver that found that one gone would end it)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from grandbo.errors import WorkDoneError
from grandbo.model import utcnow
from grandbo.pending_work import lost_delay
from grandbo.ports import NewWork, Work
from grandbo.store import queue
from grandbo.store.sql.beats import Beating
from grandbo.store.sql.holders import LAPSED, LAPSED_COUNTED, holder
from grandbo.store.sqlite.connection import Connection

_READY = "available_at <= ? AND attempts < ? AND (claimed_until IS NULL OR claimed_until <= ?)"
_COLUMNS = "work_id, org_id, kind, subject, payload, attempts"
_LAPSED_COUNTED = LAPSED_COUNTED.format("?")


def _work(row: sqlite3.Row, incarnation: int | None) -> Work:
    return Work(row[0], row[1], row[2], row[3], json.loads(row[4]), row[5], incarnation)


def record_work(db: sqlite3.Connection, org_id: str, work: Sequence[NewWork]) -> None:
    """Within a write transaction (`put_documents`): record `work` for the org, due after each one's `after`."""
    now = utcnow()
    db.executemany(
        "INSERT INTO pending_work (org_id, kind, subject, payload, available_at, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        [(org_id, w.kind, w.subject, json.dumps(dict(w.payload)), (now + timedelta(seconds=w.after)).isoformat(),
          now.isoformat()) for w in work],
    )  # fmt: skip


def complete_work_in(db: sqlite3.Connection, org_id: str, done: Sequence[Work]) -> None:
    """Within a write transaction (`put_documents`): delete the leased work `done` completes; WorkDoneError (the
    write is rolled back) when any of it is gone: another runner completed it first."""
    if done and db.executemany(
        "DELETE FROM pending_work WHERE org_id = ? AND work_id = ?", [(org_id, w.work_id) for w in done]
    ).rowcount != len(done):
        raise WorkDoneError(f"The work {done[0].kind} of {done[0].subject!r} was done by another runner.", detail={})


class PendingWorkMixin(Beating, Connection):
    """`ports.PendingWork` for `SQLiteStore`."""

    _work_after: str | None = None  # the claim's round-robin cursor (`store.queue`)

    def _renew_leases(self, org_id: str, ids: Sequence[int], seconds: float) -> list[int]:
        until, among = (utcnow() + timedelta(seconds=seconds)).isoformat(), ", ".join("?" * len(ids))
        with self._write(org_id) as db:
            return [int(row[0]) for row in db.execute(
                f"UPDATE pending_work SET claimed_until = ? WHERE org_id = ? AND work_id IN ({among}) "
                "AND claimed_by = ? AND claimed_until IS NOT NULL RETURNING work_id",
                (until, org_id, *ids, holder()),
            ).fetchall()]  # fmt: skip

    def _lease(self, db: sqlite3.Connection, ids: Sequence[int], lease_seconds: float) -> list[Work]:
        """Lease `ids` here for `lease_seconds` at most (for BEATS beats, renewed: `store.sql.beats`)."""
        if not ids:
            return []
        beats = self._heartbeat()
        until = (utcnow() + timedelta(seconds=beats.lease(lease_seconds))).isoformat()
        rows = db.execute(
            f"UPDATE pending_work SET claimed_until = ?, claimed_by = ?, {_LAPSED_COUNTED} "
            f"WHERE work_id IN ({', '.join('?' * len(ids))}) RETURNING {_COLUMNS}",
            (until, holder(), LAPSED, *ids),
        ).fetchall()
        order = {work_id: n for n, work_id in enumerate(ids)}
        orgs = sorted({row[1] for row in rows})  # their incarnations, in the lease's transaction
        born = dict(db.execute(f"SELECT org_id, incarnation FROM orgs WHERE org_id IN ({', '.join('?' * len(orgs))})",
                               orgs).fetchall()) if orgs else {}  # fmt: skip
        leased = sorted((_work(row, born.get(row[1])) for row in rows), key=lambda w: order[w.work_id])
        beats.held(leased, lease_seconds)  # before the commit: a renewal waits for it (the write lock)
        return leased

    def claim_work(self, limit: int, max_attempts: int, lease_seconds: float) -> list[Work]:
        now = utcnow().isoformat()
        with self._reading() as db:  # a poll that finds nothing due takes no write lock (servers poll often)
            due = db.execute(f"SELECT 1 FROM pending_work WHERE {_READY} LIMIT 1", (now, max_attempts, now))
            if due.fetchone() is None:
                return []
        with self._write() as db:
            orgs = [row[0] for row in db.execute(
                f"SELECT DISTINCT org_id FROM pending_work WHERE {_READY}", (now, max_attempts, now)
            )]  # fmt: skip

            def fetch(requests: Mapping[str, tuple[int, tuple[Any, ...] | None]]) -> dict[str, list[queue.Candidate]]:
                found: dict[str, list[queue.Candidate]] = {}
                for org, (count, after) in requests.items():
                    rows = db.execute(
                        f"SELECT available_at, work_id FROM pending_work WHERE org_id = ? AND {_READY} "
                        "AND (available_at, work_id) > (?, ?) ORDER BY available_at, work_id LIMIT ?",
                        (org, now, max_attempts, now, *(after or ("", -1)), count),
                    ).fetchall()
                    found[org] = [queue.Candidate(org, (row[0], row[1]), row[1]) for row in rows]
                return found

            chosen, cursor = queue.fair_claim(orgs, limit, fetch, self._work_after)
            if cursor is not None:
                self._work_after = cursor
            return self._lease(db, [candidate.job_id for candidate in chosen], lease_seconds)

    def claim_work_of(
        self, org_id: str, kind: str, subjects: Sequence[str], max_attempts: int, lease_seconds: float
    ) -> list[Work]:
        now = utcnow().isoformat()
        with self._write(org_id) as db:
            among = ", ".join("?" * len(subjects))
            ids = [row[0] for row in db.execute(  # due or not: the writer's own run comes first
                f"SELECT work_id FROM pending_work WHERE org_id = ? AND kind = ? AND subject IN ({among}) "
                "AND attempts < ? AND (claimed_until IS NULL OR claimed_until <= ?) ORDER BY work_id",
                (org_id, kind, *subjects, max_attempts, now),
            )]  # fmt: skip
            return self._lease(db, ids, lease_seconds)

    def work_holders(self) -> list[tuple[str, str]]:
        now = utcnow().isoformat()
        with self._reading() as db:
            return [(str(org), str(by)) for org, by in db.execute(
                "SELECT DISTINCT org_id, claimed_by FROM pending_work WHERE claimed_until > ? "
                "AND claimed_by IS NOT NULL",
                (now,),
            )]  # fmt: skip

    def free_work_held_by(self, org_id: str, holder: str, error: str, retry_seconds: float) -> list[Work]:
        now = utcnow()
        with self._write(org_id) as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM pending_work WHERE org_id = ? AND claimed_by = ? AND claimed_until > ?",
                (org_id, holder, now.isoformat()),
            ).fetchall()
            lost = [replace(_work(row, None), attempts=row[5] + 1) for row in rows]
            db.executemany(
                "UPDATE pending_work SET claimed_until = NULL, claimed_by = NULL, attempts = ?, last_error = ?, "
                "available_at = ? WHERE org_id = ? AND work_id = ?",
                [(w.attempts, error[:2000], _after(now, lost_delay(w.attempts, retry_seconds)), org_id, w.work_id)
                 for w in lost],
            )  # fmt: skip
        return lost

    def complete_work(self, work: Sequence[Work]) -> None:
        self._heartbeat().dropped(work)
        with self._write(_one_org(work)) as db:
            db.executemany("DELETE FROM pending_work WHERE org_id = ? AND work_id = ?",
                           [(w.org_id, w.work_id) for w in work])  # fmt: skip

    def release_work(self, work: Sequence[Work]) -> None:
        self._heartbeat().dropped(work)
        with self._write(_one_org(work)) as db:
            db.executemany("UPDATE pending_work SET claimed_until = NULL, claimed_by = NULL "
                           "WHERE org_id = ? AND work_id = ?", [(w.org_id, w.work_id) for w in work])  # fmt: skip

    def fail_work(self, work: Sequence[Work], error: str, retry_at: datetime) -> None:
        self._heartbeat().dropped(work)
        with self._write(_one_org(work)) as db:
            db.executemany(
                "UPDATE pending_work SET attempts = attempts + 1, last_error = ?, available_at = ?, "
                "claimed_until = NULL, claimed_by = NULL WHERE org_id = ? AND work_id = ?",
                [(error[:2000], retry_at.isoformat(), w.org_id, w.work_id) for w in work],
            )

    def _counts(self, max_attempts: int, where: str, args: tuple[Any, ...]) -> tuple[int, int]:
        with self._reading() as db:
            waiting, failed = db.execute(
                "SELECT count(*) FILTER (WHERE attempts < ?), count(*) FILTER (WHERE attempts >= ?) "
                f"FROM pending_work {where}",
                (max_attempts, max_attempts, *args),
            ).fetchone()
        return int(waiting), int(failed)

    def work_counts(self, max_attempts: int) -> tuple[int, int]:
        return self._counts(max_attempts, "", ())

    def org_work_counts(self, org_id: str, max_attempts: int) -> tuple[int, int]:
        return self._counts(max_attempts, "WHERE org_id = ?", (org_id,))

    def retry_failed_work(self, org_id: str | None = None) -> int:
        with self._write(org_id) as db:
            return db.execute(
                "UPDATE pending_work SET attempts = 0, available_at = ?, claimed_until = NULL, claimed_by = NULL "
                "WHERE attempts > 0 AND (? IS NULL OR org_id = ?)",
                (utcnow().isoformat(), org_id, org_id),
            ).rowcount


def _after(now: datetime, seconds: float) -> str:
    return (now + timedelta(seconds=seconds)).isoformat()


def _one_org(work: Sequence[Work]) -> str | None:
    """The org whose turn a write of `work` takes (`turns.TurnLock`): theirs when it is one org's (a request's own
    work, the usual case), else the store-wide turn (the re-driver's claims across orgs)."""
    orgs = {item.org_id for item in work}
    return orgs.pop() if len(orgs) == 1 else None
