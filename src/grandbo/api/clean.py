"""Text a store cannot hold, refused at the door: a NUL character (Postgres text and jsonb cannot keep it), a lone
surrogate (not UTF-8) and NaN or Infinity (not JSON), in any query parameter or anywhere in a JSON body, are a 422
naming the field, on every route and both backends, before a route or a store sees them. Postgres answered them
with a 500 (a psycopg DataError) where SQLite stored them, so an export from one could not be loaded into the other.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from grandbo.api.deps import verified
from grandbo.api.value_bounds import Bound, oversized
from grandbo.errors import (
    GrandboError,
    ImportRunningError,
    OverloadedError,
    RequestsOrgBusyError,
)
from grandbo.ratelimit import LARGE_REQUEST_BYTES, large_request
from grandbo.values import NotJsonNumber, constant_refused, text_problem

# Only a body holding one of these can hold what is refused (a raw NUL or surrogate byte is not JSON at all), so
# most bodies are never parsed twice (`_suspect`): the escape of a NUL or a surrogate; NaN or Infinity as a word of
# its own, not quoted (the string "NaN"); a number with a 3-digit exponent, or of 210 digits (with an exponent up to
# 99), which may overflow a float (1e400 reads as Infinity); one of over 4,300 digits is more than Python reads. Each
# is looked for by a search of bytes first: one regex of them all took 130-250 ms of the event loop for any 1 MiB
# body, text or numbers (probe 19); now 1-2 ms for one that holds none.
_ESCAPES = re.compile(rb"\\u0000|\\u[dD][89a-fA-F]")
_RAW_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")  # a surrogate's UTF-8 bytes, which no text of UTF-8 holds
_WORDS = re.compile(rb"(?:N(?<![\w\"]N)aN|I(?<![\w\"]I)nfinity)(?![\w\"])")  # the literal first: scanned quickly
_NUMBER_SHAPES = bytes(48 if 48 <= b <= 57 else 101 if b in b"eE" else 43 if b in b"+-" else 32 for b in range(256))
_LONG_NUMBERS = (b"e000", b"e+000", b"0" * 210)  # [eE][+-]?\d{3} and \d{210}, as `_NUMBER_SHAPES` writes them


def _suspect(body: bytes) -> bool:
    if _RAW_SURROGATE.search(body):  # not UTF-8, but `json.loads` reads it (surrogatepass): a webhook answered 500
        return True
    if b"\\u" in body and _ESCAPES.search(body):
        return True
    if (b"NaN" in body or b"Infinity" in body) and _WORDS.search(body):
        return True
    shapes = body.translate(_NUMBER_SHAPES)
    return any(shape in shapes for shape in _LONG_NUMBERS)


# JSON values the walk naming a refused text's field visits at most, objects and lists among them (a 500-alert
# delivery holds ~15,000); past them the refusal names the body. Walking every value of a 1 MiB body of integers took
# 0.85 s, when it ran on the event loop before the key was read (probe 19).
WALK_VALUES = 5_000
# Numbers of a body `_overflowing` tries as floats at most: those written with a 3-digit exponent or 210 digits.
NUMBERS_TRIED = 1_000
# Numbers as written, each tried from where a run of digits begins (not from every digit inside one, where a run of
# 4,300 digits was tried 4,300 times: 5.8 s for 1 MiB of them, review).
_DIGITS_OVER = re.compile(rb"(?<![\d.])-?\d{%d,}" % (sys.get_int_max_str_digits() + 1))
_BIG = re.compile(rb"(?<![\d.])-?(?:\d+(?:\.\d+)?[eE][+-]?\d{3,}|\d{210,}(?:\.\d+)?(?:[eE][+-]?\d+)?)")
FIELD_CHARS = 200  # of a refused field's name, as said: a key may be 1 MB long, and nested 900 deep


def _field_problem(value: Any) -> tuple[str, str] | None:
    """The first (field, problem) of a parsed JSON body, in its order, or None (also after WALK_VALUES values, each
    object and list one of them); a key's problem is its object's field's."""
    for at, item, key in islice(_values(value), WALK_VALUES):
        problem = None if item is _CONTAINER else text_problem(item, max_depth=1 << 30)
        if problem:
            return _said_field(at) or "body", f"a key {problem}" if key else problem
    return None


