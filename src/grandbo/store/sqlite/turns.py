"""The embedded store's lock, handed to its waiting writers organization by organization.

One connection writes the file, so every write of the process takes one lock. A plain lock gives it to whichever
waiting thread the scheduler wakes first, often the thread that just let it go: while one org sent 500-alert
deliveries from eight senders, another org's one-alert webhook waited 2.7-3 s for it (probe 17). `TurnLock` hands
the lock over at release to the org whose turn it is: the orgs with writers waiting take turns in the order they
came (store-wide work, the embed worker's and the migrations', is one more turn: `""`), and an org's own writers
go in the order they came. A writer so waits for the write in progress and then at most one write of each org
waiting before it, not for every write one org queued. Like the RLock it replaces it is reentrant, and a
non-blocking acquire never takes it ahead of a waiting writer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class TurnLock:
    turn_of = threading.Event  # what a waiter waits on (a test interrupts its wait)

    def __init__(self) -> None:
        self._mutex = threading.Lock()  # a leaf: guards the fields below only
        self._owner: int | None = None
        self._depth = 0
        self._waiting: OrderedDict[str, deque[tuple[int, threading.Event]]] = OrderedDict()

    def acquire(self, blocking: bool = True, org: str = "") -> bool:
        """Take the lock (again, if this thread holds it), waiting for `org`'s turn; without `blocking`, only
        when no one holds it (then no one waits either: a release hands it to a waiter)."""
        me = threading.get_ident()
        with self._mutex:
            if self._owner in (me, None):
                self._owner, self._depth = me, self._depth + 1
                return True
            if not blocking:
                return False
            turn = self.turn_of()
            self._waiting.setdefault(org, deque()).append((me, turn))
        try:
            turn.wait()  # the release that handed it over made this thread the owner
        except BaseException:  # interrupted (Ctrl-C): out of the line, or the lock given back if handed over
            with self._mutex:
                line = self._waiting.get(org)
                if line is not None and (me, turn) in line:
                    line.remove((me, turn))
                    if not line:
                        del self._waiting[org]
                    raise
            self.release()
            raise
        return True

    def release(self) -> None:
        with self._mutex:
            if self._owner != threading.get_ident():
                raise RuntimeError("release of a TurnLock this thread does not hold")
            self._depth -= 1
            if self._depth:
                return
            self._owner = None
            if not self._waiting:
                return
            org, queue = next(iter(self._waiting.items()))  # the org whose turn it is
            thread, turn = queue.popleft()
            if queue:
                self._waiting.move_to_end(org)  # its next writer after every other org's waiting
            else:
                del self._waiting[org]
            self._owner, self._depth = thread, 1
            turn.set()

    @contextmanager
    def turn(self, org: str) -> Iterator[None]:
        """Hold the lock in `org`'s turn."""
        self.acquire(org=org)
        try:
            yield
        finally:
            self.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *_: Any) -> None:
        self.release()
