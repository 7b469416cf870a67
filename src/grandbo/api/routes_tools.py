"""`POST /v1/tools/{name}`: an agent tool called over REST, for agents that call functions but do not speak MCP
(the schemas: `grandbo tools --format openai|anthropic [--strict]`). The call goes through the MCP server's own
tool: the same arguments, checks and answer; the key needs the scope of the tool's REST equivalent."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Request

from grandbo.api.deps import running
from grandbo.errors import NotFoundError
from grandbo.mcp.server import call_over_rest, rest_server, tool_names, tool_scope

router = APIRouter(prefix="/v1")
_SERVER = rest_server()
_TOOLS = tool_names(_SERVER)
_ERROR = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


@router.post(
    "/tools/{name}",
    tags=["tools"],
    operation_id="call_tool",
    responses={
        200: {"description": "The tool's answer: its structured content over MCP (its output schema)."},
        401: {"description": "Missing, unknown or revoked API key.", **_ERROR},
        403: {
            "description": "The key's scope is below the tool's: read for reading tools, write for the rest.",
            **_ERROR,
        },
        404: {"description": "No such tool, or the tool found no such thing in the key's organization.", **_ERROR},
    },
    openapi_extra={"security": [{"bearer": ["read"]}]},
)
async def call_tool(
    request: Request,
    name: Annotated[
        str,
        Path(min_length=1, max_length=64, description="The tool.", json_schema_extra={"enum": _TOOLS}),
    ],
    arguments: Annotated[
        dict[str, Any], Body(description="The tool's arguments, as its input schema names them.")
    ] = {},  # noqa: B006
) -> Any:
    """Run one agent tool (query_org_memory, triage_alert, open_incident, close_incident...) with the arguments
    its schema takes; the answer is what the tool answers over MCP. Null for an optional argument means left
    out (OpenAI's strict mode sends every argument)."""
    scope = tool_scope(_SERVER, name)
    if scope is None:
        raise NotFoundError(
            f"No tool {name!r}: use one of {', '.join(_TOOLS)} (`grandbo tools` prints their schemas).",
            detail={"tool": name},
        )
    async with running(request, scope) as memory:  # in one of the org's slots, as every route (probe 17's calls)
        return await call_over_rest(_SERVER, memory, name, arguments)
