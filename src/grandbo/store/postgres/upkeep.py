"""Maintenance an erasure owes, off the request path: the VACUUM that prunes the dead row versions still holding
the erased text.

A purge (and a text erasure) ran `VACUUM` of tables every organization shares inside the request: the caller
waited for it, and a VACUUM waits for any session holding a conflicting lock (another VACUUM, an index build, a
long `LOCK TABLE`), so a purge could hang behind another tenant's work. Now the store records the tables owed and
one thread of its own vacuums them after the erasure committed; owed vacuums of the same tables are run once, and
a group of tables at most once in GAP_S: each VACUUM reads every organization's rows of those tables, and one org
purging in a loop kept one running most of the time (283 purges, 243 VACUUMs in 25 s: another org's requests took
twice as long, probe 18). The erased text so stays in dead row versions up to GAP_S longer.
`close` runs what is still owed before the store closes (a CLI purge still vacuums before it exits); a process
killed before that leaves the pruning to autovacuum, as a refused VACUUM always did (no MAINTAIN privilege).
"""

from __future__ import annotations

import threading
import time

import psycopg
import structlog

log = structlog.get_logger(__name__)
GAP_S = 10.0  # seconds between two VACUUMs of one group of tables (owed ones meanwhile wait, and are run as one)


class Vacuums:
    """VACUUMs owed, run on one thread of the store's own."""

    def __init__(self, dsn: str, connect_timeout: float) -> None:
        self._dsn, self._connect_timeout = dsn, connect_timeout
        self._owed: list[tuple[str, ...]] = []  # table groups, each vacuumed by one statement, in order
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._last: dict[tuple[str, ...], float] = {}  # each group's last VACUUM, on the monotonic clock
        self._hurry = False  # `wait`: what is owed runs now, whatever GAP_S says
        self.done = 0  # statements run (tests and logs count them)

    def owe(self, *tables: str) -> None:
        """Vacuum `tables` soon, after the caller's transaction committed; the caller does not wait."""
        with self._lock:
            if tables not in self._owed:
                self._owed.append(tables)
                self._idle.notify_all()  # a thread waiting out another group's gap looks again
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="grandbo-vacuum", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._owed:
                    self._thread = None
                    self._idle.notify_all()
                    return
                now = time.monotonic()
                due = {group: max(0.0, self._last.get(group, -GAP_S) + GAP_S - now) for group in self._owed}
                # The first group owed that is due (a group's gap holds back that group only), else the soonest.
                tables = min(self._owed, key=due.__getitem__)
                if due[tables] > 0 and not self._hurry:
                    self._idle.wait(due[tables])  # or until a group is owed (`owe`), or `wait` hurries it
                    continue
                self._owed.remove(tables)
            self._vacuum(tables)
            with self._lock:
                self._last[tables] = time.monotonic()

    def _vacuum(self, tables: tuple[str, ...]) -> None:
        """Prune the dead row versions and free their space. The runtime role may (MAINTAIN, granted by `grandbo
        migrate` on Postgres 17+); without it, autovacuum will."""
        try:
            timeout = max(2, int(self._connect_timeout))
            with psycopg.connect(self._dsn, autocommit=True, connect_timeout=timeout) as conn:
                conn.execute(f"VACUUM {', '.join(tables)}")  # fixed table names
            self.done += 1
        except psycopg.Error as error:
            log.warning("store.vacuum_skipped", tables=list(tables), error=str(error).splitlines()[0])

    def wait(self, timeout: float | None = None) -> bool:
        """Run what is owed now and wait until nothing is (True), or `timeout` passed (False)."""
        with self._lock:
            self._hurry = True
            self._idle.notify_all()
            try:
                return self._idle.wait_for(lambda: self._thread is None, timeout)
            finally:
                self._hurry = False