Path = tuple["Path", str | int] | None  # a field as (its parent's, its key or index): named only when refused
_CONTAINER = object()  # what `_values` gives for an object or list: counted, not checked


def _values(value: Any) -> Iterator[tuple[Path, Any, bool]]:
    """Each value of a parsed JSON value with its field (an object or list as `_CONTAINER`), depth first in order,
    and each key (True) with its object's; made as the walk asks, not list by list (a 1 MiB list holds 500,000
    values), the fields' names not made at all (1 MB of keys nested 900 deep made 449 MB of them, review)."""
    stack: list[Iterator[tuple[Path, Any]]] = [iter(((None, value),))]
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            continue
        at, item = step
        if isinstance(item, dict):
            stack.append(_members(item, at))
            yield at, _CONTAINER, False
        elif isinstance(item, list):
            stack.append(_elements(item, at))
            yield at, _CONTAINER, False
        elif isinstance(item, _Key):
            yield at, item.name, True
        else:
            yield at, item, False


class _Key(NamedTuple):
    name: str


def _elements(item: list[Any], at: Path) -> Iterator[tuple[Path, Any]]:
    for n, child in enumerate(item):
        yield (at, n), child


def _members(item: dict[str, Any], at: Path) -> Iterator[tuple[Path, Any]]:
    for key, child in item.items():
        yield at, _Key(key)
        yield (at, key), child


def _said_field(at: Path) -> str:
    """A field's name as the API says it (`meta.deep[1].x`), at most FIELD_CHARS characters of it (its end cut)."""
    parts: list[str] = []
    while at is not None:
        at, part = at
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    name = "".join(reversed(parts)).removeprefix(".")
    return name if len(name) <= FIELD_CHARS else name[: FIELD_CHARS - 1] + "…"


def _as_utf8(body: bytes) -> bytes:
    """A JSON body in UTF-8, which `_suspect` reads: JSON may come in UTF-16 or UTF-32 too, and the routes read
    those (json.loads detects them), where "NaN" is not the bytes b"NaN". As given when it does not decode."""
    encoding = json.detect_encoding(body)
    if encoding == "utf-8":
        return body
    try:
        return body.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")  # as `json.loads` reads it
    except UnicodeError:
        return body


def body_problem(body: bytes) -> tuple[str, str] | None:
    """What in a JSON body no store can keep, as (field, problem), or None (also for a body that is not JSON:
    the route says so in its own words). Found by the C parser and writer, in time linear in the body: Python
    runs only for a NaN or Infinity written as such, the numbers that may overflow, and the walk naming a field of
    refused text (at most WALK_VALUES values). `strict_json`, a Python call for every number, and a walk of every
    value took 0.35-0.85 s of the event loop for a 1 MiB body holding the word "NaN", before its key was read."""
    body = _as_utf8(body)
    if not _suspect(body):
        return None
    if len(body) > FIELD_NAMED_BYTES and (escaped := _escape_problem(body)) is not None:  # a smaller one is parsed
        return "body", escaped
    try:
        parsed = json.loads(body, parse_constant=constant_refused)
    except NotJsonNumber as error:
        return "body", f"contains {error.args[0]}; send a finite number or a string"
    except ValueError as error:  # Python's own words for an integer longer than it reads, or not JSON
        long = _DIGITS_OVER.search(body) if "integer string conversion" in str(error) else None
        if long is None:
            return None
        digits = f"{len(long.group().lstrip(b'-')):,}"
        return "body", f"contains a number of {digits} digits (valid JSON, but longer than a number is read); " \
                       "send a finite number or a string"  # fmt: skip
    except RecursionError:
        return None
    try:
        again = json.dumps(parsed, ensure_ascii=False, allow_nan=False, check_circular=False)
    except ValueError:  # a number read as Infinity: NaN itself was refused above
        return "body", f"contains {_overflowing(body)}; send a finite number or a string"
    said = _text_problem(again)
    return None if said is None else _field_problem(parsed) or ("body", said)


