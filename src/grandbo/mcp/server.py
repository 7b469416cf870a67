"""The MCP server (the official `mcp` SDK): thirteen tools over the org-bound handle, each answering its response
model (the output schema) as structured content and as text.

Over streamable HTTP (`/mcp` under `grandbo serve`) every request needs a Bearer key; a request without a
valid one is refused before it reaches the MCP session, and each tool call acts for the organization of the
key on that very request. Over stdio (`grandbo mcp`) the process acts for one organization, from
`GRANDBO_API_KEY` or `--org`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, Icon, InputRequiredResult, TextContent, ToolAnnotations
from mcp_types import Tool as MCPTool
from pydantic import BaseModel, BeforeValidator, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from grandbo import __version__
from grandbo.errors import (
    ForbiddenError,
    GrandboError,
    InvalidInputError,
    NotAuthorizedError,
    OrgDroppedError,
    RateLimitedError,
    RequestsOrgBusyError,
)
from grandbo.mcp import tools
from grandbo.mcp.answers import (
    ContextAnswer,
    Detail,
    EditRecorded,
    FindingRecorded,
    OutcomeReported,
    Recalled,
    recalled_text,
)
from grandbo.mcp.arguments import checked, unknown_tool
from grandbo.mcp.envelope import screened
from grandbo.mcp.incident_tools import register_incident_tools
from grandbo.mcp.parameters import (
    CONTENT_TYPE,
    DETAIL,
    INCIDENT_OR_ALERT,
    OUTCOME,
    SEVERITY,
    STATUS,
    TOPIC,
    TRIAGE_ALERT_ID,
    TRIAGE_SUMMARY,
    TTM,
)
from grandbo.memory import OrgMemory
from grandbo.query_ahead import embedded_first
from grandbo.ratelimit import large_request
from grandbo.retrieval.recall import MAX_K
from grandbo.retrieval.text import MAX_TOPIC_CHARS
from grandbo.service import Grandbo
from grandbo.tiers.context import DEFAULT_BUDGET, MAX_BUDGET
from grandbo.tiers.effectiveness import ReportedOutcome
from grandbo.tiers.incident_model import FindingWord
from grandbo.tiers.keys import Scope as KeyScope
from grandbo.tiers.keys import bearer_key
from grandbo.tiers.learning_model import MAX_EDIT_CHARS
from grandbo.triage.plan import TriagePlan
from grandbo.words import folded_word

Resolve = Callable[[Context, KeyScope], OrgMemory]
INSTRUCTIONS = (
    "Grandbo is this organization's institutional memory of incidents: call query_org_memory with a sentence "
    "describing what you have found so far before proposing a fix, cite the ids it returns (get_memory and "
    "get_runbook read them whole), open an incident (open_incident), record findings as you corroborate them, "
    "and close it with the runbook used, whether it worked and the time to mitigate (close_incident)."
)


class ToolServer(MCPServer[Any]):
    """The SDK's server, whose refused arguments (of every tool, here once) read as one sentence naming the
    argument and what to send (`mcp/arguments.py`), not pydantic's report; an argument no tool takes is
    refused so too (the SDK crashed on it); a null for an argument that takes none means "left out". They are
    checked on a worker thread (`arguments.checked`), not on the event loop.
    It keeps what it needs of its tools itself, through the SDK's public methods: the key scope each needs (from
    its annotations, as registered), its arguments' check, and the tools whose schema says one of two arguments is
    required."""

    _schemas: dict[str, dict[str, Any]] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The SDK sets the root logger up with a Rich handler: each exception a request raised was drawn as a boxed
        # traceback on the event loop, 1-6 s that held every org (probe 20b: `prompts/get`, a read key). Undone.
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        super().__init__(*args, **kwargs)
        root.handlers[:] = handlers
        root.setLevel(level)
        self.scopes: dict[str, KeyScope] = {}  # every tool's name, in the order registered: the scope it needs
        self.either: dict[str, tuple[str, ...]] = {}  # a tool: the arguments one of which it requires
        self.checks: dict[str, FuncMetadata] = {}  # a tool: its arguments' check, the SDK's own

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
    ) -> None:
        super().add_tool(fn, name, title, description, annotations, icons, meta, structured_output)
        read_only, named = annotations is not None and annotations.read_only_hint, name or fn.__name__
        self.scopes[named] = KeyScope.READ if read_only else KeyScope.WRITE
        self.checks[named] = Tool.from_function(fn, name=named, structured_output=structured_output).fn_metadata

    async def get_prompt(self, name: str, arguments: Any = None, context: Any = None) -> Any:
        """None is offered: -32602 in one sentence (the SDK raised, and logged, a ValueError for every name)."""
        raise MCPError(INVALID_PARAMS, f"No prompt {name[:80]!r}: none is offered; the tools are in tools/list.")

    async def list_tools(self) -> list[MCPTool]:
        """The SDK's list, where a tool requiring one of two arguments says so (`anyOf` of `required`); the tool
        itself refuses a call with neither, naming both."""
        listed = await super().list_tools()
        for tool in listed:
            if tool.name in self.either:
                tool.input_schema = {**tool.input_schema, "anyOf": [{"required": [f]} for f in self.either[tool.name]]}
        return listed

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if self._schemas is None:  # every tool is registered before the first call
            self._schemas = {tool.name: tool.input_schema for tool in await self.list_tools()}
        schema = self._schemas.get(name)
        if schema is None:
            raise ToolError(unknown_tool(name))
        arguments = await anyio.to_thread.run_sync(checked, name, schema, self.checks[name], arguments)
        return await super().call_tool(name, arguments, context)


def tool_error(error: GrandboError) -> str:
    """What an agent reads of a refusal: the message (which says what to do for this case), the error's type and
    the remedy of its kind, as REST's error body carries them."""
    return f"{error.message} [{error.code}] Remedy: {error.remedy}"


