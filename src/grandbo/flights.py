"""Work on one key that threads ask for at once, done by one thread at a time: two ways, by whether a caller can
tell an answer already made fits it.

`NextFlight`, for reads a caller cannot tell fresh enough (an organization's corpus counts: `GET /v1/stats` joins
every active entry with its vector, 0.5 s of the database at 50,000 entries, and an org's four requests at once asked
four such joins together while every other organization's requests waited for the two cores: probe 29). Runs of a key
take turns: the callers that come while one runs share the one run that starts when it ends. None is answered by a run
begun before it called, so an answer holds every write acknowledged before the call, as a read of its own does.

`Turns`, for a value kept in a cache with what it is fresh for (an organization's snapshot and the versions it holds:
`tiers.operations.Snapshots`). A caller takes the key's turn, then looks at the cache again: the thread before it may
have made what it needs. Sharing the next run would have every waiter's answer read again, though most need none.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import types
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar, cast

V = TypeVar("V")


class _Run(Generic[V]):
    """One run of `NextFlight`, and the callers it answers."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: V | None = None
        self.error: BaseException | None = None
        self.callers = 1


def _own(error: BaseException) -> BaseException:
    """A copy of `error` for one caller to raise: an exception raised in several threads at once gathers each one's
    traceback in its one `__traceback__` (review 29). Of the same type, arguments and attributes, its lists and
    dicts (`__notes__`, a `detail`) its own: a note one caller adds is not on the others'. A class's own `__init__`
    is not run again (it may format its arguments: "entry entry F-1 not found not found"); a builtin's is (OSError's
    errno, UnicodeError's fields are set there, not in `__dict__`)."""
    kind = type(error)
    own: BaseException | None = None
    if not isinstance(kind.__init__, types.FunctionType):
        with contextlib.suppress(Exception):  # one whose arguments are not its `args`: made without `__init__`
            own = copy.copy(error)
    if own is None:
        own = kind.__new__(kind, *error.args)
        own.args = error.args
    for name in {name for cls in kind.__mro__ for name in _slots(cls)}:
        if hasattr(error, name):
            setattr(own, name, getattr(error, name))
    own.__dict__.update({name: copy.copy(value) if isinstance(value, list | dict) else value
                         for name, value in vars(error).items()})  # fmt: skip
    return own.with_traceback(None)


def _slots(cls: type) -> tuple[str, ...]:
    slots = vars(cls).get("__slots__", ())
    return tuple(
        name for name in ((slots,) if isinstance(slots, str) else slots) if name not in ("__dict__", "__weakref__")
    )


class NextFlight(Generic[V]):
    """Per key, the run under way and the one the callers since will share (`run`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Hashable, _Run[V]] = {}
        self._next: dict[Hashable, _Run[V]] = {}

    def waiting(self, key: Hashable) -> int:
        """How many callers wait for the run of `key` after the one under way."""
        with self._lock:
            return following.callers if (following := self._next.get(key)) is not None else 0

    def run(self, key: Hashable, read: Callable[[], V]) -> V:
        """`read()`'s answer from a run of `key` that began after this call: this caller's own, or one it shares
        with the callers that came while the previous run went on (its error: a copy of it raised to each of them,
        from it)."""
        with self._lock:
            ahead = self._running.get(key)
            if ahead is None:
                flight, leads = self._running.setdefault(key, _Run()), True
            elif (waiting := self._next.get(key)) is not None:  # not begun: shared
                flight, leads = waiting, False
                flight.callers += 1
            else:
                flight, leads = self._next.setdefault(key, _Run()), True
        if not leads:
            flight.done.wait()
            if flight.error is not None:
                raise _own(flight.error) from flight.error
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


class _Turn:
    """A key's lock in `Turns`, and how many threads hold or await it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.threads = 0


class Turns:
    """A lock per key, made when a thread first asks for it and dropped once no thread holds or awaits it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: dict[Hashable, _Turn] = {}

    @contextlib.contextmanager
    def of(self, key: Hashable, waiting: Callable[[], None] = lambda: None) -> Iterator[None]:
        """Within: this thread alone of those asking for `key` (another key's are not held up). `waiting` is called
        first when another thread has the turn, before this one waits for it: what this one holds meanwhile is let
        go (a caller's open transaction, which waited idle on its pooled connection)."""
        with self._lock:
            turn = self._turns.setdefault(key, _Turn())
            turn.threads += 1
        try:
            if not turn.lock.acquire(blocking=False):
                waiting()
                turn.lock.acquire()
            try:
                yield
            finally:
                turn.lock.release()
        finally:
            with self._lock:
                turn.threads -= 1
                if not turn.threads:
                    del self._turns[key]
