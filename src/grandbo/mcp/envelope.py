"""JSON-RPC messages the MCP SDK leaves unanswered, answered: over stdio a line that is not JSON, a batch or a lone
surrogate got nothing at all, and on either transport a request whose `id` is null, a fraction or an object was
read as a notification (HTTP 202, empty), its call never run; the client waited for ever. Each now gets a JSON-RPC
error saying what to send instead (probe 20b). Both transports ask `refusal` before the SDK reads the message."""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grandbo.errors import InvalidInputError
from grandbo.ratelimit import LARGE_REQUEST_BYTES

PARSE_ERROR, INVALID_REQUEST = -32700, -32600  # JSON-RPC 2.0's codes

_SHAPE = "one JSON-RPC message: a JSON object with jsonrpc, id (a string or an integer), method and params"


def refusal(raw: bytes | str) -> dict[str, Any] | None:
    """The JSON-RPC error answering `raw`, one message as received, when the SDK would answer it with nothing;
    None for a message to hand on. Its `id` is the message's when that is one, else null (JSON-RPC 2.0, 5)."""
    try:
        message = json.loads(raw)
    except RecursionError:
        return _error(None, PARSE_ERROR, f"Parse error: the message is nested too deeply. Send {_SHAPE}.")
    except ValueError as error:  # not JSON, or bytes that are not UTF-8
        return _error(None, PARSE_ERROR, f"Parse error: the message is not JSON ({str(error)[:120]}). Send {_SHAPE}.")
    if isinstance(message, list):
        return _error(None, INVALID_REQUEST, "Invalid Request: a JSON-RPC batch (an array of messages) is not taken "
                      "(MCP has none since 2025-06-18). Send each message on its own.")  # fmt: skip
    if not isinstance(message, dict):
        return _error(None, INVALID_REQUEST, f"Invalid Request: {json.dumps(message)[:40]} is no message. "
                      f"Send {_SHAPE}.")  # fmt: skip
    given = message.get("id")
    known = given if _is_id(given) else None
    if "method" in message and "id" in message and known is None:  # the SDK reads it as a notification
        return _error(None, INVALID_REQUEST, f"Invalid Request: the id {json.dumps(given)[:40]} is not a string or "
                      "an integer, so no answer could name it (MCP allows no null id). Send the request again with a "
                      "string or integer id; leave the id out only for a notification.")  # fmt: skip
    try:
        json.dumps(message, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # the SDK's parser refuses it; Python's reads it, and so its id
        return _error(known, PARSE_ERROR, "Parse error: the message holds a lone surrogate (an unpaired "
                      "\\ud800-\\udfff escape), which is not text. Send the text as UTF-8, or escape each "
                      "character outside the BMP as its surrogate pair.")  # fmt: skip
    return None


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _error(message_id: str | int | None, code: int, said: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": said}}


async def screened(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """The HTTP request handed to `app` (the SDK's) unless its body is a batch or has a `refusal`: a batch gets a
    400 in the API's error shape (the SDK answered pydantic's report of four validation errors), a refusal a 400
    with the JSON-RPC error. Only a POST carries a message, read whole here (`api.bodies.BodyLimit` bounds it)."""
    if scope.get("method") != "POST":
        await app(scope, receive, send)
        return
    received: list[Message] = []
    while not received or (received[-1].get("type") == "http.request" and received[-1].get("more_body", False)):
        received.append(await receive())
    body = b"".join(message.get("body", b"") for message in received if message.get("type") == "http.request")
    if body.lstrip()[:1] == b"[":
        refused = InvalidInputError("A JSON-RPC batch (an array of messages) is not taken here.").to_dict()
        refused["error"]["remedy"] = "Send each JSON-RPC message in a POST of its own."
        await _send(send, refused)
        return
    # A large body is read on a thread, as `api.clean` reads one: the event loop goes on meanwhile
    answer = await run_in_threadpool(refusal, body) if len(body) > LARGE_REQUEST_BYTES else refusal(body)
    if answer is not None:
        await _send(send, answer)
        return

    async def again() -> Message:
        return received.pop(0) if received else await receive()

    await app(scope, again, send)


async def _send(send: Send, body: dict[str, Any]) -> None:
    await send({"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})
