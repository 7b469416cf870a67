"""The MCP tools as JSON function schemas, for agents that call tools without MCP: one source of truth, the
MCP server's own tool list."""

from __future__ import annotations

import asyncio
from typing import Any

from grandbo.errors import InvalidInputError
from grandbo.mcp.server import build


def _unbound(*_: Any) -> Any:
    raise AssertionError("schemas are listed, never called")


def function_schemas(format: str) -> list[dict[str, Any]]:
    """`openai` (Chat Completions `tools`) or `anthropic` (Messages `tools`) definitions of the six tools."""
    if format not in ("openai", "anthropic"):
        raise InvalidInputError(f"Unknown format {format!r}: use openai or anthropic.", detail={"format": format})
    listed = asyncio.run(build(_unbound).list_tools())
    if format == "anthropic":
        return [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in listed]
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
        for t in listed
    ]