def tool_names(server: ToolServer) -> list[str]:
    """The server's tools by name, in the order they were registered."""
    return list(server.scopes)


def tool_scope(server: ToolServer, name: str) -> KeyScope | None:
    """The key scope a tool needs, as its annotations declare it: read for a read-only tool, write for one that
    writes; None when no tool has the name."""
    return server.scopes.get(name)


def build(resolve: Resolve, *, verbose: bool = False, grandbo: Grandbo | None = None) -> ToolServer:
    """The thirteen tools, each acting through the handle `resolve` gives for the calling context. The SDK logs
    (a line on stderr for every refused tool call) only at WARNING and above unless `verbose`. With `grandbo` (a
    server's), a tool that recalls waits for its query's embedding on the event loop (`grandbo.query_ahead`)."""
    server = ToolServer(
        "grandbo", instructions=INSTRUCTIONS, version=__version__, log_level="INFO" if verbose else "WARNING"
    )

    def run(ctx: Context, name: str, call: Callable[[OrgMemory], BaseModel]) -> CallToolResult:
        """The tool's answer: its response model as structured content (the output schema) and, as text, the
        same as compact JSON, or the compact recall's lines."""
        scope = tool_scope(server, name)
        assert scope is not None  # `run` serves only the tools registered here
        try:
            answer = call(resolve(ctx, scope))
        except GrandboError as error:  # the agent sees the message with its remedy, never a trace
            raise ToolError(tool_error(error)) from error
        if isinstance(answer, Recalled) and answer.detail == "compact":  # lines to read; only what it holds
            text, structured = recalled_text(answer), answer.model_dump(mode="json", exclude_none=True)
        else:
            text, structured = answer.model_dump_json(), answer.model_dump(mode="json")
        return CallToolResult(content=[TextContent(text=text)], structured_content=structured)

    async def recalling(
        ctx: Context, name: str, topic: str | None, call: Callable[[OrgMemory], BaseModel]
    ) -> CallToolResult:  # `run` on a worker thread, the query of its recall of `topic` (None: none) embedded first
        return await embedded_first(grandbo, topic, lambda _: run(ctx, name, call))

    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
    additive = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)

    @server.tool(description=tools.QUERY_DESCRIPTION, annotations=read_only)
    async def query_org_memory(
        topic: Annotated[
            str,
            Field(description="What you have found so far, in a sentence.", min_length=1, max_length=MAX_TOPIC_CHARS),
        ],
        ctx: Context,
        # strict, as REST's: `true` or "5" is no count
        k: Annotated[int, Field(description=f"How many memories (1-{MAX_K}).", ge=1, le=MAX_K, strict=True)] = 5,
        detail: Annotated[Detail, Field(description=DETAIL)] = "compact",
    ) -> Annotated[CallToolResult, Recalled]:
        return await recalling(ctx, "query_org_memory", topic, lambda m: tools.query_org_memory(m, topic, k, detail))

    @server.tool(description=tools.FINDING_DESCRIPTION, annotations=additive)
    def record_finding(
        incident_id: Annotated[
            str, Field(description="The open incident's id (open_incident gives it).", min_length=1, max_length=128)
        ],
        summary: Annotated[str, Field(description="The finding in a sentence.", min_length=1, max_length=500)],
        ctx: Context,
        status: Annotated[FindingWord, BeforeValidator(folded_word), Field(description=STATUS)] = "hypothesis",
        mechanism: Annotated[str, Field(description="How it fails: the mechanism.", max_length=2000)] = "",
        component: Annotated[str, Field(description="The part that failed.", max_length=500)] = "",
        symptom: Annotated[str, Field(description="What was seen.", max_length=2000)] = "",
        root_cause: Annotated[str, Field(description="Why it happened.", max_length=4000)] = "",
        remediation: Annotated[str, Field(description="What fixes it.", max_length=4000)] = "",
        runbook_id: Annotated[str | None, Field(description="The runbook that fixes it.", max_length=128)] = None,
    ) -> Annotated[CallToolResult, FindingRecorded]:
        return run(ctx, "record_finding", lambda memory: tools.record_finding(
            memory, incident_id, summary, status, mechanism, component, symptom, root_cause, remediation, runbook_id,
        ))  # fmt: skip

    @server.tool(description=tools.OUTCOME_DESCRIPTION, annotations=additive)
    def report_outcome(
        runbook_id: Annotated[str, Field(description="The runbook's id.", min_length=1, max_length=128)],
        outcome: Annotated[ReportedOutcome, BeforeValidator(folded_word), Field(description=OUTCOME)],
        ctx: Context,
        incident_id: Annotated[str | None, Field(description=INCIDENT_OR_ALERT, max_length=128)] = None,
        service: Annotated[str | None, Field(description="The service it ran on.", max_length=128)] = None,
        time_to_mitigate_s: Annotated[float | None, Field(description=TTM, ge=0, le=10**8)] = None,
        comment: Annotated[str, Field(description="Anything worth knowing next time.", max_length=4000)] = "",
    ) -> Annotated[CallToolResult, OutcomeReported]:
        return run(ctx, "report_outcome", lambda memory: tools.report_outcome(
            memory, runbook_id, outcome, incident_id, service, time_to_mitigate_s, comment
        ))  # fmt: skip

    @server.tool(description=tools.CONTEXT_DESCRIPTION, annotations=read_only)
    async def get_context_block(
        ctx: Context,
        content_type: Annotated[str | None, Field(description=CONTENT_TYPE, max_length=100)] = None,
        topic: Annotated[str | None, Field(description=TOPIC, max_length=MAX_TOPIC_CHARS)] = None,
        budget: Annotated[int, Field(description=tools.BUDGET_DESCRIPTION, ge=1, le=MAX_BUDGET)] = DEFAULT_BUDGET,
    ) -> Annotated[CallToolResult, ContextAnswer]:
        return await recalling(ctx, "get_context_block", topic,
                               lambda m: tools.get_context_block(m, content_type, topic, budget))  # fmt: skip

    @server.tool(description=tools.TRIAGE_DESCRIPTION, annotations=read_only)
    def triage_alert(
        ctx: Context,
        summary: Annotated[str | None, Field(description=TRIAGE_SUMMARY, max_length=2000)] = None,
        service: Annotated[str | None, Field(description="The alerting service.", max_length=128)] = None,
        severity: Annotated[str | None, Field(description=SEVERITY, max_length=32)] = None,
        description: Annotated[str, Field(description="The alert's description.", max_length=20_000)] = "",
        alert_id: Annotated[str | None, Field(description=TRIAGE_ALERT_ID, max_length=64)] = None,
    ) -> Annotated[CallToolResult, TriagePlan]:
        return run(ctx, "triage_alert", lambda memory: tools.triage_alert(
            memory, summary, service, severity, description, alert_id
        ))  # fmt: skip

    @server.tool(description=tools.EDIT_DESCRIPTION, annotations=additive)
    def record_edit(
        draft: Annotated[str, Field(description="The text you drafted.", min_length=1, max_length=MAX_EDIT_CHARS)],
        edited: Annotated[
            str, Field(description="The text as the person sent it.", min_length=1, max_length=MAX_EDIT_CHARS)
        ],
        content_type: Annotated[
            str, Field(description="What it is: status-update, post-mortem...", min_length=1, max_length=100)
        ],
        author: Annotated[str, Field(description="Who edited it.", min_length=1, max_length=200)],
        ctx: Context,
    ) -> Annotated[CallToolResult, EditRecorded]:
        return run(ctx, "record_edit", lambda memory: tools.record_edit(memory, draft, edited, content_type, author))

    register_incident_tools(server, run)
    server.either.update(triage_alert=("summary", "alert_id"), open_incident=("title", "from_alerts"))
    return server