# Past this many bytes a NUL or lone surrogate is refused as the body's, found in its bytes (`_escape_problem`), not
# parsed and written again to name its field: that took 130-160 ms of the interpreter for a 1 MiB body, which one org
# could send again and again, its refusals taking other orgs' p95 to ~300 ms (session 19). A body this size parses
# in ~15 ms; an incident's or a memory's text with a NUL is named by its field.
FIELD_NAMED_BYTES = 256 << 10
# A surrogate's escape that is lone: a high one not just before a low one, a low one not just after a high one (the
# literal `\u` first, which the engine seeks quickly: 1 MiB in ~5 ms, where alternatives first took 40 ms)
_LONE = re.compile(
    rb"\\u[dD](?:[89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD])[c-fC-F][0-9a-fA-F]{2})"
)


def _escape_problem(body: bytes) -> str | None:
    """`text_problem`'s words for a NUL or a lone surrogate a JSON body (in UTF-8) holds, from its bytes: outside a
    string JSON has no backslash, and inside one each escaped backslash is a pair, so once every pair is blanked
    (kept in place, so that what was apart stays apart) what is left of `\\u0000` is an escape of a NUL, and a
    surrogate's escape is lone unless it pairs as the parser pairs them (a high one just before a low one). A
    surrogate's own bytes are one whatever is around them (the parser reads them one by one)."""
    if _RAW_SURROGATE.search(body):
        return text_problem("\ud800")
    blanked = body.replace(b"\\\\", b"__")  # each escaped backslash: what follows it is text, not an escape
    if b"\\u0000" in blanked:
        return text_problem("\x00")
    if _LONE.search(blanked):
        return text_problem("\ud800")
    return None


def _text_problem(written: str) -> str | None:
    """`text_problem`'s words for what a body holds, from the body written again by `json.dumps` (not ASCII-only),
    found in C: a NUL is written as its escape, `\\u0000`, and a backslash of the text as two, so with every pair
    of backslashes gone an escape of a NUL is one; a lone surrogate is written as itself, which UTF-8 cannot
    encode. A regex of both over every position took 0.55 s for a 1 MiB body (review)."""
    if "\\u0000" in written and "\\u0000" in written.replace("\\\\", ""):
        return text_problem("\x00")
    try:
        written.encode()
    except UnicodeEncodeError:
        return text_problem("\ud800")
    return None


def _overflowing(body: bytes) -> str:
    """The first number of `body` Python reads as Infinity, as `strict_json` names it (of the first NUMBERS_TRIED
    that may), or what it is."""
    for n, found in enumerate(_BIG.finditer(body)):
        if n == NUMBERS_TRIED:
            break
        if math.isinf(float(found.group())):
            return f"{found.group()[:40].decode()} (too large for a number: it reads as Infinity)"
    return "a number too large for a float (it reads as Infinity)"


def query_problem(query: bytes) -> tuple[str, str] | None:
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="utf-8"):
        problem = text_problem(name) or text_problem(value)
        if problem:
            return name, problem
    return None


ErrorPage = Callable[[Request, int, str], Response]  # a face's own page for a failure: request, status, message


def face_page(pages: Mapping[str, ErrorPage], path: str) -> ErrorPage | None:
    """The page of the face (the console) whose prefix `path` is under, if any."""
    return next((page for prefix, page in pages.items() if path == prefix or path.startswith(prefix + "/")), None)


