"""Reads of one key that overlap run once: each caller is answered by a run that began after it called.

An organization's corpus counts (`GET /v1/stats`, the MCP and CLI's) join every active entry with its vector: 0.5 s
of the database at 50,000 entries on these cores, and an org's four requests at once (`GRANDBO_REQUESTS_PER_ORG`)
asked four such joins together, every other organization's requests waiting behind them for the two cores
(probe 29). Runs of a key here take turns: while one runs, the callers that come meanwhile wait for it to end and
share the one run that starts then. None is answered by a run begun before it called, so an answer holds every
write acknowledged before the call, as a read of its own does; one key runs at most once at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, cast

V = TypeVar("V")


class _Flight(Generic[V]):
    """One run, and the callers it answers."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: V | None = None
        self.error: BaseException | None = None
        self.callers = 1


class NextFlight(Generic[V]):
    """Per key, the run under way and the one the callers since will share (`run`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Hashable, _Flight[V]] = {}
        self._next: dict[Hashable, _Flight[V]] = {}

    def waiting(self, key: Hashable) -> int:
        """How many callers wait for the run of `key` after the one under way."""
        with self._lock:
            return following.callers if (following := self._next.get(key)) is not None else 0

    def run(self, key: Hashable, read: Callable[[], V]) -> V:
        """`read()`'s answer from a run of `key` that began after this call: this caller's own, or one it shares
        with the callers that came while the previous run went on (its error, raised to each of them)."""
        with self._lock:
            ahead = self._running.get(key)
            if ahead is None:
                flight, leads = self._running.setdefault(key, _Flight()), True
            elif (waiting := self._next.get(key)) is not None:  # not begun: shared
                flight, leads = waiting, False
                flight.callers += 1
            else:
                flight, leads = self._next.setdefault(key, _Flight()), True
        if not leads:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return cast(V, flight.value)  # set before `done`
        if ahead is not None:
            ahead.done.wait()  # which made this one the run under way as it ended
        try:
            value = flight.value = read()
        except BaseException as error:
            flight.error = error
            raise
        finally:
            with self._lock:  # the next run, if any caller waits for one, is under way from now
                if (following := self._next.pop(key, None)) is not None:
                    self._running[key] = following
                else:
                    del self._running[key]
            flight.done.set()
        return value