def _allowed(memory: OrgMemory, granted: KeyScope, needed: KeyScope) -> OrgMemory:
    if not granted.allows(needed):
        raise ForbiddenError(
            f"This key has the {granted.value} scope; this tool needs {needed.value}.",
            detail={"scope": granted.value, "needed": needed.value},
        )
    return memory


def http_server(grandbo: Grandbo) -> ToolServer:
    """The server mounted at `/mcp`: each call authenticates the Bearer key of its own HTTP request."""

    def resolve(ctx: Context, needed: KeyScope) -> OrgMemory:
        headers = getattr(ctx.request_context.request, "headers", None)
        key = bearer_key(headers.get("authorization") if headers is not None else None)
        memory, record = grandbo.authenticate(key)
        return _allowed(memory, record.scope, needed)

    return build(resolve, grandbo=grandbo)


def stdio_server(
    memory: OrgMemory, scope: KeyScope, *, verbose: bool = False, recheck: Callable[[], object] | None = None
) -> ToolServer:
    """The server of `grandbo mcp`: one organization for the whole process, the incarnation `memory` is pinned to
    (`OrgMemory.pin`, as the session starts). Before every call the organization is read again: once it was
    deleted (and maybe created again under its name: a new organization, which the session never reads or
    writes), every call is refused with a message that says to restart the session. `recheck` (the key's
    authentication) runs then too, so a key revoked while an agent's session lasts is refused, as over HTTP."""

    def resolve(_ctx: Context, needed: KeyScope) -> OrgMemory:
        try:
            memory.pin()  # one read: the session's org is still the one it started with
        except OrgDroppedError as error:
            raise OrgDroppedError(
                f"Organization {memory.org!r} was deleted after this MCP session (`grandbo mcp`) started, and may "
                "have been created again since, as a new organization, which this session never reads or writes: "
                "nothing more was read or written. Restart the session (your agent's MCP server) to work with the "
                "organization of that name now.",
                detail={"org_id": memory.org},
            ) from error
        if recheck is not None:
            recheck()
        return _allowed(memory, scope, needed)

    return build(resolve, verbose=verbose)


