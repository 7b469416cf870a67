"""The bounded pools of one Grandbo (one process), shared by its organizations (`grandbo.pools`).

* `triage`: a triage's recall and plan reads, each under its deadline (`GRANDBO_TRIAGE_WORKERS` threads).
* `narration`: a triage's LLM narration (half as many threads): a slow LLM never holds a recall's thread.
* `behind`: write-behinds after a request committed (an incident close's memories, alert retention).
* `llm_behind`: write-behinds that wait on an LLM (an edit's classification, an alert plan's narration).
* `fills`: an org's kept alerts filled off the request (a whole read of up to 10,000 alerts), one thread, one fill
  of an org at a time and few waiting: a fill with no room is left to a later triage, quietly, and none holds
  another pool's place (in `behind`, past ~85 triaging orgs their fills took the places of acknowledged
  write-behinds: review 30), nor a closing process (those waiting are dropped).
* `alerts`: the triage of a large webhook delivery, after its 202, one task per alert: an organization holds
  at most `GRANDBO_ALERT_ORG_BACKLOG` alerts in it (the process, that over `GRANDBO_WORK_ORG_SHARE`), and no more
  than its measured triage time drains in `GRANDBO_ALERT_ORG_BACKLOG_SECONDS` once it holds some (a large org's
  alert takes longer: `grandbo.pools`); a delivery reserves the places of the alerts it will triage (its firing
  ones not stored yet) before it is stored (`reserve_alerts`), so the share is counted in alerts, not deliveries,
  and one org's storm is served in turn with every other org's alerts.
* `imports`: REST imports (`GRANDBO_IMPORTS_AT_ONCE` at once, none waiting; an org's import lease keeps its
  imports to one at a time, a dry run takes none): the imports of many organizations take that many threads of
  the process, no more, and the next one is answered 503 with a Retry-After.
* `erasures`: REST erasures of a text (`POST /v1/erasures`), two at once and none waiting, one per organization:
  each reads its org's whole log and documents, and a few abandoned ones of one admin key held every thread of
  both servers for minutes (probe 16). The next is answered 429 (its org's) or 503 with a Retry-After.

`behind`, `llm_behind`, `fills` and `alerts` exist in a long-running process only (elsewhere such work runs before the
call returns).
A request checks its org's room (`admit`) before the write whose follow-up it hands over, and is answered
429 or 503 with Retry-After when there is none. A follow-up that still finds the pool full (two requests
raced for the last place) runs in the request's own thread: it was acknowledged, so it is never dropped,
and the queue never grows past its bound.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Literal

import structlog

from grandbo.config import Settings
from grandbo.errors import (
    AlertBacklogError,
    AlertsBusyError,
    ErasuresBusyError,
    ErasuresOrgBusyError,
    ImportsOrgBusyError,
    OverloadedError,
)
from grandbo.pools import BoundedPool, Seats
from grandbo.writes import run_guarded

log = structlog.get_logger(__name__)
Later = Literal["behind", "llm_behind"]
CLOSE_DRAIN_SECONDS = 10.0  # how long a closing process runs the write-behinds it queued, all pools together
Kind = Literal["triage", "behind", "llm_behind", "alerts"]
# After an org's large delivery was refused for its alert backlog, its next large deliveries are read (parsed, their
# stored alerts looked up: about 10 ms for 500 alerts) at most this often, per process, until one takes places
# again or the refusal's Retry-After has passed; the rest are refused before they are read. A storm's senders
# retrying every few milliseconds would otherwise spend a core on deliveries refused after their parse, while a
# group sent again with nothing new (every group_interval, minutes apart) still finds a read free and is taken.
READS_WHILE_REFUSED_PER_S, READS_WHILE_REFUSED_BURST = 2.0, 8
FILLS_WAITING = 8  # cache fills waiting for the one thread, every org's together (each org's one at most)


class Background:
    """Every pool of one process; closed with its Grandbo."""

    def __init__(self, settings: Settings, *, threads: bool) -> None:
        queue, share, workers = settings.work_queue, settings.work_org_share, settings.triage_workers
        self.triage = BoundedPool("triage", workers, queue, share)
        self.narration = BoundedPool("narration", max(1, workers // 2), queue, share)
        self.behind = BoundedPool("write-behind", 2, queue, share) if threads else None
        self.llm_behind = BoundedPool("llm-write-behind", 2, queue, share) if threads else None
        self.fills = BoundedPool("cache-fill", 1, FILLS_WAITING, 1.0, org_held=1) if threads else None
        backlog = settings.alert_org_backlog
        alert_queue = max(math.ceil(backlog / share) - 2, backlog)  # every org's alerts, waiting, together
        self.alerts = BoundedPool("alert-triage", 2, alert_queue, share, org_held=backlog, org_error=AlertBacklogError,
                                  pool_error=AlertsBusyError, org_seconds=settings.alert_org_backlog_seconds,
                                  ) if threads else None  # fmt: skip
        # One org runs at most half the imports at once: its dry runs take no lease, nor does an import whose
        # request was cancelled still run, and either could hold every place.
        self.imports = BoundedPool("import", settings.imports_at_once, 0, 0.5, typical_s=30,
                                   org_error=ImportsOrgBusyError)  # fmt: skip
        self.erasures = BoundedPool("erasure", 2, 0, 0.5, typical_s=10, org_error=ErasuresOrgBusyError,
                                    pool_error=ErasuresBusyError)  # fmt: skip
        self._refused: dict[str, tuple[float, float, float]] = {}  # org -> (reads left, when counted, room at)
        self._refused_lock = threading.Lock()

    def pools(self) -> list[BoundedPool]:
        every = (self.triage, self.narration, self.behind, self.llm_behind, self.fills, self.alerts, self.imports,
                 self.erasures)  # fmt: skip
        return [p for p in every if p is not None]

    def _later(self, kind: Kind) -> BoundedPool | None:
        pools = {"triage": self.triage, "behind": self.behind, "llm_behind": self.llm_behind}
        return pools[kind]

    def admit(self, org: str, kind: Kind) -> None:
        """Refuse (429/503 with Retry-After) when `org` has no room in the pool its follow-up will need; for
        "alerts", before a large delivery is read: refused while its org's last one was and no read is left."""
        if kind == "alerts":
            self._admit_read(org)
            return
        pool = self._later(kind)
        if pool is not None:
            pool.admit(org)

    def reserve_alerts(self, org: str, alerts: int) -> Seats | None:
        """Places for `alerts` alert triages of `org` in the alert-triage pool, taken before the delivery is
        stored, all or none (refused 429/503 with Retry-After); None in a process without background threads
        (its deliveries are triaged before they are answered)."""
        if self.alerts is None:
            return None
        try:
            seats = self.alerts.reserve(org, alerts)
        except AlertBacklogError as refusal:  # its org's next large deliveries are read sparingly (_admit_read)
            now = time.monotonic()
            with self._refused_lock:
                reads, counted, _ = self._refused.get(org, (float(READS_WHILE_REFUSED_BURST), now, now))
                self._refused[org] = (reads, counted, now + refusal.retry_after)
            raise
        if alerts:  # places taken: the org has room again
            with self._refused_lock:
                self._refused.pop(org, None)
        return seats

    def _admit_read(self, org: str) -> None:
        """Refuse a large delivery of `org` unread while its last refusal's Retry-After runs and its reads are
        spent; past that Retry-After (when the pool expected room) it is forgotten, whatever came since."""
        now = time.monotonic()
        with self._refused_lock:
            if org not in self._refused:
                return
            reads, counted, room_at = self._refused[org]
            if now >= room_at:
                del self._refused[org]
                return
            reads = min(float(READS_WHILE_REFUSED_BURST), reads + (now - counted) * READS_WHILE_REFUSED_PER_S)
            self._refused[org] = (reads - 1 if reads >= 1 else reads, now, room_at)
        if reads >= 1:
            return
        log.warning("alerts.refused_unread", org_id=org)
        raise AlertBacklogError(
            f"This organization's last large delivery was refused for its alert backlog, and its deliveries since "
            f"come faster than this process reads them while it is full ({READS_WHILE_REFUSED_PER_S:g} a second); "
            "this one was not read.",
            retry_after=max(room_at - now, (1 - reads) / READS_WHILE_REFUSED_PER_S),
            detail={"pool": "alert-triage", "reads_per_s": READS_WHILE_REFUSED_PER_S},
        )

    def later(self, org: str, task: Callable[[], None], kind: Later = "behind") -> bool:
        """Run `task` off the request: False when a pool thread has it; True when it has already run here (no
        background threads in this process, or the pool was full)."""
        pool = self._later(kind)
        if pool is not None:
            try:
                pool.submit(org, lambda: run_guarded(task))
                return False
            except OverloadedError:
                log.warning("pool.ran_in_caller", pool=pool.name, org_id=org)
        run_guarded(task)
        return True

    def flush(self, timeout: float | None = None) -> None:
        """Wait for the deferred deliveries and the write-behinds to finish, each pool after those that queue work
        on it: an alert's triage queues its narration on `llm_behind` (waited for before the alerts, it was left
        running)."""
        for pool in (self.alerts, self.llm_behind, self.behind):
            if pool is not None:
                pool.idle(timeout)

    def close(self) -> None:
        """Let the acknowledged work finish for CLOSE_DRAIN_SECONDS in all (an incident's close, an edit's learning,
        a delivery's triage: each is recorded with its write, `grandbo.redrive`), then stop every thread: what is
        still queued then is left to the re-driver of this process's successor or of another one, as after a kill;
        an alert plan's LLM narration left so is not made (the alert keeps its plan), nor a prune (the next one
        does it). It waited for all of it: one org's 1,500 queued alert triages held two servers' SIGTERM for over
        2 minutes (~1 a second over a 170,000-entry org; probe 20a), a rolling deploy waiting on every org. An
        erasure in hand is not left half done (it is not recorded); a triage still waiting for a thread is
        cancelled (its caller is gone)."""
        deadline = time.monotonic() + CLOSE_DRAIN_SECONDS
        for pool in (self.alerts, self.behind, self.llm_behind):
            if pool is not None and (left := pool.shutdown(wait=True, timeout=max(deadline - time.monotonic(), 0))):
                log.warning("pool.left_queued", pool=pool.name, tasks=left, seconds=CLOSE_DRAIN_SECONDS)
        if self.erasures is not None:
            self.erasures.shutdown(wait=True, timeout=None)
        for pool in (self.triage, self.narration, self.fills, self.imports):
            if pool is not None:
                pool.shutdown(wait=False, timeout=1)
