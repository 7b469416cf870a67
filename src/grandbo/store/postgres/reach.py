"""How the Postgres store reaches its server, and what a request is told when it cannot.

While the server cannot be reached a request waits for Postgres about GRANDBO_STORE_TIMEOUT_SECONDS (2 s): that
long for a pooled connection, a new connection's handshake (libpq `connect_timeout`, whole seconds, at least 2),
and the health query `/readyz` runs (its `statement_timeout`); then it is answered 503 `store_unavailable` with
the remedy. Before, the pool's own 30 s wait, tried three times over, answered after 90 s, and `/readyz` after
30 s with a 500. A pool that is only busy (every connection lent, the server answering) is not an outage: its
requests wait as before, up to 30 s (`Reach.lend`).

The pool checks each connection before lending it (a connection the server dropped is replaced, not handed to a
request: `check`, without a round trip while the server has said nothing on it) and gives up a reconnection after
the same timeout instead of backing off for minutes: the next request that needs a connection starts a fresh
attempt, so the first request after the server returns gets a connection within a second or two (it waited 95 s
behind the pool's back-off).
"""

from __future__ import annotations

import contextlib
import math
import select
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import structlog
from psycopg_pool import ConnectionPool, PoolTimeout

from grandbo.errors import OverloadedError, StoreUnavailableError

log = structlog.get_logger(__name__)

BUSY_S = 30.0  # how long a request waits for a connection while the pool is busy but the server reachable
SLICE_S = 0.25  # while waiting longer, how often it looks whether the server became unreachable

# TCP keepalives: a connection to a server that vanished without closing it (a host lost, a network cut) is
# found dead within about 20 s by the kernel instead of the system's two hours.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 2}


def connect_options(timeout_s: float) -> dict[str, Any]:
    """libpq options of every connection the store opens: the handshake's deadline and the keepalives."""
    return {"connect_timeout": max(2, math.ceil(timeout_s)), **KEEPALIVES}


def health_timeout(timeout_s: float) -> str:
    """The health query's statement_timeout, in milliseconds (a server that accepts but does not answer)."""
    return str(max(1, round(timeout_s * 1000)))


def unreachable(url: str, timeout_s: float, error: psycopg.OperationalError) -> StoreUnavailableError:
    """The 503 of a request that got no connection because the server cannot be reached."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return StoreUnavailableError(
        f"Postgres at {url} cannot be reached ({first}): it is down, restarting or unreachable; nothing was read or "
        "written. Retry shortly; the process reconnects by itself once it answers.",
        detail={"url": url, "waited_s": timeout_s},
    )


@contextlib.contextmanager
def reads_lost(url: str) -> Iterator[None]:
    """Within: a connection lost during a read that is not retried (a change-feed snapshot, a consistent read)
    is a 503 `store_unavailable`, not the driver's error (which answered a 500)."""
    try:
        yield
    except psycopg.OperationalError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise StoreUnavailableError(
            f"Lost the connection to Postgres at {url} during a read ({first}). Retry shortly.", detail={"url": url}
        ) from error


def check(conn: psycopg.Connection[Any]) -> None:
    """The pool's check of a connection it is about to lend: the server's answer to an empty statement only where
    the server has said something on it unasked (its socket readable: a server closing a connection, at a shutdown,
    a restart or `pg_terminate_backend`, sends why and closes it), else none. A connection the server dropped is
    still replaced (the statement fails); one whose host vanished without a word is found by the keepalives, as an
    empty statement sent to it would have been. Before, every connection lent sent one and waited (4 round trips of
    an org's first recall)."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    said = select.poll()  # not select(): a server's descriptors pass 1,024 (`api.connections.open_files`)
    said.register(conn.fileno(), select.POLLIN | select.POLLHUP)
    if said.poll(0):
        ConnectionPool.check_connection(conn)


class Reach:
    """What the store's pool knows of its server: a reconnection that gave up marks it unreachable, a connection
    made clears that. `lend` tells an unreachable server (503 `store_unavailable` within the store timeout) from
    a pool whose connections are all busy (the request waits longer, then 503 `overloaded` with Retry-After):
    a burst of slow requests is not an outage."""

    def __init__(self, url: str, timeout_s: float, busy_s: float = BUSY_S) -> None:
        self.url, self.timeout_s, self.busy_s = url, timeout_s, busy_s
        self.unreachable_since: float | None = None

    def configure(self, inner: Callable[[psycopg.Connection[Any]], None]) -> Callable[[psycopg.Connection[Any]], None]:
        """The pool's `configure` callback: `inner`, and the server is reachable (a connection was just made)."""

        def configured(conn: psycopg.Connection[Any]) -> None:
            inner(conn)
            self.unreachable_since = None

        return configured

    def failed(self, _: ConnectionPool[Any]) -> None:
        """The pool's `reconnect_failed` callback: a connection attempt gave up after `reconnect_timeout`."""
        if self.unreachable_since is None:
            self.unreachable_since = time.monotonic()
            log.warning("store.unreachable", url=self.url)

    @contextlib.contextmanager
    def lend(self, pool: ConnectionPool[Any]) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (`pool.connection()`). When none came within the store timeout: a
        StoreUnavailableError as soon as the server is known unreachable (not an OperationalError, so no caller
        retries it), else more waiting for a busy pool, up to `busy_s`, then OverloadedError."""
        started = time.monotonic()
        wait = self.timeout_s
        with contextlib.ExitStack() as stack:
            while True:
                try:
                    conn = stack.enter_context(pool.connection(timeout=wait))
                    break
                except PoolTimeout as error:
                    waited = time.monotonic() - started
                    if self.unreachable_since is not None:
                        raise unreachable(self.url, round(waited, 1), error) from error
                    if waited >= self.busy_s:
                        raise OverloadedError(
                            f"Every connection to Postgres at {self.url} stayed busy for {waited:.0f} s; nothing was "
                            "read or written. If it persists, raise GRANDBO_PG_POOL_SIZE or run more API processes.",
                            retry_after=1,
                            detail={"pool_waited_s": round(waited, 1)},
                        ) from error
                    wait = min(SLICE_S, self.busy_s - waited)  # and look again whether the server is reachable
            yield conn