_CALLER: ContextVar[OrgMemory] = ContextVar("grandbo_tool_caller")


def rest_server() -> ToolServer:
    """The server `POST /v1/tools/{name}` calls through (`call_over_rest`): the route authenticated the key with
    the tool's scope; the handle it got is the one every tool of the call acts through."""
    return build(lambda _ctx, _needed: _CALLER.get())


async def call_over_rest(server: ToolServer, memory: OrgMemory, name: str, arguments: dict[str, Any]) -> Any:
    """The tool's structured answer, exactly as over MCP (the same argument checks and answer); a refusal raises
    the GrandboError behind it (REST's status and error shape), an argument refused by the schema an
    InvalidInputError with the same sentence an agent reads over MCP."""
    token = _CALLER.set(memory)
    try:
        result = await server.call_tool(name, arguments)
    except ToolError as error:
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, GrandboError):
            cause = cause.__cause__
        if cause is not None:
            raise cause from None
        raise InvalidInputError(str(error), detail={"tool": name}) from None
    finally:
        _CALLER.reset(token)
    assert isinstance(result, CallToolResult)
    return result.structured_content


_NOT_ALLOWED = {
    "GET": "This MCP endpoint offers no event stream (GET): it is stateless.",
    "DELETE": "This MCP endpoint keeps no session to end (DELETE): it is stateless.",
}


