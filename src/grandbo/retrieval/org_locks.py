"""A lock per organization, made when a thread first asks for it and dropped with its last holder: a process that
serves many orgs keeps one only for each org a thread is in."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Held:
    """One org's lock and how many threads hold or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class OrgLocks:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # a leaf: guards the table only
        self._held: dict[str, _Held] = {}

    @contextmanager
    def holding(self, org_id: str) -> Iterator[None]:
        """Hold the org's lock (waiting for the thread that has it)."""
        with self._lock:
            held = self._held.get(org_id)
            if held is None:
                held = self._held[org_id] = _Held()
            held.users += 1
        try:
            with held.lock:
                yield
        finally:
            with self._lock:
                held.users -= 1
                if held.users == 0:
                    del self._held[org_id]
