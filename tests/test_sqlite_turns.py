"""The embedded store's one write lock, handed to waiting writers organization by organization (`TurnLock`): one
org's queue of writes no longer keeps another org's write waiting behind all of it (probe 17: a one-alert webhook
waited 2.7-3 s behind another org's 500-alert deliveries)."""

from __future__ import annotations

import threading

import pytest

from grandbo.config import Settings
from grandbo.service import Grandbo
from grandbo.store.sqlite.turns import TurnLock
from tests.serving import until


def _queued(lock: TurnLock, count: int) -> bool:
    return sum(len(queue) for queue in lock._waiting.values()) == count


def test_waiting_orgs_take_turns_and_each_org_keeps_its_order() -> None:
    lock, order = TurnLock(), []
    lock.acquire(org="alpha")
    threads = []
    for name, org in [("a1", "alpha"), ("a2", "alpha"), ("a3", "alpha"), ("b1", "beta"), ("s", ""), ("b2", "beta")]:
        thread = threading.Thread(target=lambda n=name, o=org: (lock.acquire(org=o), order.append(n), lock.release()))
        thread.start()
        threads.append(thread)
        until(lambda n=len(threads): _queued(lock, n), f"{name} waiting")
    lock.release()
    for thread in threads:
        thread.join(30)
    assert order == ["a1", "b1", "s", "a2", "b2", "a3"]


def test_the_lock_is_reentrant_and_never_taken_ahead_of_a_waiter() -> None:
    lock = TurnLock()
    with lock:
        with lock.turn("alpha"):
            assert lock.acquire(blocking=False)
            lock.release()
        waiter = threading.Thread(target=lambda: (lock.acquire(org="beta"), lock.release()))
        waiter.start()
        until(lambda: _queued(lock, 1), "beta waiting")
        other = []
        probe = threading.Thread(target=lambda: other.append(lock.acquire(blocking=False)))
        probe.start()
        probe.join(30)
        assert other == [False]  # held; and once let go, it is beta's
    waiter.join(30)
    assert lock.acquire(blocking=False)
    lock.release()
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()


def test_another_orgs_write_waits_for_one_write_of_the_busy_org_not_for_its_queue(tmp_path) -> None:
    with Grandbo.init(Settings(home=tmp_path / "home"), embedding="deterministic") as grandbo:
        alpha, beta = grandbo.org("alpha", create=True), grandbo.org("beta", create=True)
        store, done, names = grandbo._store, [], {}
        lock, acquire = store._lock, store._lock.acquire

        def acquired(*args, **kwargs):  # the writers in the order each was first given the lock (a write of
            held = acquire(*args, **kwargs)  # theirs may take it again later, and end after later writers)
            name = names.get(threading.get_ident())
            if held and name is not None and name not in done:
                done.append(name)
            return held

        lock.acquire = acquired
        with lock.turn("alpha"):  # alpha's write in progress: its four next writes and beta's queue
            writers = []
            for name, memory in [("a1", alpha), ("a2", alpha), ("a3", alpha), ("a4", alpha), ("b", beta)]:

                def write(n=name, m=memory) -> None:
                    names[threading.get_ident()] = n
                    m.remember({"title": f"{n} disk full", "body": "b"})

                writer = threading.Thread(target=write)
                writer.start()
                writers.append(writer)
                until(lambda n=len(writers): _queued(lock, n), f"{name} waiting")
        for writer in writers:
            writer.join(60)
    assert done.index("b") <= 1, done  # after at most one of alpha's, not all four


class _Interrupted(threading.Event):
    """A turn whose wait is interrupted (as Ctrl-C interrupts the CLI's main thread) once it waited a little."""

    def wait(self, timeout: float | None = None) -> bool:
        super().wait(0.3)
        raise KeyboardInterrupt


@pytest.mark.parametrize("handed_over", [False, True])
def test_a_waiter_interrupted_leaves_the_line_or_gives_the_lock_back(monkeypatch, handed_over: bool) -> None:
    """Review: a writer interrupted while it waited stayed in the line; the next release made the departed thread
    the owner, and every later writer, `close` at exit among them, waited for ever. It leaves the line now, or gives
    back the lock a release handed it as it was interrupted."""
    lock, outcome = TurnLock(), []
    lock.acquire(org="alpha")

    def interrupted() -> None:
        try:
            lock.acquire(org="beta")
        except KeyboardInterrupt:
            outcome.append("interrupted")

    monkeypatch.setattr(lock, "turn_of", _Interrupted)
    waiter = threading.Thread(target=interrupted)
    waiter.start()
    until(lambda: _queued(lock, 1), "beta waiting")
    monkeypatch.undo()
    if handed_over:
        lock.release()  # handed to beta as its wait is interrupted
    waiter.join(30)
    assert outcome == ["interrupted"] and lock._waiting == {}
    if not handed_over:
        lock.release()
    assert lock._owner is None and lock.acquire(blocking=False)  # free: the next writer gets it
    lock.release()
