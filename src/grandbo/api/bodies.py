"""Request bodies: read only when the app asks for one, after its request was admitted (its key, its rate, one of
its org's slots: `api.clean`, the MCP guard), bounded for each request and, every request's together, for the
process.

A body was read whole before the key was looked at: 400 connections without a key, each sending all of a 4 MiB
webhook body but its last byte, took a server from 170 MB to 1.84 GB (probe 22b). Now a request refused before
its body is asked for (no key, a bad one, over its rate, a 404) is answered unread: the server holds what the
connection buffers (64 KiB) and drops the rest as it comes. What is read is counted against
GRANDBO_REQUEST_BUFFER_MB while the request runs: one organization's bodies take at most a quarter of it (429
past that), all together all of it (503 past that), both with Retry-After, before a byte is read. A body sent
before any key is known (the console's sign-in form; a console form with a signed session cookie counts as its
org's) is at most MAX_UNADMITTED_BODY and shares a sixteenth of the bound, so clients without a key cannot take
the room keyed requests need.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grandbo.api import routes_history
from grandbo.api.clean import error_response
from grandbo.errors import (
    BodiesBusyError,
    BodiesOrgBusyError,
    GrandboError,
    InvalidInputError,
    PayloadTooLargeError,
)

log = structlog.get_logger("grandbo.api")

MAX_BODY = 1 << 20  # 1 MiB: far more than any memory, alert batch or incident needs
MAX_WEBHOOK_BODY = 4 << 20  # an Alertmanager group of hundreds of alerts
MAX_UNADMITTED_BODY = 16 << 10  # a body read before a key is known: the console's sign-in form
_NOBODY = ""  # the budget's name for bodies of requests no key admitted


class Budget:
    """Bytes of request bodies the process holds at once: `total` for all, `per_org` for each organization's;
    those of requests no key admitted have a sixteenth of `total` of their own (`_NOBODY`)."""

    def __init__(self, total: int) -> None:
        self.total = total - total // 16
        self.per_org = max(self.total // 4, MAX_WEBHOOK_BODY)
        self.unadmitted = total // 16
        self.held = 0
        self.held_by: dict[str, int] = {}

    def take(self, org: str, size: int) -> None:
        """Count `size` bytes of `org`'s (or, `_NOBODY`, of no key's) bodies, or refuse them (429, 503)."""
        mine = self.held_by.get(org, 0)
        if org == _NOBODY:
            if mine + size > self.unadmitted:
                raise BodiesBusyError(f"This API process holds {mine:,} bytes of bodies sent without a key, its most "
                                      "for those.", retry_after=1, detail={"held_bytes": mine})  # fmt: skip
        elif mine + size > self.per_org:
            raise BodiesOrgBusyError(
                f"This API process holds {mine:,} bytes of organization {org}'s request bodies; this one would take it "
                f"past {self.per_org:,}, its share of GRANDBO_REQUEST_BUFFER_MB. It was not read.",
                retry_after=1, detail={"org_id": org, "held_bytes": mine, "share_bytes": self.per_org},
            )  # fmt: skip
        elif self.held + size > self.total:
            log.warning("http.request_buffer_full", held_bytes=self.held, total_bytes=self.total, org=org)
            raise BodiesBusyError(
                f"This API process holds {self.held:,} bytes of request bodies, every organization's; this one would "
                f"take it past GRANDBO_REQUEST_BUFFER_MB ({self.total + self.unadmitted:,} bytes). It was not read.",
                retry_after=1, detail={"held_bytes": self.held},
            )  # fmt: skip
        self.held_by[org] = mine + size
        if org != _NOBODY:
            self.held += size

    def give(self, org: str, size: int) -> None:
        if not size:
            return
        left = self.held_by[org] - size
        if left:
            self.held_by[org] = left
        else:
            del self.held_by[org]
        if org != _NOBODY:
            self.held -= size


class _Refused(Exception):
    """Raised from `receive` once the body limit has answered the request itself: what the app does next is
    dropped."""


class BodyLimit:
    """Bound request bodies (see the module): 413 for a declared length over the path's limit, at once; any other
    body is read when the app first asks for it, counted in the process's `Budget`, and handed over as it came."""

    def __init__(self, app: ASGIApp, budget: Budget) -> None:
        self.app, self.budget = app, budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = MAX_WEBHOOK_BODY if scope["path"].startswith("/v1/webhooks/") else MAX_BODY
        limit = routes_history.MAX_IMPORT_BODY if scope["path"].startswith(routes_history.PREFIX) else limit
        if (declared := declared_length(scope)) is not None and declared > limit:
            await _answer(send, _too_large(limit))
            return
        # an import's upload streams to a file, and its route bounds it. `/mcp` is read here like the rest (a message
        # is one JSON-RPC body): the SDK's own bound answered a body sent without a length with a plain-text 413.
        if scope["path"].startswith(routes_history.PREFIX):
            await self.app(scope, receive, send)
            return
        body = _Body(self.budget, scope, receive, send, limit, declared)
        try:
            await self.app(scope, body.receive, body.send)
        except Exception:
            if not body.answered:
                raise  # the app's own failure: `Contained` answers it
        finally:
            body.release()


def declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, or None when it has none (chunked, or no body) or one that is not a number
    (the server refused those already)."""
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            return int(value) if value.isdigit() and len(value) <= 18 else None
    return None


class _Body:
    """One request's body, read at the app's first `receive`, and what the budget counts of it."""

    def __init__(self, budget: Budget, scope: Scope, receive: Receive, send: Send, limit: int, declared: int | None):
        self.budget, self.scope, self._receive, self._send = budget, scope, receive, send
        self.limit, self.declared = limit, declared
        self.answered = self.started = False
        self.org: str | None = None
        self.taken = 0
        self.held: list[Message] | None = None
        self._reading = asyncio.Lock()

    async def send(self, message: Message) -> None:
        if self.answered:
            return  # the app's answer to a body it did not get
        self.started = self.started or message["type"] == "http.response.start"
        await self._send(message)

    async def receive(self) -> Message:
        async with self._reading:
            if self.held is None:
                try:
                    self.held = await self._read()
                except _Answer as refused:
                    self.answered = True
                    if refused.response is not None and not self.started:  # (one begun is cut: uvicorn closes)
                        await refused.response(self.scope, _no_body, self._send)
                    raise _Refused from None
            if self.held:
                return self.held.pop(0)
        return await self._receive()

    async def _read(self) -> list[Message]:
        admitted = self.scope.get("state", {}).get("admitted") or _console_org(self.scope)
        self.org = admitted or _NOBODY
        limit = self.limit if admitted else MAX_UNADMITTED_BODY
        if (encoding := _encoding(self.scope)) not in (b"", b"identity"):
            raise _Answer(_compressed(encoding))
        if self.declared is not None and self.declared > limit:
            raise _Answer(_too_large(limit, admitted=bool(admitted)))
        self._take(self.declared or 0)
        received: list[Message] = []
        seen = 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":  # the client left, or its time ran out (answered 408)
                raise _Answer(None)
            received.append(message)
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _Answer(_too_large(limit, admitted=bool(admitted)))
            if seen > self.taken:  # sent without a length (chunked): counted as it comes
                self._take(seen - self.taken)
            if not message.get("more_body", False):
                break
        self.scope.setdefault("state", {})["body_bytes"] = seen
        return received

    def _take(self, size: int) -> None:
        try:
            self.budget.take(self.org or _NOBODY, size)
        except GrandboError as error:
            raise _Answer(error_response(error)) from None
        self.taken += size

    def release(self) -> None:
        self.budget.give(self.org or _NOBODY, self.taken)
        self.taken = 0


class _Answer(Exception):
    """What the body limit answers instead of the body (413, 429, 503), or None when there is no one to answer."""

    def __init__(self, response: JSONResponse | None) -> None:
        super().__init__(response and response.status_code)
        self.response = response


def _console_org(scope: Scope) -> str | None:
    """The organization of a console request's signed, unexpired session cookie (`web.session`), if it has one:
    its form is read as that org's (the key's record is read after, by the page)."""
    sessions: Any = getattr(scope["app"].state, "console_sessions", None) if "app" in scope else None
    return None if sessions is None or not scope["path"].startswith("/ui/") else sessions.signed_org(scope)


def _encoding(scope: Scope) -> bytes:
    return next((value.strip().lower() for name, value in scope.get("headers") or () if name == b"content-encoding"),
                b"")  # fmt: skip


def _compressed(encoding: bytes) -> JSONResponse:
    """A body sent compressed is never inflated (a 4 MiB gzip may inflate to gigabytes): it is refused, saying why,
    not read as JSON that is "not UTF-8" (probe 26)."""
    said = encoding.decode("latin-1")[:40]
    error = InvalidInputError(f"The request body is sent with Content-Encoding {said!r}: Grandbo reads bodies "
                              "uncompressed only. Send it without a Content-Encoding header.",
                              detail={"content_encoding": said})  # fmt: skip
    return error_response(error)


def _too_large(limit: int, *, admitted: bool = True) -> JSONResponse:
    said = "" if admitted else " (a request without a key that passes, or a console session)"
    error = PayloadTooLargeError(f"The request body is over {limit} bytes{said}.", detail={"limit_bytes": limit})
    return error_response(error)


async def _answer(send: Send, response: JSONResponse) -> None:
    await response({"type": "http", "method": "POST", "path": "/", "headers": []}, _no_body, send)  # outside the app


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}
