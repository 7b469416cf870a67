"""Text a store cannot hold, refused at the door: a NUL character (Postgres text and jsonb cannot keep it), a lone
surrogate (not UTF-8) and NaN or Infinity (not JSON), in any query parameter or anywhere in a JSON body, are a 422
naming the field, on every route and both backends, before a route or a store sees them. Postgres answered them
with a 500 (a psycopg DataError) where SQLite stored them, so an export from one could not be loaded into the other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from grandbo.values import NotJsonNumber, strict_json, text_problem

# Only a body holding one of these can hold what is refused (a raw NUL or surrogate byte is not JSON at all), so
# most bodies are never parsed twice.
# A number with a 3-digit exponent, or of 210 digits (with an exponent up to 99), may overflow a float (1e400 reads
# as Infinity); one of over 4,300 digits is more than Python reads.
_SUSPECT = re.compile(rb"\\u0000|\\u[dD][89a-fA-F]|NaN|Infinity|[eE][+-]?\d{3}|\d{210}")


def _field_problem(value: Any, where: str) -> tuple[str, str] | None:
    """The first (field, problem) in a parsed JSON value, or None; a dict's keys are checked as text too."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                problem = text_problem(key, max_depth=1 << 30)
                if problem:
                    return at or "body", f"a key {problem}"
                stack.append((child, f"{at}.{key}" if at else str(key)))
        elif isinstance(item, list):
            stack.extend((child, f"{at}[{n}]") for n, child in enumerate(item))
        else:
            problem = text_problem(item, max_depth=1 << 30)
            if problem:
                return at or "body", problem
    return None


def _as_utf8(body: bytes) -> bytes:
    """A JSON body in UTF-8, which `_SUSPECT` reads: JSON may come in UTF-16 or UTF-32 too, and the routes read
    those (json.loads detects them), where "NaN" is not the bytes b"NaN". As given when it does not decode."""
    encoding = json.detect_encoding(body)
    if encoding == "utf-8":
        return body
    try:
        return body.decode(encoding).encode("utf-8", "surrogatepass")
    except UnicodeError:
        return body


def body_problem(body: bytes) -> tuple[str, str] | None:
    """What in a JSON body no store can keep, as (field, problem), or None (also for a body that is not JSON:
    the route says so in its own words)."""
    body = _as_utf8(body)
    if not _SUSPECT.search(body):
        return None
    try:
        parsed = strict_json(body)
    except NotJsonNumber as error:
        return "body", f"contains {error.args[0]}; send a finite number or a string"
    except (ValueError, RecursionError):
        return None
    return _field_problem(parsed, "")


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
    error shape, or as a face's page under its prefix in `pages` (the console's)."""

    def __init__(self, app: Any, pages: Mapping[str, ErrorPage]) -> None:
        self.app, self.pages = app, pages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # MCP validates its own arguments; an import's upload is streamed to a file and read record by record
        if scope["type"] != "http" or scope["path"].startswith(("/mcp", "/v1/import-from/")):
            await self.app(scope, receive, send)
            return
        found = query_problem(scope.get("query_string") or b"")
        received: list[Message] = []
        if found is None and scope["method"] in {"POST", "PUT", "PATCH", "DELETE"}:
            body = b""
            while True:  # BodyLimit, outside, has bounded it already
                message = await receive()
                received.append(message)
                if message["type"] != "http.request":
                    break
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            found = body_problem(body)
        if found is not None:
            field, problem = found
            page = face_page(self.pages, scope["path"])
            refusal = _refuse(field, problem) if page is None else page(Request(scope), 422, _said(field, problem))
            await refusal(scope, receive, send)
            return

        async def replay() -> Message:
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)


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
