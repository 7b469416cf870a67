"""Work done for a key once it has gone quiet: `Quiet.touch(key)` asks for `due(key)` once `seconds` have passed
with no other touch of that key. One timer thread per key waiting, none otherwise."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Quiet:
    def __init__(self, seconds: float, due: Callable[[str], object]) -> None:
        self.seconds = seconds
        self._due = due
        self._lock = threading.Lock()
        self._touched: dict[str, float] = {}  # key -> time.monotonic() of its last touch, while it waits
        self._timers: dict[str, threading.Timer] = {}

    def touch(self, key: str) -> None:
        """Put `due(key)` off until `seconds` after now."""
        with self._lock:
            self._touched[key] = time.monotonic()
            if key not in self._timers:
                self._wait(key, self.seconds)

    def flush(self) -> list[str]:
        """The keys waiting, none of them due any more (the caller does their work now)."""
        with self._lock:
            for timer in self._timers.values():
                timer.cancel()
            waiting = list(self._timers)
            self._timers.clear()
            self._touched.clear()
        return waiting

    def _wait(self, key: str, seconds: float) -> None:
        timer = threading.Timer(seconds, self._ring, (key,))
        timer.daemon = True
        self._timers[key] = timer
        timer.start()

    def _ring(self, key: str) -> None:
        with self._lock:
            if key not in self._timers:  # flushed meanwhile
                return
            left = self._touched[key] + self.seconds - time.monotonic()
            if left > 0:  # touched again since the timer started
                self._wait(key, left)
                return
            del self._timers[key], self._touched[key]
        self._due(key)
