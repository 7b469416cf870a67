"""The HTTP connections of `grandbo serve`: uvicorn's httptools protocol, bounded where uvicorn does not bound it.

uvicorn closes a connection idle between requests (`timeout_keep_alive`), and nothing else: a request's headers
and body may take as long as the client likes, headers may be of any size, and every connection is kept until
the process runs out of files. About 1,000 half-sent requests without a key took every file of a server under
`ulimit -n 1024`, and every other client's request failed for as long as they were held, with nothing in the log;
one connection sent 300 MB of headers (probe 22b). Here:

* a request's line, headers and body must arrive within GRANDBO_HTTP_READ_SECONDS of its first byte (a new
  connection's first request, of the connection), else 408 and the connection closes; an import's upload streams
  (up to 1 GiB) and may instead not pause longer than GRANDBO_IMPORT_IDLE_SECONDS (its route answers 408
  upload_stalled and removes what came; this deadline, a second later, is the backstop). Time the server itself
  is not reading (the request waits for its org's turn, `ratelimit.OrgSlots`) is not the client's: not counted;
* its line and headers take at most GRANDBO_HTTP_MAX_HEADER_KB, else 431 and the connection closes; bytes the
  parser refuses (a NUL in a header, a bad Content-Length, TLS sent to this port) are a 400 `bad_request` in the
  API's error shape too, not uvicorn's plain text, saying what is wrong (`parser_refusal`, its reason in the detail);
* the process keeps at most `cap` connections (GRANDBO_HTTP_MAX_CONNECTIONS, lowered below the open-file limit):
  one past it closes the oldest connection that runs no request (idle, or still sending its request: that one
  gets 503 with Retry-After), so a client holding many half-sent requests loses its oldest to anyone who
  connects; when every connection runs a request, the new one gets 503 with Retry-After. Either is logged,
  `http.connections_full`, at most once per LOG_EVERY_S.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, ClassVar

import httptools
import structlog
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from grandbo.api.app import error_body
from grandbo.api.routes_history import PREFIX as STREAMED  # an import's upload
from grandbo.config_serving import RESERVED_FILES, ServingSettings
from grandbo.errors import ConnectionsFullError, GrandboError, HeadersTooLargeError, RequestTimeoutError

log = structlog.get_logger("grandbo.api")

LOG_EVERY_S = 10.0  # seconds between two lines saying the connections were full
INVALID_HTTP = (
    "Invalid HTTP request: its line or a header holds a byte HTTP/1.1 does not allow there (a NUL, a line break or "
    "another control character in a header's value), or the request line is malformed."
)
INVALID_HTTP_REMEDY = (
    "Send header values of printable characters only (percent-encode or base64 any other bytes), on a new "
    "connection: this one is closed."
)
# After a valid head, what the parser can refuse is a chunked body's framing (or its trailer)
INVALID_BODY = (
    "Invalid HTTP request: its chunked body is malformed (a chunk size that is not hexadecimal, a chunk not ended by "
    "CRLF, or a byte HTTP/1.1 does not allow in a trailer), after a valid request line and headers."
)
INVALID_BODY_REMEDY = (
    "Frame each chunk as HTTP/1.1 says (`<hex size>\\r\\n<data>\\r\\n`, ended by `0\\r\\n\\r\\n`), or send the body "
    "with Content-Length instead, on a new connection: this one is closed."
)
_CLOSED = ", on a new connection: this one is closed."
# What the parser's reason (llhttp's words, never the client's bytes) says is wrong, checked in order: a message and
# its remedy each. A reason none names (a header's byte, the request line) gets INVALID_HTTP's, or INVALID_BODY's.
_REASONS = (
    (
        "can't be present with",
        "Invalid HTTP request: it has both a Content-Length and a Transfer-Encoding header, "
        "which HTTP/1.1 forbids (each frames the body its own way).",
        f"Send one of them: Content-Length with the body's size in bytes, or Transfer-Encoding: chunked alone{_CLOSED}",
    ),
    (
        "content-length",
        "Invalid HTTP request: its Content-Length is not one number of bytes (a character that is not "
        "a decimal digit, a number too large, or two Content-Length headers).",
        f"Send a single Content-Length of decimal digits only, the body's size in bytes{_CLOSED}",
    ),
    (
        "transfer-encoding",
        "Invalid HTTP request: its Transfer-Encoding does not end with chunked, so the end of its "
        "body cannot be known.",
        f"Send Transfer-Encoding: chunked (last of its codings), or Content-Length{_CLOSED}",
    ),
)
TLS_TO_HTTP = "Invalid HTTP request: a TLS handshake (https://) was sent to this port, which speaks plain HTTP."
TLS_TO_HTTP_REMEDY = (
    "Connect to this port with http://, or serve HTTPS through a TLS-terminating proxy in front of `grandbo serve`."
)
_TLS_RECORD = b"\x16\x03"  # a TLS handshake record's first bytes (content type 22, version 3.x): no HTTP method's


def parser_refusal(reason: str, read: bytes, in_headers: bool) -> tuple[str, str]:
    """The message and remedy of a 400 for bytes the HTTP parser refused with `reason` (its error's words) in `read`,
    in the request's line and headers or (not `in_headers`) its body."""
    if in_headers and read.startswith(_TLS_RECORD):
        return TLS_TO_HTTP, TLS_TO_HTTP_REMEDY
    for words, message, remedy in _REASONS:
        if words in reason.lower():
            return message, remedy
    return (INVALID_HTTP, INVALID_HTTP_REMEDY) if in_headers else (INVALID_BODY, INVALID_BODY_REMEDY)


@dataclass
class _Shared:
    """What the connections of one server share: the bounds, and the connections that run no request, oldest
    first (a dict: ordered, and removal is O(1))."""

    read_s: float
    header_bytes: int
    cap: int
    pause_s: float  # an import's upload: how long it may pause (past GRANDBO_IMPORT_IDLE_SECONDS: the route's 408)
    idle: dict[BoundedProtocol, None] = field(default_factory=dict)
    evicted: int = 0
    refused: int = 0
    logged_at: float = float("-inf")

    def note_full(self, open_now: int) -> None:
        now = time.monotonic()
        if now - self.logged_at >= LOG_EVERY_S:
            log.warning("http.connections_full", open=open_now, cap=self.cap, closed_oldest=self.evicted,
                        refused=self.refused, setting="GRANDBO_HTTP_MAX_CONNECTIONS")  # fmt: skip
            self.logged_at, self.evicted, self.refused = now, 0, 0


class BoundedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a read deadline, a header bound and a connection cap (see the module)."""

    shared: ClassVar[_Shared]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._in_headers = False  # between a request's first byte and the end of its headers
        self._header_bytes = 0
        # Of the read being parsed: its bytes that belonged to requests before the one it began (their bodies and the
        # heads they finished, as the parser handed them over), and how many of them came before that beginning.
        self._earlier, self._before_begin = 0, 0
        self._head_seen = 0  # the line and headers of the request being read, as the parser handed them over
        self._streamed = False  # an import's upload: the deadline is a pause's, not the whole request's
        self._answered = False  # a request of ours was sent: the parser's complaints that follow are not
        self._read = b""  # the read being parsed (a 400 tells TLS sent to this port by its first bytes)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        shared = self.shared
        full = len(self.connections) >= shared.cap
        if full:
            shared.note_full(len(self.connections))
        if full and not self._evict_oldest():
            super().connection_made(transport)
            shared.refused += 1
            self._refuse(ConnectionsFullError(
                f"This API process has {shared.cap} connections open, each running a request.", retry_after=1,
                detail={"connections": shared.cap},
            ))  # fmt: skip
            return
        super().connection_made(transport)
        shared.idle[self] = None
        self._arm()

    def _evict_oldest(self) -> bool:
        """Close the oldest connection that runs no request: True if there was one."""
        while self.shared.idle:
            oldest = next(iter(self.shared.idle))
            del self.shared.idle[oldest]
            if oldest.transport.is_closing():
                continue
            self.shared.evicted += 1
            if oldest._in_headers or oldest.cycle is None:  # sending its request, or yet to: told why
                oldest._refuse(ConnectionsFullError(
                    f"This API process has {self.shared.cap} connections open; this one had not sent its whole "
                    "request yet, the oldest such.", retry_after=1, detail={"connections": self.shared.cap},
                ))  # fmt: skip
            else:  # idle between requests: closed as the keep-alive timeout closes it
                oldest.transport.close()
            return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.shared.idle.pop(self, None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._answered:
            return
        self._earlier, self._before_begin, self._read = 0, -1, data
        super().data_received(data)
        if self._in_headers and not self._answered:
            # The read's bytes from its request's beginning: all of them, unless the request began in this read, after
            # the end of the one before (a client that pipelines requests). That one's body and finished head are not
            # this request's headers: counted, a body over the bound before it made a valid request a 431. (Estimated
            # from what the parser handed over: a chunked body's framing counts here; a head begun in an earlier read
            # may let one read of the next request pass uncounted, no more.)
            self._header_bytes += max(0, len(data) - max(0, self._before_begin))
            if self._header_bytes > self.shared.header_bytes:
                self._refuse_head()

    def send_400_response(self, msg: str) -> None:
        # httptools refused the bytes (a NUL or another control character in a header, a broken request line, a bad
        # Content-Length, TLS sent to this port, or, the head read, a chunked body's framing): uvicorn answered it in
        # plain text, every other answer is in the API's error shape. uvicorn passes no reason (`msg` is always
        # "Invalid HTTP request received."): it calls this within its `except httptools.HttpParserError`, whose
        # error, the one being handled, holds the parser's.
        if not self._answered:
            refused = sys.exception()
            reason = str(refused) if isinstance(refused, httptools.HttpParserError) else ""
            message, remedy = parser_refusal(reason, self._read, self._in_headers)
            self._send(400, error_body("bad_request", message, remedy, {"parser": reason} if reason else None))

    # The parser's callbacks, none once the connection was answered and closed (`_refuse`) in the read being parsed.

    def on_message_begin(self) -> None:
        if self._answered:
            return
        super().on_message_begin()
        self._in_headers, self._header_bytes, self._streamed = True, 0, False
        self._before_begin, self._head_seen = self._earlier, 0
        if self._deadline is None:  # the next request of a kept-alive connection: from its first byte
            self._arm()

    def on_url(self, url: bytes) -> None:
        if self._answered:
            return
        super().on_url(url)
        self._head_seen += len(url)  # in pieces where the line came in several reads

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._answered:
            return
        super().on_header(name, value)
        self._head_seen += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        if self._answered:
            return
        head = self._head_seen + 18  # with the method, the version and the line ends (about)
        if head > self.shared.header_bytes:  # a whole head in the read it ended in: never counted in `data_received`
            self._refuse_head()
            return
        super().on_headers_complete()
        self._in_headers = False
        self._earlier += head
        self.shared.idle.pop(self, None)  # running a request
        self._streamed = self.scope.get("path", "").startswith(STREAMED)

    def on_body(self, body: bytes) -> None:
        if self._answered:
            return
        super().on_body(body)
        self._earlier += len(body)
        if self._streamed:
            self._arm(self.shared.pause_s)

    def on_message_complete(self) -> None:
        if self._answered:
            return
        super().on_message_complete()
        self._disarm()

    def on_response_complete(self) -> None:
        if self.cycle is not None and self.cycle.more_body:  # answered before its body came (a 401): what was
            self.cycle.body = bytearray()  # buffered of it is dropped now, as the rest will be (not kept till it ends)
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            self.shared.idle.pop(self, None)
            self.shared.idle[self] = None  # the newest idle one

    def _arm(self, seconds: float | None = None) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds or self.shared.read_s, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:  # the server is not reading (the request waits for its turn): not the client's
            self._arm()
            return
        cycle = self.cycle if not self._in_headers else None
        if cycle is not None and cycle.response_started:  # answered before its body came (a 401): no more of it
            self.transport.close()
            return
        if cycle is not None:  # the app waits for the rest of the body: it is told the client left
            cycle.disconnected = True
            cycle.message_event.set()
        log.info("http.request_timeout", path=self.scope.get("path") if cycle else None, read_s=self.shared.read_s)
        self._refuse(RequestTimeoutError(
            f"The request did not arrive whole within {self.shared.read_s:g} s of its first byte.",
            detail={"read_s": self.shared.read_s},
        ))  # fmt: skip

    def _refuse_head(self) -> None:
        self._refuse(HeadersTooLargeError(
            f"The request's line and headers are over {self.shared.header_bytes // 1024} KiB.",
            detail={"limit_bytes": self.shared.header_bytes},
        ))  # fmt: skip

    def _refuse(self, error: GrandboError) -> None:
        """Answer `error` in the API's error shape and close the connection."""
        self._send(error.status, error.to_dict(), getattr(error, "retry_after", None))

    def _send(self, status: int, error: dict[str, Any], retry: float | None = None) -> None:
        self._answered = True
        self._disarm()
        body = json.dumps(error).encode()
        head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "content-type: application/json",
                f"content-length: {len(body)}", "connection: close"]  # fmt: skip
        if retry is not None:
            head.append(f"retry-after: {retry}")
        self.transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        self.transport.close()


