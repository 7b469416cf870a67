"""Durable write-behinds: work a request acknowledged and left for later, done until it is done.

An incident's close leaves its memories and its runbook's ledger outcome to a write-behind, an edit its LLM
classification, a webhook delivery the triage of its new alerts. Each is recorded as pending work in the
same transaction as the write that acknowledges it (`OrgDocuments.put(..., work)`), so a process killed
right after its answer loses nothing:

* the process that wrote it runs it at once (`OrgMemory.defer_work`: on its write-behind pools, or before
  returning where there are none), leasing it first, and deletes it when done;
* `Redriver` runs whatever is left (its process died, it failed, its lease ran out) in `grandbo serve` and
  `grandbo mcp` from start-up on, in every `grandbo worker`, and when a CLI command opens the embedded store
  (`catch_up`): leased fairly across the organizations (`store.queue`), so one org's backlog never starves
  another's.

A piece is re-driven through a handle opened for the incarnation of its org when it was leased
(`Work.incarnation`): an org dropped since, and maybe created again under its name, takes it along; the new org is
neither read nor written for it (`grandbo.incarnation`).

Running one twice is harmless: every kind is idempotent (an incident's sync writes entries under ids of its
own and records its outcome under one id; a signal settles once, guarded by its version; an alert is triaged
while it is still `received`). An alert's triage completes its work in the write that keeps its result (`COMPLETED`,
`OrgDocuments.put(..., done)`): the result and the work's deletion commit together or not at all, and a result is
kept only while its work is still there, so two runners (one outlived its lease) never keep two results. A
delivery's alert triages are leased AHEAD at a time (`Leases`): about one commit an alert, not three.

A failure counts an attempt and waits (GRANDBO_WRITE_BEHIND_RETRY_SECONDS, doubling, an hour at most); after
GRANDBO_WRITE_BEHIND_MAX_ATTEMPTS it stops and counts as failed (`grandbo stats`, `/readyz`) until `grandbo
backfill` gives it back. A runner that ended while it held a piece (`take_over`) or whose lease ran out counts one
too (`pending_work.lost_delay`): a piece that ends every runner stops the same way.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from grandbo.config import Settings
from grandbo.errors import GrandboError, NotFoundError, OrgDroppedError, StoreFullError, StoreUnavailableError
from grandbo.model import utcnow
from grandbo.pending_work import retry_delay
from grandbo.ports import OrgWork, PendingWork, Work
from grandbo.processes import named_gone

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)

INCIDENT_SYNC = "incident.sync"  # subject: the incident; payload: {"actor"}
LEARNING_SETTLE = "learning.settle"  # subject: the edit signal; payload: {"actor"}
ALERT_TRIAGE = "alert.triage"  # subject: the alert
ERASURE_FINISH = "erasure.finish"  # subject: the erasure (`tiers.erasure`); payload: {"actor"}
CLAIM = 16  # pieces of work one claim leases, at most
# About how long the work of one claim may take, as timed (`Redriver.run_once`): `grandbo worker` takes turns
# between a claim of embed jobs and one of write-behinds, and a claim of 16 alert triages over a large org
# (about 1 s each) held every org's new memories from their vectors for 16 s. Until a piece is timed, one.
CLAIM_SECONDS = 2.0
AHEAD = 8  # a delivery's alert triages one claim leases (`Leases`): the rest of a claim is left to a kill's lease
LOOK_S = 10.0  # how often a re-driver looks for leases whose holder is gone (`Redriver.take_over`), at most
COMPLETED = object()  # what a task returns when its own write completed its leased work: nothing is left to do


def _message(error: Exception) -> str:
    return error.message if isinstance(error, GrandboError) else f"{type(error).__name__}: {error}"[:500]


def _attempt(
    claimed: Sequence[Work],
    task: Callable[[], Any],
    complete: Callable[[Sequence[Work]], None],
    fail: Callable[[Sequence[Work], str, datetime], None],
    settings: Settings,
) -> bool:
    """Run `task` for the leased `claimed` work; complete it (unless the task's own write did: `COMPLETED`), or
    count a failed attempt. Whether it was done."""
    try:
        outcome = task()
    except Exception as error:  # the work stays recorded: it is tried again later
        attempt = max(w.attempts for w in claimed) + 1
        delay = retry_delay(attempt, settings.write_behind_retry_seconds)
        fail(claimed, _message(error), utcnow() + timedelta(seconds=delay))
        first = claimed[0]
        log.warning("write_behind.failed", org_id=first.org_id, kind=first.kind, subject=first.subject,
                    attempt=attempt, gave_up=attempt >= settings.write_behind_max_attempts, retry_in_s=delay,
                    error=_message(error)[:300])  # fmt: skip
        return False
    if outcome is not COMPLETED:
        complete(claimed)
    return True


def run_work(work: OrgWork, settings: Settings, kind: str, subject: str, task: Callable[[], Any]) -> bool:
    """Lease the org's pending (`kind`, `subject`) work and run `task` for it: what the process that recorded it
    does at once. False when there was none to lease (another process runs it, or it was done) or it failed."""
    claimed = _claim(work, settings, kind, [subject])
    return bool(claimed) and _attempt(claimed, task, work.complete, work.fail, settings)


def _claim(work: OrgWork, settings: Settings, kind: str, subjects: Sequence[str]) -> list[Work]:
    try:
        return work.claim(kind, subjects, settings.write_behind_max_attempts, settings.write_behind_lease_seconds)
    except Exception as error:  # the store is out of reach: the work stays recorded, for a re-driver
        log.warning("write_behind.failed", kind=kind, subject=subjects[0], attempt=0, gave_up=False,
                    error=_message(error)[:300])  # fmt: skip
        return []


class Leases:
    """The recorded work of `kind` this process runs for an org's `subjects` in their order (a delivery's alert
    triages, on the alert pool's threads or before the answer): leased AHEAD subjects at a time, in one
    transaction, when the first of them comes up, rather than one commit each. A subject another runner holds
    (or that was done) gets none; a task that will not run gives its lease back (`release`), so that a process
    that closes leaves its queued work to the next one at once rather than after the lease."""

    def __init__(self, work: OrgWork, settings: Settings, kind: str, subjects: Iterable[str]) -> None:
        self._work, self._settings, self._kind = work, settings, kind
        self._order = list(dict.fromkeys(subjects))
        self._at = {subject: n for n, subject in enumerate(self._order)}
        self._asked: set[str] = set()
        self._held: dict[str, list[Work]] = {}
        self._lock = threading.Lock()

    def _take(self, subject: str) -> list[Work]:
        with self._lock:
            if subject not in self._asked:
                at = self._at.get(subject, len(self._order))
                batch = [s for s in [subject, *self._order[at + 1 : at + AHEAD]] if s not in self._asked]
                self._asked.update(batch)
                for work in _claim(self._work, self._settings, self._kind, batch):
                    self._held.setdefault(work.subject, []).append(work)
            return self._held.pop(subject, [])

    def run(self, subject: str, task: Callable[[Sequence[Work]], Any]) -> bool:
        """Run `task` with the subject's leased work (it may complete it in its own write: `COMPLETED`), as
        `run_work` does. False when none was leased here or it failed."""
        claimed = self._take(subject)
        return bool(claimed) and _attempt(claimed, partial(task, claimed), self._work.complete, self._work.fail,
                                          self._settings)  # fmt: skip

    def release(self, subject: str) -> None:
        """Give back the subject's lease, taken ahead for a task that will not run (its pool closed)."""
        with self._lock:
            held = self._held.pop(subject, [])
        if held:
            try:
                self._work.release(held)
            except Exception as error:  # the lease runs out instead
                log.warning("write_behind.release_failed", kind=self._kind, subject=subject, error=_message(error))


def redo(memory: OrgMemory, work: Work, claimed: Sequence[Work] = ()) -> object:
    """Do one piece of pending work again, from what is stored (its writer's closure is gone); `claimed`: its
    leased work, which an alert's triage completes in the write of its result (then: `COMPLETED`)."""
    actor = str(work.payload.get("actor") or "write-behind")
    if work.kind == INCIDENT_SYNC:
        memory.incidents.sync(work.subject, actor=actor)
    elif work.kind == LEARNING_SETTLE:
        learning = memory.learning
        if learning.llm is None:  # the LLM's to settle: a process without one (a worker) leaves it to one with one
            raise RuntimeError("this process has no LLM configured (GRANDBO_LLM_*); the edit waits for one that has")
        learning.after_edit(work.subject, actor)
    elif work.kind == ALERT_TRIAGE:
        from grandbo.ingest.flow import recall_for

        stored = memory.alerts.find(work.subject)
        if stored is not None and stored.state == "received":  # pruned, or triaged already: nothing to do
            recall_for(memory, stored, patient=True, done=claimed)
            return COMPLETED if claimed else None
    elif work.kind == ERASURE_FINISH:  # an erasure cut short (`tiers.erasure`): the entries its record names
        memory.erasure.finish(work.subject)
    else:
        raise ValueError(f"unknown write-behind {work.kind!r} (written by a newer Grandbo?)")
    return None


class OpenOrg(Protocol):
    """`Grandbo.org`: the handle of an org, of the `incarnation` given."""

    def __call__(self, org_id: str, *, incarnation: int | None = None) -> OrgMemory: ...


@dataclass
class RedriveReport:
    done: int = 0
    failed: int = 0

    def add(self, other: RedriveReport) -> None:
        self.done += other.done
        self.failed += other.failed


class Redriver:
    """Re-drives every organization's pending work: `drain` once, or `start` a thread that polls."""

    def __init__(self, store: PendingWork, settings: Settings, org: OpenOrg, *, start: bool = False) -> None:
        self._store, self._settings, self._org = store, settings, org
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._piece_seconds: float | None = None  # one piece of work's seconds, as timed (`run_once`)
        self.current: Work | None = None  # the piece running now (`grandbo.rounds`' watchdog names it)
        self._look_at = 0.0  # when `take_over` looks again (monotonic seconds)
        if start:
            self.start()

    def counts(self) -> tuple[int, int]:
        """Write-behinds of every organization: (waiting, failed), in one query."""
        return self._store.work_counts(self._settings.write_behind_max_attempts)

    def retry_failed(self) -> RedriveReport:
        """Give the write-behinds that gave up their attempts back, and run them (`grandbo backfill`)."""
        return self.drain() if self._store.retry_failed_work() else RedriveReport()

    def drain(self) -> RedriveReport:
        """Run the ready work until none is left (failed work waits for its retry time)."""
        report = RedriveReport()
        while not self._stop.is_set():
            claimed = self.run_once(log_it=False)
            if not claimed.done + claimed.failed:
                break
            report.add(claimed)
        if report.done or report.failed:
            log.info("write_behind.redriven", done=report.done, failed=report.failed)
        return report

    def _claim_size(self) -> int:
        if self._piece_seconds is None:
            return 1
        return max(1, min(CLAIM, int(CLAIM_SECONDS / max(self._piece_seconds, 1e-6))))

    def run_once(self, *, log_it: bool = True) -> RedriveReport:
        """Lease one claim of ready work, dealt across the orgs that have some (`store.queue`), and run it: about
        CLAIM_SECONDS of it as timed so far, one piece until a piece is timed, CLAIM at most. Nothing done and
        nothing failed: none was ready."""
        report = RedriveReport()
        settings = self._settings
        self.take_over()
        claimed = self._store.claim_work(self._claim_size(), settings.write_behind_max_attempts,
                                         settings.write_behind_lease_seconds)  # fmt: skip
        groups: dict[tuple[str, str, str], list[Work]] = {}
        for work in claimed:  # the same subject twice (closed twice): done once
            groups.setdefault((work.org_id, work.kind, work.subject), []).append(work)
        try:
            for group in groups.values():
                self.current, began = group[0], time.monotonic()
                redo_it = partial(self._redo, group)
                ok = _attempt(group, redo_it, self._store.complete_work, self._store.fail_work, settings)
                report.done += ok
                report.failed += not ok
                seconds = time.monotonic() - began
                self._piece_seconds = (
                    seconds if self._piece_seconds is None else 0.7 * self._piece_seconds + 0.3 * seconds
                )
        finally:
            self.current = None
        if log_it and (report.done or report.failed):
            log.info("write_behind.redriven", done=report.done, failed=report.failed)
        return report

    def take_over(self) -> int:
        """Free the leases of holders proved gone (killed on this machine: `grandbo.processes`), so that their work
        is done now, not when their beats stop renewing it (`store.sql.beats`); a holder on another machine or
        container is not proved gone, and its work is taken over once it missed BEATS beats. Looks once in LOOK_S
        at most; how many were freed."""
        if time.monotonic() < self._look_at:
            return 0
        self._look_at = time.monotonic() + LOOK_S
        freed, verdicts = 0, {}
        for org_id, holder in self._store.work_holders():
            if holder not in verdicts:
                verdicts[holder] = named_gone(holder)
            if verdicts[holder] and (lost := self._lost(org_id, holder)):
                freed += len(lost)
                log.warning("write_behind.lease_taken_over", org_id=org_id, pieces=len(lost),
                            holder_pid=json.loads(holder).get("pid"))  # fmt: skip
        return freed

    def _lost(self, org_id: str, holder: str) -> list[Work]:
        """Free the leases of `holder`, proved gone, each counted as a failed attempt: a piece that ends every runner
        that takes it (a crash, the OOM killer) was leased again by each new one, never counted, and held the claim's
        first place, so other orgs' work waited for as long as the runners kept dying. Logged by piece."""
        named = json.loads(holder)
        error = (f"its runner (pid {named.get('pid')} on {named.get('host')}) ended while it held it (killed or "
                 "crashed); counted as a failed attempt")  # fmt: skip
        lost = self._store.free_work_held_by(org_id, holder, error, self._settings.write_behind_retry_seconds)
        bound = self._settings.write_behind_max_attempts
        for work in lost:
            given_up = work.attempts >= bound
            log.warning("write_behind.runner_lost", org_id=work.org_id, kind=work.kind, subject=work.subject,
                        attempt=work.attempts, gave_up=given_up, holder_pid=named.get("pid"),
                        remedy=("its last attempt ended its runner, and it has used its attempts: it counts as failed "
                                "(`/readyz`, `grandbo stats`). Find why in the runner's last lines (memory, a crash), "
                                "then `grandbo backfill` gives it back" if given_up else None))  # fmt: skip
        return lost

    def catch_up(self) -> RedriveReport:
        """`drain`, logging instead of raising: a process's start-up, or one round of its thread."""
        try:
            return self.drain()
        except (StoreUnavailableError, StoreFullError) as error:  # an outage, a full disk: one line, not a traceback
            log.warning("write_behind.store_refused", code=error.code, error=error.message)
            return RedriveReport()
        except Exception:  # the work stays recorded: the next round, or the next process, tries again
            log.exception("write_behind.redrive_crashed")
            return RedriveReport()

    def _redo(self, group: Sequence[Work]) -> object:
        work = group[0]
        if work.incarnation is None:  # leased while its dropped org's rows went: it goes with them
            return None
        try:
            memory = self._org(work.org_id, incarnation=work.incarnation)
        except NotFoundError:  # dropped meanwhile: its work went with it
            return None
        try:
            return redo(memory, work, group)
        except OrgDroppedError:  # dropped since it was leased, and maybe created again: its work went with it
            log.info("write_behind.org_dropped", org_id=work.org_id, kind=work.kind, subject=work.subject)
            return None

    def start(self) -> None:
        """Drain now (start-up: what a process that died left), then every GRANDBO_WRITE_BEHIND_POLL_SECONDS."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.is_set():
                self.catch_up()
                self._stop.wait(self._settings.write_behind_poll_seconds)

        self._thread = threading.Thread(target=loop, name="grandbo-redrive", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
