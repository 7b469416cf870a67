"""Bounded thread pools shared by every organization of a process, each org held to its share.

A pool has `workers` threads and holds at most `workers + queue` tasks, running or waiting. One organization
may hold at most its share of them (`org_share` of `workers + queue`) and run at most its share of the threads,
so no organization can take every thread nor fill the queue: a task over the org's share is refused with
`OrgOverloadedError` (429), one over the pool's bound with `OverloadedError` (503), both with a `Retry-After`
estimate, never queued without bound.
Waiting tasks are served round-robin across organizations (one org's backlog never delays another's next
task by more than one task per org). A task whose deadline passed, or that its caller cancelled, before a
thread took it is skipped: nobody waits for it any more.

A caller that is itself background work (a triage step of a delivery triaged after its answer) submits with
`block=True`: it waits for room in its org's share rather than being refused.

Work that comes in batches counts its units, not its requests: `reserve(org, units)` takes `units` places of
the org's share at once, or refuses the whole batch as `submit` would (with a Retry-After for that many places
to free up), before the caller writes anything; the batch's tasks then go in through their `Seats` (one place
each, never refused) and the places not used are given back. A webhook delivery of 500 new alerts reserves
500 places of the alert-triage pool, one task per alert, so its org's share is counted in alerts.

A pool whose tasks' cost differs from one organization to the next bounds each org's held tasks in time too
(`org_seconds`): a task of an org that already holds some is refused when all of them would take longer than that,
one after another on the org's running share, at the org's own measured duration (a moving mean of its tasks).
An org that holds none is never refused for it, so one batch of any size is taken (the count still bounds it).
An alert's triage took 20 ms at 2,000 memories and 35 ms at 60,000 on the embedded store, 125 ms at 60,000 on
Postgres and 1.5 s on a loaded one at 170,000 (probe 20a): a count alone let one org's backlog last 20 s or 25 min.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import structlog

from grandbo.errors import OrgOverloadedError, OverloadedError

T = TypeVar("T")
log = structlog.get_logger(__name__)


@dataclass
class _Task:
    org: str
    run: Callable[[], Any]
    future: Future[Any]
    deadline: float | None  # time.monotonic() past which nobody waits for it


@dataclass
class PoolStats:
    """Counts of one pool (what the tests and `/readyz` read): now, and the most ever seen."""

    workers: int
    queue: int
    org_running: int  # the most one org runs at once
    org_held: int  # the most one org holds, running and waiting
    running: int = 0
    waiting: int = 0
    peak_held: int = 0  # never above workers + queue
    peak_org_held: int = 0  # never above org_held
    peak_org_running: int = 0
    done: int = 0
    skipped: int = 0  # deadline passed or cancelled before a thread took it
    refused: int = 0
    by_org: dict[str, tuple[int, int]] = field(default_factory=dict)  # org -> (running, waiting or reserved), now


def share(workers: int, queue: int, fraction: float) -> tuple[int, int]:
    """What one organization may have of a pool: (tasks running, tasks held running or waiting), at least 1."""
    return max(1, math.floor(workers * fraction)), max(1, math.floor((workers + queue) * fraction))


class BoundedPool:
    """A fixed set of threads and a bounded, per-org, round-robin queue (see the module)."""

    def __init__(
        self, name: str, workers: int, queue: int, org_share: float, *, typical_s: float = 0.05,
        org_held: int | None = None, org_error: type[OrgOverloadedError] = OrgOverloadedError,
        pool_error: type[OverloadedError] = OverloadedError, org_seconds: float | None = None,
    ) -> None:  # fmt: skip
        self.name = name
        self._org_error, self._pool_error = org_error, pool_error  # what a refusal raises (its remedy)
        self._workers, self._queue = workers, queue
        self._org_running, self._org_held = share(workers, queue, org_share)
        if org_held is not None:  # stated, not derived: an org's budget of places (at least its running share)
            self._org_held = max(org_held, self._org_running)
        self._cond = threading.Condition()
        self._waiting: dict[str, deque[_Task]] = {}  # insertion order is the round-robin order
        self._running: dict[str, int] = {}
        self._reserved: dict[str, int] = {}  # places taken by `reserve` whose tasks are not submitted yet
        self._stats = PoolStats(workers, queue, self._org_running, self._org_held)
        self._seconds = typical_s  # moving mean of a task's duration (from a typical one): the Retry-After estimate
        self._org_seconds = org_seconds  # the time an org's held tasks may take at most (None: counted only)
        self._org_took: dict[str, float] = {}  # each org's moving mean of its tasks' durations (with `org_seconds`)
        self._closed = False
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ submitting

    def submit(
        self, org: str, task: Callable[[], T], *, deadline: float | None = None, block: bool = False
    ) -> Future[T]:
        """Queue `task` for `org`; its Future. Refused (OrgOverloadedError, OverloadedError) when the org's share
        or the queue is full, unless `block`: then it waits for room (a background caller)."""
        future: Future[T] = Future()
        with self._cond:
            while True:
                self._check_open()
                refusal = self._refusal(org, 1)
                if refusal is None:
                    break
                if not block:
                    self._refuse(org, refusal)
                self._cond.wait()
            self._queue_task(org, task, future, deadline)
        return future

    def offer(self, org: str, task: Callable[[], Any]) -> bool:
        """Queue `task` for `org` when there is room, else leave it (False), quietly: nothing counted nor logged as
        refused. For work a later call does again when this one finds no room (a cache's fill)."""
        with self._cond:
            if self._closed or self._refusal(org, 1) is not None:
                return False
            self._queue_task(org, task, Future(), None)
        return True

    def _queue_task(self, org: str, task: Callable[[], Any], future: Future[Any], deadline: float | None) -> None:
        self._queue_tasks(org, [(task, future)], deadline)

    def _queue_tasks(
        self, org: str, tasks: Sequence[tuple[Callable[[], Any], Future[Any]]], deadline: float | None
    ) -> None:
        """Queue `tasks` of `org` (each with its Future), then count and wake the threads once. No tasks (a group
        sent again with nothing new to triage) queue nothing: an org's queue in `_waiting` is never empty, which
        `_next` relies on (an empty one ended the thread that took it, and so the pool)."""
        if not tasks:
            return
        queue = self._waiting.setdefault(org, deque())
        for task, future in tasks:
            queued = _Task(org, task, future, deadline)
            queue.append(queued)
            future.add_done_callback(self._dropped_if_cancelled(queued))
        self._count()
        self._start_threads()
        self._cond.notify_all()

    def _dropped_if_cancelled(self, queued: _Task) -> Callable[[Future[Any]], None]:
        return lambda done: self._discard(queued) if done.cancelled() else None

    def admit(self, org: str) -> None:
        """Raise what `submit` would for `org` now, queueing nothing: a request checks it before a write whose
        follow-up work it will hand to this pool."""
        with self._cond:
            if (refusal := self._refusal(org, 1)) is not None:
                self._refuse(org, refusal)

    def reserve(self, org: str, units: int) -> Seats:
        """Take `units` places of `org`'s share for a batch of tasks, all or none: refused (OrgOverloadedError,
        OverloadedError, with a Retry-After for that many places) as `submit` would be. The batch's tasks go in
        through the `Seats`, which give back the places left unused when closed."""
        units = max(units, 0)
        with self._cond:
            self._check_open()
            if units and (refusal := self._refusal(org, units)) is not None:
                self._refuse(org, refusal, units)
            if units:
                self._reserved[org] = self._reserved.get(org, 0) + units
                self._count()
        return Seats(self, org, units)

    def _check_open(self) -> None:
        if self._closed:
            stopping = f"The {self.name} pool is shut down: this process is stopping."
            raise OverloadedError(stopping, retry_after=1, detail={"pool": self.name})

    def _refuse(self, org: str, refusal: OverloadedError, units: int = 1) -> NoReturn:
        """Count and log `refusal` of `units` tasks of `org`, and raise it."""
        self._stats.refused += 1
        log.warning("pool.refused", pool=self.name, org_id=org, status=refusal.status, units=units)
        raise refusal

    def _seat(self, org: str, tasks: Sequence[Callable[[], Any]]) -> list[Future[Any]]:
        """Queue `tasks` in as many of `org`'s reserved places (`Seats.submit_all`), under one lock and one
        wake-up: a delivery's 500 alerts queued one at a time counted the pool and woke its threads a thousand
        times, 20-380 ms of the request while those threads triaged."""
        futures: list[Future[Any]] = [Future() for _ in tasks]
        with self._cond:
            self._unreserve(org, len(tasks))
            if self._closed:  # stopping: the tasks run nowhere (their work stays recorded for a re-driver)
                for future in futures:
                    future.cancel()
                return futures
            self._queue_tasks(org, list(zip(tasks, futures, strict=True)), None)
        return futures

    def _release(self, org: str, units: int) -> None:
        """Give back `units` of `org`'s reserved places that no task took (`Seats.close`)."""
        with self._cond:
            self._unreserve(org, units)

    def _unreserve(self, org: str, units: int) -> None:
        left = self._reserved.get(org, 0) - units
        if left > 0:
            self._reserved[org] = left
        else:
            self._reserved.pop(org, None)
        self._count()
        self._cond.notify_all()

    def _discard(self, task: _Task) -> None:
        """Drop a task its caller cancelled before a thread took it: its place goes to the next one."""
        with self._cond:
            queue = self._waiting.get(task.org)
            if queue is None or task not in queue:
                return  # a thread has it already (and skips it)
            queue.remove(task)
            if not queue:
                del self._waiting[task.org]
            self._stats.skipped += 1
            self._count()
            self._cond.notify_all()

    def _refusal(self, org: str, units: int) -> OverloadedError | None:
        """Why `units` more tasks of `org` cannot be held now (None when they can)."""
        waiting, running = len(self._waiting.get(org, ())), self._running.get(org, 0)
        held = waiting + running + self._reserved.get(org, 0)
        total = self._held()
        asked = "" if units == 1 else f" ({units} asked at once)"
        detail = {"pool": self.name, "org_running": running, "org_waiting": waiting, "units": units}
        if held + units > self._org_held:
            return self._org_error(
                f"This organization already has {running} {self.name} tasks running and {held - running} waiting, "
                f"its share of this process (at most {self._org_held} in all, {self._org_running} running); this "
                f"request{asked} was not queued.",
                retry_after=self._retry_after(held + units - self._org_held, self._org_running),
                detail={**detail, "org_held": self._org_held},
            )  # fmt: skip
        if total + units > self._workers + self._queue:
            return self._pool_error(
                f"The {self.name} pool of this process is full ({self._workers} tasks running and {self._queue} "
                f"waiting, from every organization); this request{asked} was not queued.",
                retry_after=self._retry_after(total + units - self._workers - self._queue, self._workers),
                detail={**detail, "queue": self._queue},
            )  # fmt: skip
        return self._too_long(org, held, units, detail) if self._org_seconds is not None and held else None

    def _too_long(self, org: str, held: int, units: int, detail: dict[str, Any]) -> OverloadedError | None:
        """Why `units` more tasks of `org`, which holds `held`, would pass its time (`org_seconds`; None: they
        would not), at its tasks' measured duration (the pool's, until one of its own is done)."""
        each, running, bound = self._org_took.get(org, self._seconds), self._org_running, self._org_seconds or 0.0
        if (held + units) * each / running <= bound:
            return None
        fits = max(int(bound * running / each) - units, 0)  # held at most, for these to fit
        return self._org_error(
            f"This organization's {held} {self.name} tasks would take about {held * each / running:.0f} s at its "
            f"recent {each * 1000:.0f} ms each, and this request's {units} about {units * each / running:.0f} s more: "
            f"past the {bound:g} s it may hold in this process; this request was not queued.",
            retry_after=(held - fits) * each / running,
            detail={**detail, "org_seconds": bound, "task_ms": round(each * 1000, 1)},
        )

    def _held(self) -> int:
        return sum(map(len, self._waiting.values())) + sum(self._running.values()) + sum(self._reserved.values())

    def _retry_after(self, places: int, threads: int) -> float:
        """Seconds until `places` places free up, `threads` at a time, at the mean task's duration."""
        return self._seconds * max(1, places) / max(1, min(threads, self._workers))

    # ------------------------------------------------------------------ serving

    def _start_threads(self) -> None:
        while len(self._threads) < self._workers:
            thread = threading.Thread(target=self._serve, name=f"grandbo-{self.name}-{len(self._threads)}",
                                      daemon=True)  # fmt: skip
            self._threads.append(thread)
            thread.start()

    def _next(self) -> _Task | None:
        """The next task, round-robin over the orgs below their running share; None when there is none."""
        for org in list(self._waiting):
            if self._running.get(org, 0) >= self._org_running:
                continue
            queue = self._waiting.pop(org)  # re-inserted at the end: the next org goes first next time
            task = queue.popleft()
            if queue:
                self._waiting[org] = queue
            return task
        return None

    def _serve(self) -> None:
        while True:
            with self._cond:
                task = self._next()
                while task is None:
                    if self._closed:
                        return
                    self._cond.wait()
                    task = self._next()
                if task.deadline is not None and time.monotonic() > task.deadline:
                    task.future.cancel()  # nobody waits for it any more: not run for nobody
                if not task.future.set_running_or_notify_cancel():
                    self._stats.skipped += 1
                    self._count()
                    self._cond.notify_all()
                    continue
                self._running[task.org] = self._running.get(task.org, 0) + 1
                self._count()
            started = time.monotonic()
            try:
                task.future.set_result(task.run())
            except BaseException as error:  # the caller's to judge; a background task logs its own failures
                task.future.set_exception(error)
            with self._cond:
                took = time.monotonic() - started
                self._seconds = 0.8 * self._seconds + 0.2 * took
                if self._org_seconds is not None:
                    was = self._org_took.get(task.org)
                    self._org_took[task.org] = took if was is None else 0.8 * was + 0.2 * took
                self._running[task.org] -= 1
                if not self._running[task.org]:
                    del self._running[task.org]
                self._stats.done += 1
                self._count()
                self._cond.notify_all()

    def _count(self) -> None:
        stats = self._stats
        stats.running = sum(self._running.values())
        stats.waiting = sum(len(q) for q in self._waiting.values())
        orgs = {*self._running, *self._waiting, *self._reserved}
        stats.by_org = {org: (self._running.get(org, 0), len(self._waiting.get(org, ())) + self._reserved.get(org, 0))
                        for org in orgs}  # fmt: skip
        stats.peak_held = max(stats.peak_held, sum(sum(held) for held in stats.by_org.values()))
        stats.peak_org_held = max([stats.peak_org_held, *(sum(held) for held in stats.by_org.values())])
        stats.peak_org_running = max([stats.peak_org_running, *self._running.values()])

    def stats(self) -> PoolStats:
        with self._cond:
            return PoolStats(**{**self._stats.__dict__, "by_org": dict(self._stats.by_org)})

    def idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing runs or waits (at most `timeout` seconds); whether it is so."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running and not self._waiting, timeout)

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> int:
        """Stop taking tasks; with `wait`, let those queued run first, else cancel them; return how many were
        cancelled. `timeout` bounds the wait and the threads' ends together."""
        until = None if timeout is None else time.monotonic() + timeout  # the wait and the joins together
        if wait:
            self.idle(timeout)
        with self._cond:
            self._closed = True
            dropped = [task for queue in self._waiting.values() for task in queue]
            self._waiting.clear()
            for task in dropped:
                task.future.cancel()
            self._count()
            self._cond.notify_all()
        for thread in self._threads:  # a thread still in a task (an LLM call past its budget) is left to end
            if thread is not threading.current_thread():
                thread.join(None if until is None else max(until - time.monotonic(), 0))
        return len(dropped)


class Seats:
    """Places one batch reserved in a pool for `org` (`BoundedPool.reserve`): each `submit` takes one, never
    refused; `close` (or leaving the `with` block) gives back those not used."""

    def __init__(self, pool: BoundedPool, org: str, units: int) -> None:
        self._pool, self._org, self.left = pool, org, units

    def submit(self, task: Callable[[], T]) -> Future[T]:
        """Queue `task` in one of the reserved places (ValueError when none is left)."""
        return self.submit_all([task])[0]

    def submit_all(self, tasks: Sequence[Callable[[], T]]) -> list[Future[T]]:
        """Queue `tasks` in as many of the reserved places, at once (ValueError when fewer are left)."""
        if len(tasks) > self.left:
            raise ValueError("no reserved place left: reserve as many places as the batch has tasks")
        self.left -= len(tasks)
        return self._pool._seat(self._org, tasks)

    def close(self) -> None:
        if self.left:
            self._pool._release(self._org, self.left)
            self.left = 0

    def __enter__(self) -> Seats:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
