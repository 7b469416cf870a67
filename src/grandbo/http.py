"""Long-lived HTTP clients: one per hosted provider and per LLM client, per process, closed at shutdown.

Each provider or LLM client builds its `httpx.Client` once, when it is built (once per process: `Grandbo`
keeps them), and shares it between threads (httpx's connection pool is thread-safe); `Grandbo.close` closes
them, so no connection outlives the process's store nor is opened again for every request.

`post_bounded` is how they call: httpx's timeout bounds each read, not the call, and it reads a whole answer
into memory, so a provider that sent its answer a byte a second held a recall for a minute past a 3 s timeout,
and one 300 MB answer took the shared server from 140 MB to 4 GB (probe 24).
"""

from __future__ import annotations

import time
from typing import Any

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


class AnswerTooLarge(ValueError):
    """A provider's answer went past what the call could need (`post_bounded`); nothing of it was used."""


def post_bounded(http: httpx.Client, url: str, payload: Any, *, timeout: float, limit: int) -> tuple[int, bytes]:
    """POST `payload` as JSON; the answer's status and body, read within `timeout` seconds for the whole call
    (httpx's own timeout bounds each read: a byte a second never ends it) and at most `limit` bytes. Past the time,
    httpx.ReadTimeout, as a read that waited too long; past the size, AnswerTooLarge, before more is held (an
    error's body is only cut there: its status says what happened). A trickle is cut at the first read past the
    deadline, so a call lasts at most about twice `timeout`."""
    deadline = time.monotonic() + timeout
    body = bytearray()
    with http.stream("POST", url, json=payload, timeout=timeout) as response:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit and response.is_success:
                raise AnswerTooLarge(f"an answer over {limit:,} bytes")
            if len(body) > limit:
                return response.status_code, bytes(body[:limit])
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"the answer took over {timeout:g} s", request=response.request)
        return response.status_code, bytes(body)
