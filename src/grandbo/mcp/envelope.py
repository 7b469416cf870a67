"""JSON-RPC messages the MCP SDK leaves unanswered, answered: over stdio a line that is not JSON, a batch or a lone
surrogate got nothing at all, and on either transport a request whose `id` is null, a fraction or an object was
read as a notification (HTTP 202, empty), its call never run; the client waited for ever. Each now gets a JSON-RPC
error saying what to send instead (probe 20b). A request whose params its method does not take got -32602
"Invalid request parameters" with `data: ""`, and an MCP-Protocol-Version header of no version this server speaks a
message about `params._meta` (the SDK took it for a 2026 request): both now say what is wrong and what to send.
Both transports ask `refusal` before the SDK reads the message. A message of more values than any request takes
(`MAX_VALUES`), or nested deeper (`MAX_DEPTH`), is refused there too, on a worker thread for a large body: the SDK
parses and checks a message on the event loop every organization's requests share, and one 1 MiB list or object
held it 200-480 ms, once for each message a key sent (probe 27). An id over `MAX_ID_CHARS` is refused too (the
answer repeated a 1 MB id whole), and over HTTP a body not sent as application/json gets a JSON-RPC error saying
so (the SDK's was "Invalid Content-Type header", in plain text)."""

from __future__ import annotations

import codecs
import json
from typing import Any

from mcp_types import INVALID_PARAMS, PROTOCOL_VERSION_META_KEY, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.methods import CLIENT_REQUESTS, validate_client_request
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grandbo.errors import InvalidInputError
from grandbo.jsontext import values_at_least
from grandbo.ratelimit import LARGE_REQUEST_BYTES

PARSE_ERROR, INVALID_REQUEST = -32700, -32600  # JSON-RPC 2.0's codes
# A tool call's arguments hold a few hundred values at most (an incident's 100 symptoms, 100 alerts, 50 services),
# an initialize a few dozen, and none nests deeper than a handful: these bounds are far past what any client sends
MAX_VALUES, MAX_DEPTH = 10_000, 64
# An id names its request in the answer, whole: a client's counter or UUID is a few dozen characters at most
MAX_ID_CHARS = 256

_SHAPE = "one JSON-RPC message: a JSON object with jsonrpc, id (a string or an integer), method and params"
SUPPORTED_VERSIONS = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)  # the SDK's, both eras
_SHOULD_BE = {"missing": "is required", "dict_type": "must be an object", "model_type": "must be an object",
              "string_type": "must be a string", "int_type": "must be an integer", "float_type": "must be a number",
              "list_type": "must be an array", "bool_type": "must be true or false"}  # fmt: skip


def refusal(raw: bytes | str, version: str | None = None) -> dict[str, Any] | None:
    """The JSON-RPC error answering `raw`, one message as received, when the SDK would answer it with nothing or
    with no word of what to send; None for a message to hand on. `version`: its MCP-Protocol-Version header (HTTP).
    Its `id` is the message's when that is one, else null (JSON-RPC 2.0, 5)."""
    return screen(raw, version)[0]