class _Guard:
    """Refuse any MCP request without a valid Bearer key (401, the API's error shape) before it opens or
    reaches a session; the MCP app itself runs under the same path."""

    def __init__(self, app: ASGIApp, grandbo: Grandbo) -> None:
        self.app, self.grandbo = app, grandbo

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = _media_types_folded(scope)
            if (method := scope["method"]) != "POST":
                # A stateless endpoint has no stream to offer and no session to end: the spec's answer to either is
                # 405. The SDK answered a GET 200 and held an empty event stream open until the client left (one
                # read key held a thousand and took every connection the server had), a DELETE in JSON-RPC's shape.
                await _answer(send, 405, {"error": {
                    "type": "method_not_allowed", "message": _NOT_ALLOWED.get(method, f"This MCP endpoint takes no "
                    f"{method[:20]}, only POST."), "remedy": "Send each JSON-RPC message as a POST; its answer comes "
                    "in the response. It keeps no session: there is none to open or end.", "detail": {"allow": "POST"},
                }}, [(b"allow", b"POST")])  # fmt: skip
                return
            given = [value for name, value in scope.get("headers") or [] if name == b"authorization"]
            if len(given) > 1:  # the check read one and the tool another: keys of two orgs made a misfiled audit
                body = InvalidInputError("The request carries more than one Authorization header.").to_dict()
                body["error"]["remedy"] = "Send one: Authorization: Bearer <key>."
                await _answer(send, 400, body)
                return
            header = given[0].decode("latin-1") if given else ""
            try:
                from starlette.concurrency import run_in_threadpool

                memory, record = await run_in_threadpool(self.grandbo.authenticate, bearer_key(header))
            except NotAuthorizedError as error:
                await _answer(send, 401, error.to_dict(), [(b"www-authenticate", b"Bearer")])
                return
            # for the request log, as the /v1 routes do; and its body is read (`api.bodies`) as the org's
            scope.setdefault("state", {}).update(org=memory.org, admitted=memory.org)
            # Every message counts, as every /v1 request does (tools/list and ping were never counted), and runs in
            # one of the org's slots of the process (`ratelimit.OrgSlots`); either refusal comes before the MCP app
            # begins its answer.
            try:
                self.grandbo.rate_limits.take(memory.org, record.id)
                async with self.grandbo.rate_limits.slots.running(memory.org, large=large_request(scope)):
                    await screened(self.app, scope, receive, send)
            except (RateLimitedError, RequestsOrgBusyError) as error:
                await _answer(send, 429, error.to_dict(), [(b"retry-after", str(error.retry_after).encode())])
            return
        await self.app(scope, receive, send)


async def _answer(send: Send, status: int, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """An error in the API's shape, answered by the guard before the MCP app sees the request."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *headers]})  # fmt: skip
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


def _media_types_folded(scope: Scope) -> Scope:
    """The request with its Content-Type's media type lowercased: media types are case-insensitive (RFC 9110
    8.3.1), but the SDK compares `application/json` exactly and refused `Application/JSON` with a 400."""
    held = scope.get("headers") or []
    headers = [(name, _fold_media_type(value) if name == b"content-type" else value) for name, value in held]
    return {**scope, "headers": headers}


def _fold_media_type(value: bytes) -> bytes:
    media_type, semicolon, parameters = value.partition(b";")
    return media_type.strip().lower() + semicolon + parameters


def guarded(server: MCPServer, grandbo: Grandbo) -> ASGIApp:
    from mcp.server.transport_security import TransportSecuritySettings

    # The SDK's DNS-rebinding guard answered 421 to any Host but loopback with a port: behind a reverse proxy, or
    # served on 0.0.0.0, /mcp refused every client while /v1 answered. It protects an endpoint a browser page
    # could reach without credentials; every request here needs an org's key first (`_Guard`), as /v1's do.
    unguarded = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(
        streamable_http_path="/", stateless_http=True, json_response=True, transport_security=unguarded
    )
    return _Guard(app, grandbo)
