"""Running recall's two arms at once on the embedded store: one arm per core.

Over an index with an int8 copy (`vector.PRUNE_FROM` rows and more) a helper thread runs the int8 pass's one
kernel call, which lets go of the GIL, while the caller's thread runs the lexical arm and then finishes the vector
arm: the helper needs the GIL only to start and end, where a helper running the lexical arm (Python and numpy calls
on short arrays) held it while the caller waited to finish its own arm. Over a smaller index the lexical arm runs
on the helper while the caller runs the vector arm, whose matrix product runs on one BLAS thread; otherwise BLAS
would spread the product over both cores and the lexical arm would wait for it. Measured with
`benchmarks/recall_latency.py` (docs/architecture.md, "Where the arms run"): worth it only where the vector arm
computes in process, and only while the process has a core per arm: with as many recalls in flight as cores (a busy
server), or while recent recalls ran their arms faster in turn (other processes on the cores), each recall runs its
arms in turn on its own thread.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)
T = TypeVar("T")


class _Helpers:
    """A few threads shared by every recall in the process. Created on first use, and again in a forked
    child (which inherits no threads); each task runs in a copy of the caller's context, so its log lines
    keep the caller's bound fields."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, task: Callable[..., T], *args: Any) -> Future[T]:
        """Run `task` on a helper thread; in the caller's thread once no new thread may start (interpreter
        shutdown)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max(2, os.cpu_count() or 2), thread_name_prefix="grandbo-recall")
            try:
                return self._pool.submit(contextvars.copy_context().run, task, *args)
            except RuntimeError:  # shutting down
                pass
        done: Future[T] = Future()
        try:
            done.set_result(task(*args))
        except Exception as error:  # handed to the caller through the future, like a helper's error
            done.set_exception(error)
        return done

    def after_fork(self) -> None:
        self._lock, self._pool = threading.Lock(), None


class _OneBlasThread:
    """From the first recall that runs both arms at once, BLAS runs on one thread in this process
    (threadpoolctl), so that each arm has a core to itself, and so does each concurrent request of a
    server. Set once and never given back: OpenBLAS ignores a thread count given back from a thread that
    ran products of its own (measured here: it stayed at one), so a hold counted per recall would leave
    it wherever the last recall's thread put it anyway."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.done = False

    def ensure(self) -> None:
        if self.done:
            return
        with self._lock:
            if self.done:
                return
            try:
                from threadpoolctl import threadpool_limits

                threadpool_limits(limits=1, user_api="blas")
            except Exception as error:  # a failed scan only costs the speed-up
                log.warning("recall.blas_limit_failed", error=f"{type(error).__name__}: {error}")
            self.done = True


class _InFlight:
    """How many recalls of this process run their arms now, and how many cores it has (`os.cpu_count` reads a
    file of the kernel's on every call: once per process, not once per recall)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.cores = os.cpu_count() or 1

    def enter(self) -> int:
        with self._lock:
            self.count += 1
            return self.count

    def leave(self) -> None:
        with self._lock:
            self.count -= 1

    def after_fork(self) -> None:
        self.__init__()  # type: ignore[misc]


class _Handoff:
    """Whether handing an arm to a helper thread pays on this machine now, measured: the arms' time of recent
    recalls each way (a moving average per size class: an org of 2,000 entries and one of 100,000 differ), the
    faster way taken, and one recall in `PROBE` the other way, in runs of `RUN`, so a change of the machine's load
    is seen. A helper pays only when a core is free for it; when other processes keep the cores busy it waits for
    a time slice, and so does the caller for the GIL after its matrix product (measured on the shared 2-core
    machine at 10,000 entries: 6.6 ms median at once against 1.8 ms in turn).

    Two things kept a large org's arms in turn where at once was faster (100,000 entries, one process: 4.5 ms a
    recall at once against 6.8 ms in turn). An org's first recall builds its lexical segments inside the arm
    (6.4 s there), and as the first sample of its way it outweighed every later probe for about 250 recalls: a
    way's first sample is now replaced by its second, not averaged. And a probe alone, after recalls the other
    way, found the helper cold (6-10 ms): probes come in runs."""

    PROBE = 8
    RUN = 4
    WEIGHT = 0.2  # of the newest time in a moving average

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # By size class (the bit length of the rows searched): (beside a helper, in turn) seconds, and recalls.
        self.seconds: dict[int, dict[bool, float | None]] = {}
        self.count: dict[int, int] = {}
        self.samples: dict[int, dict[bool, int]] = {}  # by size class and way: a first sample is replaced

    def beside(self, size: int = 0) -> bool:
        """Whether this recall, over `size` rows, hands `beside` to a helper."""
        size_class = size.bit_length()
        with self._lock:
            self.count[size_class] = count = self.count.get(size_class, 0) + 1
            seconds = self.seconds.setdefault(size_class, {True: None, False: None})
            at_once, in_turn = seconds[True], seconds[False]
            if at_once is None or in_turn is None:
                return at_once is None  # each way measured once first
            faster = at_once <= in_turn
            period = self.PROBE * self.RUN
            return faster != (count % period >= period - self.RUN)

    def record(self, at_once: bool, seconds: float, size: int = 0) -> None:
        with self._lock:
            kept = self.seconds.setdefault(size.bit_length(), {True: None, False: None})
            samples = self.samples.setdefault(size.bit_length(), {True: 0, False: 0})
            samples[at_once] += 1
            last = kept[at_once]
            if last is None or samples[at_once] <= 2:
                kept[at_once] = seconds
            else:  # a later outlier (a merge of the index's segments, a pause) counts as four times the average
                kept[at_once] = last + self.WEIGHT * (min(seconds, 4 * last) - last)

    def after_fork(self) -> None:
        self.__init__()  # type: ignore[misc]  # a child's cores and load are its own


helpers = _Helpers()
one_blas_thread = _OneBlasThread()
in_flight = _InFlight()
handoff = _Handoff()
os.register_at_fork(after_in_child=helpers.after_fork)
os.register_at_fork(after_in_child=in_flight.after_fork)
os.register_at_fork(after_in_child=handoff.after_fork)


def run_beside(beside: Callable[[], T], here: Callable[[], Any], size: int = 0) -> tuple[T, Any]:
    """Run `beside` on a helper thread and `here` in this thread, BLAS on one thread; return both results.
    With as many recalls in flight as cores, both run in turn in this thread: no core is free for a helper,
    and the helpers, shared by every request, would queue each recall's `beside` behind the others'. So they do
    while recent recalls over about as many rows (`size`) ran their arms faster in turn (`_Handoff`). If `here`
    fails, `beside` is let finish (or not begun) and `here`'s error is raised; a `beside` still queued when `here`
    ends runs in this thread."""
    one_blas_thread.ensure()
    try:
        if in_flight.enter() > in_flight.cores:
            mine = here()  # first: its error wins, as below
            return beside(), mine
        at_once, started = handoff.beside(size), time.perf_counter()
        if not at_once:
            mine = here()
            theirs = beside()
        else:
            job = helpers.submit(beside)
            try:
                mine = here()
            except BaseException:
                if not job.cancel():
                    job.exception()
                raise
            # Still queued behind other recalls' helper tasks (a busy server): run here rather than wait for them.
            theirs = beside() if job.cancel() else job.result()
        handoff.record(at_once, time.perf_counter() - started, size)
        return theirs, mine
    finally:
        in_flight.leave()