def screen(raw: bytes | str, version: str | None = None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """`raw`'s `refusal` and None, or None and the message as parsed here (a JSON object), for a caller that reads
    the message handed on (stdio's) without parsing it again."""
    if values_at_least(raw) > MAX_VALUES:  # refused unparsed: parsing holds the GIL, so the event loop, throughout
        return _too_large(None, f"holds more than {MAX_VALUES:,} values"), None
    if raw[:3] == codecs.BOM_UTF8 or raw[:1] == "\ufeff":  # Python reads past it, the SDK's parser does not
        return _error(None, PARSE_ERROR, f"Parse error: the message starts with a byte order mark (EF BB BF), which "
                      f"JSON-RPC over HTTP or stdio does not take. Send {_SHAPE}, without one."), None  # fmt: skip
    try:
        message = json.loads(raw)
    except RecursionError:
        return _error(None, PARSE_ERROR, f"Parse error: the message is nested too deeply. Send {_SHAPE}."), None
    except ValueError as error:  # not JSON, or bytes that are not UTF-8
        said = f"Parse error: the message is not JSON ({str(error)[:120]}). Send {_SHAPE}."
        return _error(None, PARSE_ERROR, said), None
    answer = _refusal(message, version)
    return (answer, None) if answer is not None else (None, message)


def _refusal(message: Any, version: str | None) -> dict[str, Any] | None:
    """`refusal` of a message parsed."""
    if isinstance(message, list):
        return _error(None, INVALID_REQUEST, "Invalid Request: a JSON-RPC batch (an array of messages) is not taken "
                      "(MCP has none since 2025-06-18). Send each message on its own.")  # fmt: skip
    if not isinstance(message, dict):
        return _error(None, INVALID_REQUEST, f"Invalid Request: {json.dumps(message)[:40]} is no message. "
                      f"Send {_SHAPE}.")  # fmt: skip
    given = message.get("id")
    known = given if _is_id(given) else None
    if known is not None and (length := len(known if isinstance(known, str) else str(known))) > MAX_ID_CHARS:
        return _error(None, INVALID_REQUEST, f"Invalid Request: the id is {length:,} characters long, more than "
                      f"the {MAX_ID_CHARS} this server takes (an answer names its request by its id, in full). Send "
                      "the request again with a shorter string or integer id: a counter, or a UUID.")  # fmt: skip
    if (size := _oversized(message)) is not None:
        return _too_large(known, size)
    if (wrong := _not_a_message(message)) is not None:
        return _error(known, INVALID_REQUEST, f"Invalid Request: {wrong}. Send {_SHAPE}.")
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
    if version is not None and version not in SUPPORTED_VERSIONS:
        return _unsupported(known, version)
    method, params = message.get("method"), message.get("params")
    if known is not None and isinstance(method, str) and _handshake_era(message, version):  # 2026's: the SDK's
        said = _invalid_params(known, method, params, version or LATEST_HANDSHAKE_VERSION)
        if said is not None:
            return said
    if "method" in message and not isinstance(params, dict | None):  # the SDK's reader dropped it: no answer came
        return _error(known, INVALID_REQUEST, f"Invalid Request: params must be an object (MCP names each parameter), "
                      f"not {json.dumps(params)[:40]}. Send {_SHAPE}.")  # fmt: skip
    return None


def _not_a_message(message: dict[str, Any]) -> str | None:
    """What keeps an object from being a JSON-RPC 2.0 message, said, or None: the SDK answered each such object with
    pydantic's report of 4-7 validation errors of a union of four types, links to pydantic's site among them."""
    if (version := message.get("jsonrpc")) != "2.0":
        return (
            f'"jsonrpc" must be "2.0", not {json.dumps(version)[:40]}'
            if "jsonrpc" in message
            else '"jsonrpc" is missing'
        )
    if "method" in message and not isinstance(message["method"], str):
        return f'"method" must be a string naming the method (tools/call...), not {json.dumps(message["method"])[:40]}'
    if "method" not in message and "result" not in message and "error" not in message:
        return 'it has no "method" (a request or a notification), nor a "result" or an "error" (a response)'
    return None


def _too_large(message_id: str | int | None, size: str) -> dict[str, Any]:
    return _error(message_id, INVALID_REQUEST, f"Invalid Request: the message {size}, more than any request of this "
                  f"server takes (at most {MAX_VALUES:,} values, nested {MAX_DEPTH} deep). Send each argument as its "
                  "tool's input schema has it (tools/list).")  # fmt: skip


def _oversized(message: dict[str, Any]) -> str | None:
    """What makes `message` too large a structure to hand on (its count of values or its depth, said), or None.
    Each member of an object counts as its name and its value."""
    count, stack = 0, [(message, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nests values more than {MAX_DEPTH} deep"
        members = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        count += 1 + (len(value) if isinstance(value, dict) else 0)
        if count > MAX_VALUES:
            return f"holds more than {MAX_VALUES:,} values"
        stack.extend((member, depth + 1) for member in members)
    return None


def _handshake_era(message: dict[str, Any], version: str | None) -> bool:
    """Whether `message` is of a session an initialize began (2025-11-25 and before), not a 2026-07-28 request,
    which names its version in `params._meta` (and over HTTP in the header) and which the SDK checks itself."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return version not in MODERN_PROTOCOL_VERSIONS and not (
        isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta
    )


def uninitialized(message: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """Before a stdio session's initialize, of a message `screen` let through (as it parsed it): its answer (None:
    hand it on), and whether it is the initialize. The SDK refused a request there with -32602 "Invalid request
    parameters" and `data: ""`, which named neither the cause nor the remedy."""
    method = message.get("method")
    if method in ("initialize", "ping"):  # the SDK answers a ping before the initialize
        return None, method == "initialize"
    if "id" not in message or not isinstance(method, str) or (method, LATEST_HANDSHAKE_VERSION) not in CLIENT_REQUESTS:
        return None, False  # a notification, a response, or a method the SDK answers -32601
    if not _handshake_era(message, None):
        return None, False  # a 2026-07-28 request: no initialize comes
    said = (f"The session is not initialized: {method} comes after initialize. Send initialize first, then "
            "notifications/initialized, as an MCP client does on connecting.")  # fmt: skip
    return _error(message["id"], INVALID_PARAMS, said), False


def _unsupported(message_id: str | int | None, version: str) -> dict[str, Any]:
    """MCP 2026-07-28's UnsupportedProtocolVersionError, which 2025-11-25's 400 for this header may carry: the SDK
    answered a message about `params._meta`, the envelope of a 2026 request, whatever version was named."""
    said = (f"Unsupported protocol version {version[:40]!r} (the MCP-Protocol-Version header): this server speaks "
            f"{', '.join(HANDSHAKE_PROTOCOL_VERSIONS)} after an initialize handshake, and "
            f"{', '.join(MODERN_PROTOCOL_VERSIONS)} with params._meta on each request. Send the version initialize "
            "agreed on (initialize itself needs no header), or one of those.")  # fmt: skip
    answer = _error(message_id, UNSUPPORTED_PROTOCOL_VERSION, said)
    answer["error"]["data"] = {"supported": list(SUPPORTED_VERSIONS), "requested": version[:100]}
    return answer


def _invalid_params(message_id: str | int, method: str, params: Any, version: str) -> dict[str, Any] | None:
    """-32602 naming each param `method` does not take as sent (the SDK said "Invalid request parameters" with
    `data: ""`); None when they are fine, or no such method is in `version` (the SDK answers -32601)."""
    try:
        validate_client_request(method, version, params)
    except KeyError:
        return None
    except ValidationError as error:
        problems = list(dict.fromkeys(_problem(detail) for detail in error.errors()))[:3]
        remedy = (
            "Send params.name, a tool's name, and params.arguments, an object of its arguments (tools/list gives both)"
            if method == "tools/call"
            else f"Send the params as MCP {version}'s schema of {method[:60]} has them"
        )
        return _error(message_id, INVALID_PARAMS, f"Invalid params for {method[:60]}: {'; '.join(problems)}. {remedy}.")
    return None


def _problem(detail: ErrorDetails) -> str:
    where = ".".join(str(part) for part in detail["loc"])[:80]
    return f"{where} {_SHOULD_BE.get(detail['type'], detail['msg'][:80].lower())}"


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _error(message_id: str | int | None, code: int, said: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": said}}


async def screened(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """The HTTP request handed to `app` (the SDK's) unless its body is a batch or has a `refusal`, or is not sent as
    JSON: a batch gets a 400 in the API's error shape (the SDK answered pydantic's report of four validation errors),
    a refusal a 400 with the JSON-RPC error, another Content-Type a 415 with one. Only a POST carries a message,
    read whole here (`api.bodies.BodyLimit` bounds it)."""
    if scope.get("method") != "POST":
        await app(scope, receive, send)
        return
    kind = _header(scope, b"content-type") or ""
    if not kind.lower().startswith("application/json"):  # the SDK's check; it answered 400 in plain text, no JSON-RPC
        sent = f"as {json.dumps(kind[:60])}" if kind else "without a Content-Type"
        await _send(send, _error(None, INVALID_REQUEST, f"Invalid Request: the message was sent {sent}; this "
                                 "endpoint reads JSON only. Send it with the header Content-Type: application/json."),
                    415)  # fmt: skip
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
    version = _header(scope, b"mcp-protocol-version")
    # A large body is read on a thread, as `api.clean` reads one: the event loop goes on meanwhile
    large = len(body) > LARGE_REQUEST_BYTES
    answer = await run_in_threadpool(refusal, body, version) if large else refusal(body, version)
    if answer is not None:
        # Params of a well-formed request: 200, as the SDK answers a JSON-RPC error of a request it took (a client
        # hands it to the caller as that request's error); a message it cannot take, or a version, is a 400.
        await _send(send, answer, 200 if answer["error"]["code"] == INVALID_PARAMS else 400)
        return

    async def again() -> Message:
        return received.pop(0) if received else await receive()

    await app(scope, again, send)


def _header(scope: Scope, name: bytes) -> str | None:
    """The first header `name` of the request, as Starlette's `Headers.get` reads it (what the SDK reads)."""
    return next((value.decode("latin-1") for each, value in scope.get("headers") or [] if each == name), None)


async def _send(send: Send, body: dict[str, Any], status: int = 400) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})