class CleanInput:
    """Answer 422 for a request whose query or JSON body carries text no store can keep (see the module): in the
    error shape, or as a face's page under its prefix in `pages` (the console's). A body sent to the API (every
    route under /v1/ that takes one needs a key) is checked, and parsed by the route, only once the request is
    admitted (`_admitted`: its key, its rate, one of its org's slots): one without a key costs no reading, checking
    or parsing of what it sent (probe 19: 1 MiB bodies sent with no key held the event loop, every org's requests
    and `/healthz`, 0.35-0.85 s each)."""

    def __init__(self, app: Any, pages: Mapping[str, ErrorPage]) -> None:
        self.app, self.pages = app, pages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # MCP validates its own arguments; an import's upload is streamed to a file and read record by record
        if scope["type"] != "http" or scope["path"].startswith(("/mcp", "/v1/import-from/")):
            await self.app(scope, receive, send)
            return
        found = query_problem(scope.get("query_string") or b"")
        if found is not None:
            await self._refused(found, scope, receive, send)
            return
        # A JSON body is read by the API's routes only (the console's are forms, refused by the store's own check;
        # any other path is a 404 or 405): elsewhere it is left unread, not parsed for nobody (review 19b: 1 MiB
        # bodies sent to `/healthz`, `/ui` or `/` without a key were parsed and written again).
        if scope["method"] in {"POST", "PUT", "PATCH", "DELETE"} and scope["path"].startswith("/v1/"):
            admitted = await _admitted(scope)
            if isinstance(admitted, Response):
                await admitted(scope, receive, send)
                return
            grandbo, org = admitted
            try:
                async with grandbo.rate_limits.slots.running(org, large=large_request(scope)):
                    await self._checked(scope, receive, send)
            except RequestsOrgBusyError as error:
                await error_response(error)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _checked(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The request, once its JSON body is found to hold nothing no store can keep (`body_problem`)."""
        received: list[Message] = []
        parts: list[bytes] = []
        while True:  # read now, by BodyLimit (outside), bounded and counted: the request is admitted
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                break
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        # A large one on a thread: the event loop goes on between its steps (its C steps hold the interpreter)
        large = len(body) > LARGE_REQUEST_BYTES
        method, path = scope["method"], scope["path"]
        check = (scope["app"].state.value_bounds.of(method, path), method, path, body)
        found = await run_in_threadpool(_body_refusal, *check) if large else _body_refusal(*check)
        if isinstance(found, dict):
            await JSONResponse(found, status_code=413)(scope, receive, send)
            return
        if found is not None:
            await self._refused(found, scope, receive, send)
            return

        async def replay() -> Message:
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)

    async def _refused(self, found: tuple[str, str], scope: Scope, receive: Receive, send: Send) -> None:
        field, problem = found
        page = face_page(self.pages, scope["path"])
        refusal = _refuse(field, problem) if page is None else page(Request(scope), 422, _said(field, problem))
        await refusal(scope, receive, send)


def _body_refusal(bound: Bound, method: str, path: str, body: bytes) -> dict[str, Any] | tuple[str, str] | None:
    """A body of more values than its route takes (`bound`: its 413, before anything parses it), or what in it no
    store can keep (`body_problem`), or None."""
    return oversized(_as_utf8(body), bound, method, path) or body_problem(body)


async def _admitted(scope: Scope) -> tuple[Any, str] | Response:
    """A request sending a body to the API, admitted as its route would admit it, before its body is parsed or
    checked: its key (held, or authenticated on a thread, as `deps.authorized` does: a refusal takes the same time
    whichever org the key names) and its rate; then (the caller) one of its org's slots, held until it is answered
    (`deps.running` sees `admitted` and takes neither again). Otherwise the 401 or 429 it gets. Checked in its
    org's slot, one org's bodies cost the others what its slots allow: a 1 MiB body was parsed and checked first,
    0.35-0.85 s each with no key at all (probe 19), 5.8 s with a read key (review)."""
    grandbo = scope["app"].state.grandbo
    try:
        memory, record = await verified(grandbo, Headers(scope=scope).get("authorization"))
        grandbo.rate_limits.take(memory.org, record.id)
    except GrandboError as error:  # refused, over its rate, or the store unreachable: as the route would answer
        return error_response(error)
    scope.setdefault("state", {})["admitted"] = memory.org
    return grandbo, memory.org


def error_response(error: GrandboError) -> JSONResponse:
    """A GrandboError in the API's error shape, with its status and the header it calls for (a 401's
    WWW-Authenticate, back-pressure's Retry-After), its detail made JSON whatever it holds (an exception)."""
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    if isinstance(error, OverloadedError | ImportRunningError):  # back-pressure, a held lease: when to come back
        headers = {"Retry-After": str(error.retry_after)}
    body = json.loads(json.dumps(error.to_dict(), default=str))
    return JSONResponse(body, status_code=error.status, headers=headers)


_REMEDY = "Correct the fields named and send it again."


def _said(field: str, problem: str) -> str:
    return f"Invalid request: {field}: {problem}. {_REMEDY}"


def _refuse(field: str, problem: str) -> Response:
    return JSONResponse(
        {
            "error": {
                "type": "invalid_input",
                "message": f"Invalid request: {field}: {problem}.",
                "remedy": _REMEDY,
                "detail": {"errors": [{"field": field, "message": problem}]},
            }
        },
        status_code=422,
    )
