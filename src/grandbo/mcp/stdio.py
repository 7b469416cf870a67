"""`grandbo mcp`: the SDK's stdio transport, each line screened first (`envelope.refusal`). The SDK's reader turned a
line it could not read (not JSON, a batch, a lone surrogate) into an exception its session only logged, and a
request with a null id into a notification: nothing went back and the agent waited for ever. Such a line is
answered here with its JSON-RPC error, through the SDK's own writer (one writer: frames never interleave), as is
a request before the session's initialize (the SDK's answer named neither the cause nor the remedy)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any, cast

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from grandbo.mcp.envelope import refusal, uninitialized


async def serve(server: MCPServer[Any]) -> None:
    """Run `server` over stdin and stdout until stdin ends (what `MCPServer.run("stdio")` does, lines screened)."""
    lines = _Screened()
    # stdin is ours to read (the SDK then leaves fd 0 as it is; no tool reads it); stdout is the SDK's, diverted
    async with stdio_server(stdin=cast(Any, lines)) as (read_stream, write_stream):
        lines.answers = write_stream
        lines.ready.set()
        lowlevel = server._lowlevel_server
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


class _Screened:
    """The lines of stdin as the SDK's reader iterates them, less those `refusal` answers (answered here)."""

    def __init__(self) -> None:
        self.ready = anyio.Event()
        self.answers: Any = None  # the SDK's write stream, once it is open
        self.initialized = False  # an initialize went through (`uninitialized` answers a request before it)

    async def __aiter__(self) -> AsyncIterator[str]:
        async for raw in anyio.wrap_file(sys.stdin.buffer):
            line = raw.decode("utf-8", "replace")  # as the SDK decodes stdin
            if not line.strip():
                continue
            answer = refusal(line)
            if answer is None and not self.initialized:
                answer, self.initialized = uninitialized(line)
            if answer is None:
                yield line
                continue
            await self.ready.wait()
            await self.answers.send(SessionMessage(jsonrpc_message_adapter.validate_python(answer)))
