"""Long-lived HTTP clients: one per hosted provider and per LLM client, per process, closed at shutdown.

Each provider or LLM client builds its `httpx.Client` once, when it is built (once per process: `Grandbo`
keeps them), and shares it between threads (httpx's connection pool is thread-safe); `Grandbo.close` closes
them, so no connection outlives the process's store nor is opened again for every request.
"""

from __future__ import annotations

import httpx
import structlog

log = structlog.get_logger(__name__)


def client(timeout: float, headers: dict[str, str] | None = None) -> httpx.Client:
    """The one client of a provider or LLM client: its connections kept alive between calls."""
    return httpx.Client(headers=headers, timeout=timeout)


def closing(thing: object) -> None:
    """Close what holds connections (a provider, an LLM client, a wrapper of one), if it can be closed; a
    failure to close is logged, never raised (it happens at shutdown)."""
    close = getattr(thing, "close", None)
    if not callable(close):
        return
    try:
        close()
    except Exception as error:
        log.warning("http.close_failed", what=type(thing).__name__, error=f"{type(error).__name__}: {error}"[:300])
