"""How the Postgres store reaches its server, and what a request is told when it cannot.

A request waits for Postgres at most GRANDBO_STORE_TIMEOUT_SECONDS (2 s): that long for a pooled connection, a new
connection's handshake (libpq `connect_timeout`, whole seconds, at least 2), and the health query `/readyz` runs
(its `statement_timeout`); then it is answered 503 `store_unavailable` with the remedy. Before, the pool's own 30 s
wait, tried three times over, answered after 90 s, and `/readyz` after 30 s with a 500.

The pool checks each connection before lending it (a connection the server dropped is replaced, not handed to a
request) and gives up a reconnection after the same timeout instead of backing off for minutes: the next request
that needs a connection starts a fresh attempt, so the first request after the server returns gets a connection
within a second or two (it waited 95 s behind the pool's back-off).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from grandbo.errors import StoreUnavailableError

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
    """The 503 of a request that got no connection within the timeout."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return StoreUnavailableError(
        f"Postgres at {url} gave no connection within {timeout_s:g} s ({first}): it is down, restarting or "
        "unreachable; nothing was read or written. Retry shortly; the process reconnects by itself once it answers.",
        detail={"url": url, "waited_s": timeout_s},
    )


@contextlib.contextmanager
def lend(pool: ConnectionPool[Any], url: str, timeout_s: float) -> Iterator[psycopg.Connection[Any]]:
    """A pooled connection (`pool.connection()`), or `unreachable` when none came within the pool's timeout: a
    StoreUnavailableError, not an OperationalError, so no caller retries it (a connection lost during a
    statement still is, on a fresh connection)."""
    with contextlib.ExitStack() as stack:
        try:
            conn = stack.enter_context(pool.connection())
        except PoolTimeout as error:
            raise unreachable(url, timeout_s, error) from error
        yield conn
