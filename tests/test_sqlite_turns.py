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
        store, done = grandbo._store, []
        with store._lock.turn("alpha"):  # alpha's write in progress: its four next writes and beta's queue
            writers = []
            for name, memory in [("a1", alpha), ("a2", alpha), ("a3", alpha), ("a4", alpha), ("b", beta)]:
                writer = threading.Thread(target=lambda n=name, m=memory: (
                    m.remember({"title": f"{n} disk full", "body": "b"}), done.append(n)))  # fmt: skip
                writer.start()
                writers.append(writer)
                until(lambda n=len(writers): _queued(store._lock, n), f"{name} waiting")
        for writer in writers:
            writer.join(60)
    assert done.index("b") <= 1, done  # after at most one of alpha's, not all four