def protocol(settings: ServingSettings, cap: int) -> type[BoundedProtocol]:
    """A protocol class for one server: its connections share the bounds of `settings`, at most `cap` of them."""

    class Bounded(BoundedProtocol):
        shared = _Shared(settings.http_read_seconds, settings.http_max_header_kb << 10, cap,
                         max(settings.http_read_seconds, settings.import_idle_seconds + 1))  # fmt: skip

    return Bounded


def open_files() -> tuple[int, int, int]:
    """Raise the soft open-file limit to the hard one (the soft one is often 1,024: systemd's, most shells'):
    the limits before and after, and the hard one."""
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    after = before
    for wanted in (hard, 1 << 20):  # an unlimited hard limit is not a soft one Linux takes
        if wanted == resource.RLIM_INFINITY or wanted <= before:
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            continue
        after = wanted
        break
    return before, after, hard


def connections_cap(settings: ServingSettings) -> int:
    """GRANDBO_HTTP_MAX_CONNECTIONS, lowered to the open-file limit less RESERVED_FILES (at least 16)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    files = soft if soft != resource.RLIM_INFINITY else 1 << 20
    return max(16, min(settings.http_max_connections, files - RESERVED_FILES))


def server_config(app: Any, settings: ServingSettings, host: str, port: int, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration of `grandbo serve` (and of the tests' servers) for `app`."""
    options.setdefault("log_level", "warning")
    return uvicorn.Config(app, host=host, port=port, http=protocol(settings, connections_cap(settings)),
                          access_log=False, **options)  # fmt: skip
