"""`grandbo mcp`: the SDK's stdio transport, each line screened first (`envelope.screen`). The SDK's reader turned a
line it could not read (not JSON, a batch, a lone surrogate) into an exception its session only logged, and a
request with a null id into a notification: nothing went back and the agent waited for ever. Such a line is
answered here with its JSON-RPC error, through the SDK's own writer (one writer: frames never interleave), as is
a request before the session's initialize (the SDK's answer named neither the cause nor the remedy).

The end of stdin is held back from the SDK until every request read has been answered: its session cancels the
requests still running when its input ends, so `printf '...' | grandbo mcp` lost the answer to its last call."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, cast

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCResponse, RequestId, jsonrpc_message_adapter

from grandbo.mcp.envelope import screen, uninitialized

# How long the end of stdin waits for the answers of requests still running: a tool call that never ends (or a long
# lived method but `subscriptions/listen`) no longer keeps the process alive after its input ended
ANSWERS_WAIT_S = 300.0


async def serve(server: MCPServer[Any]) -> None:
    """Run `server` over stdin and stdout until stdin ends and every request read from it is answered (what
    `MCPServer.run("stdio")` does, lines screened, none left unanswered at the end of input)."""
    unanswered = _Unanswered()
    lines = _Screened(unanswered)
    # stdin is ours to read (the SDK then leaves fd 0 as it is; no tool reads it); stdout is the SDK's, diverted
    async with stdio_server(stdin=cast(Any, lines)) as (read_stream, write_stream):
        lines.answers = write_stream
        lines.ready.set()
        lowlevel = server._lowlevel_server
        answering = cast(Any, _Answering(write_stream, unanswered))
        await lowlevel.run(read_stream, answering, lowlevel.create_initialization_options())


class _Unanswered:
    """The requests handed to the SDK and not answered yet, by id (as the SDK keys them: "7" is 7)."""

    def __init__(self) -> None:
        self._ids: Counter[RequestId] = Counter()
        self._none = anyio.Event()
        self._none.set()

    def asked(self, request_id: RequestId) -> None:
        if not self._ids:
            self._none = anyio.Event()
        self._ids[coerce_request_id(request_id)] += 1

    def settled(self, request_id: RequestId) -> None:
        """`request_id` was answered, or cancelled by the client (then the SDK sends nothing for it)."""
        key = coerce_request_id(request_id)
        if self._ids[key] > 1:
            self._ids[key] -= 1
            return
        self._ids.pop(key, None)
        if not self._ids:
            self._none.set()

    async def none(self) -> None:
        await self._none.wait()


class _Answering:
    """The SDK's write stream, telling `unanswered` of each answer once it is handed to the writer."""

    def __init__(self, stream: Any, unanswered: _Unanswered) -> None:
        self._stream = stream
        self._unanswered = unanswered

    async def send(self, item: SessionMessage, /) -> None:
        await self._stream.send(item)
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
            self._unanswered.settled(message.id)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _Answering:
        await self._stream.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        return cast(bool | None, await self._stream.__aexit__(kind, error, trace))


class _Screened:
    """The lines of stdin as the SDK's reader iterates them, less those `screen` answers (answered here), ending
    once stdin has and the requests handed on are all answered."""

    def __init__(self, unanswered: _Unanswered) -> None:
        self.ready = anyio.Event()
        self.answers: Any = None  # the SDK's write stream, once it is open
        self.initialized = False  # an initialize went through (`uninitialized` answers a request before it)
        self._unanswered = unanswered

    async def __aiter__(self) -> AsyncIterator[str]:
        async for raw in anyio.wrap_file(sys.stdin.buffer):
            line = raw.decode("utf-8", "replace")  # as the SDK decodes stdin
            if not line.strip():
                continue
            answer, message = screen(line)
            if message is not None and not self.initialized:
                answer, self.initialized = uninitialized(message)
            if answer is None and message is not None:
                self._note(message)
                yield line
                continue
            await self.ready.wait()
            await self.answers.send(SessionMessage(jsonrpc_message_adapter.validate_python(answer)))
        with anyio.move_on_after(ANSWERS_WAIT_S) as waited:
            await self._unanswered.none()
        if waited.cancelled_caught:
            print(f"grandbo mcp: input ended; requests unanswered after {ANSWERS_WAIT_S:.0f} s were cancelled",
                  file=sys.stderr)  # fmt: skip

    def _note(self, message: dict[str, Any]) -> None:
        """Count a request the SDK is to answer; a cancelled one it will not (MCP: no answer after a cancel). A listen
        stream is not counted: only the client's leaving ends it, so the end of stdin is not held for it. `message`
        is one `screen` handed on, so its "jsonrpc", "method", "id" and "params" are as the SDK's types take them."""
        method = message.get("method")
        if method is None:
            return  # a response
        if "id" in message:  # a request: with an id, the SDK's parser takes any method for one
            if method != "subscriptions/listen":
                self._unanswered.asked(message["id"])
        elif method == "notifications/cancelled":
            cancelled = cancelled_request_id_from_params(message.get("params"))
            if cancelled is not None:
                self._unanswered.settled(cancelled)
