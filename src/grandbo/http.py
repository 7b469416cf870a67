"""Long-lived HTTP clients: one per hosted provider and per LLM client, per process, closed at shutdown.

Each provider or LLM client builds its `httpx.Client` once, when it is built (once per process: `Grandbo`
keeps them), and shares it between threads (httpx's connection pool is thread-safe); `Grandbo.close` closes
them, so no connection outlives the process's store nor is opened again for every request.

`post_bounded` is how they call: httpx's timeout bounds each read, not the call, and it reads a whole answer
into memory, so a provider that sent its answer a byte a second held a recall for a minute past a 3 s timeout,
and one 300 MB answer took the shared server from 140 MB to 4 GB (probe 24). A compressed answer is inflated
within the same bound, a piece at a time.
"""

from __future__ import annotations

import datetime
import email.utils
import ssl
import time
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import structlog

from grandbo.deadlines import Transport, within

log = structlog.get_logger(__name__)

_PIECE = 64 * 1024  # the most of an answer inflated at once


def client(timeout: float, headers: dict[str, str] | None = None, *, ca_bundle: str | None = None) -> httpx.Client:
    """The one client of a provider or LLM client: its connections kept alive between calls. `ca_bundle`: the
    path of the operator's own CA certificates, where TLS certificates are checked against them."""
    context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else httpx.create_ssl_context()
    # the encodings `send_bounded` inflates itself (httpx would ask for brotli or zstd too, were they installed);
    # the environment's proxies are the transport's (`grandbo.deadlines`), so that their calls end in time too
    return httpx.Client(headers={"Accept-Encoding": "gzip, deflate", **(headers or {})}, timeout=timeout,
                        transport=Transport(context), trust_env=False)  # fmt: skip


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
    error's body is only cut there: its status says what happened). Every socket read and write of the call, the
    answer's head too, waits at most what is left of `timeout` (`grandbo.deadlines`): a trickle ends at the deadline."""
    status, _, body = send_bounded(http, "POST", url, timeout=timeout, limit=limit, json=payload)
    return status, body


def retry_after(headers: httpx.Headers, most: float) -> float | None:
    """The seconds an answer's `Retry-After` asks the caller to wait (RFC 9110: seconds, or an HTTP-date), at most
    `most`; None without one, or with one that says neither."""
    value = headers.get("Retry-After", "").strip()
    if value.isascii() and value.isdigit():
        return min(float(value), most)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110's IMF-fixdate is GMT; an obsolete form may parse without a zone
        when = when.replace(tzinfo=datetime.UTC)
    return min(max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds()), most)


def send_bounded(
    http: httpx.Client, method: str, url: str, *, timeout: float, limit: int, deadline: float | None = None,
    **request: Any,
) -> tuple[int, httpx.Headers, bytes]:  # fmt: skip
    """`post_bounded` for any request (`request`: httpx's headers, content or json), with the answer's headers;
    `deadline` (time.monotonic's) ends a call that began before this request (its retries), else `timeout`."""
    deadline = time.monotonic() + timeout if deadline is None else deadline
    body = bytearray()
    timeout_now = max(deadline - time.monotonic(), 0.001)
    with within(deadline), http.stream(method, url, timeout=timeout_now, **request) as response:
        for chunk in _inflated(response):
            body += chunk
            if len(body) > limit and response.is_success:
                raise AnswerTooLarge(f"an answer over {limit:,} bytes")
            if len(body) > limit:
                return response.status_code, response.headers, bytes(body[:limit])
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"the answer took over {timeout:g} s", request=response.request)
        return response.status_code, response.headers, bytes(body)


def _inflated(response: httpx.Response) -> Iterator[bytes]:
    """The answer's bytes, inflated here (gzip, deflate) 64 KiB at a time: httpx's own decoder inflates each read
    whole, and 306 KB of gzip inflate to 300 MB (one read of it took 130 MB before the bound was looked at)."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        yield from response.iter_raw()
        return
    if encoding not in ("gzip", "deflate"):
        raise httpx.DecodingError(f"an answer in {encoding!r}, an encoding not asked for", request=response.request)
    inflate = zlib.decompressobj(wbits=47)  # 32 + 15: a gzip or a zlib header, read from the answer
    try:
        for raw in response.iter_raw():
            piece = inflate.decompress(raw, _PIECE)
            while piece:
                yield piece
                piece = inflate.decompress(inflate.unconsumed_tail, _PIECE)
    except zlib.error as error:
        raise httpx.DecodingError(f"an answer that is not {encoding} ({error})", request=response.request) from None
