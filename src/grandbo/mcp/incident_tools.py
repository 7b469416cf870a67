"""The tools that run a whole incident and read what it cites: open (by hand or from alerts), list, read and close
an incident, read a memory with its history, read a runbook with its steps and record, list what changed.
Registered on the server `build` makes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from grandbo.mcp import parameters as p
from grandbo.mcp import tools
from grandbo.mcp.answers import ChangeList, IncidentList, MemoryRead, RunbookRead
from grandbo.memory import OrgMemory
from grandbo.tiers.alert_groups import MAX_FROM_ALERTS
from grandbo.tiers.change_model import ChangeKind
from grandbo.tiers.incident_model import MAX_SYMPTOM_CHARS, Incident
from grandbo.values import IsoTime

Name = Annotated[str, Field(max_length=128)]  # a service's or an alert's, as every id
Symptom = Annotated[str, Field(max_length=MAX_SYMPTOM_CHARS)]
Run = Callable[[Context, str, Callable[[OrgMemory], BaseModel]], CallToolResult]


def register_incident_tools(server: MCPServer, run: Run) -> None:
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
    closes = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)

    @server.tool(description=tools.INCIDENT_OPEN_DESCRIPTION, annotations=writes)
    def open_incident(
        ctx: Context,
        title: Annotated[str | None, Field(description=p.TITLE, min_length=1, max_length=500)] = None,
        services: Annotated[list[Name], Field(description=p.SERVICES, max_length=50)] = [],  # noqa: B006
        severity: Annotated[str | None, Field(description=p.SEVERITY, max_length=16)] = None,
        symptoms: Annotated[list[Symptom], Field(description=p.SYMPTOMS, max_length=100)] = [],  # noqa: B006
        alerts: Annotated[list[Name], Field(description=p.ALERTS, max_length=100)] = [],  # noqa: B006
        started_at: Annotated[IsoTime | None, Field(description=p.STARTED_AT)] = None,
        incident_id: Annotated[str | None, Field(description=p.NEW_INCIDENT_ID, max_length=128)] = None,
        from_alerts: Annotated[
            list[Annotated[str, Field(max_length=128)]], Field(description=p.FROM_ALERTS, max_length=MAX_FROM_ALERTS)
        ] = [],  # noqa: B006
    ) -> Annotated[CallToolResult, Incident]:
        return run(ctx, "open_incident", lambda memory: tools.open_incident(
            memory, title, services, severity, symptoms, alerts, started_at, incident_id, from_alerts
        ))  # fmt: skip

    @server.tool(description=tools.INCIDENT_LIST_DESCRIPTION, annotations=read_only)
    def list_incidents(
        ctx: Context,
        status: Annotated[Literal["open", "closed"] | None, Field(description=p.LIST_STATUS)] = "open",
        limit: Annotated[int, Field(description=p.LIMIT, ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Field(description=p.CURSOR, max_length=400)] = None,
    ) -> Annotated[CallToolResult, IncidentList]:
        return run(ctx, "list_incidents", lambda memory: tools.list_incidents(memory, status, limit, cursor))

    @server.tool(description=tools.INCIDENT_GET_DESCRIPTION, annotations=read_only)
    def get_incident(
        incident_id: Annotated[str, Field(description=p.INCIDENT_ID, min_length=1, max_length=128)], ctx: Context
    ) -> Annotated[CallToolResult, Incident]:
        return run(ctx, "get_incident", lambda memory: memory.incidents.get(incident_id))

    @server.tool(description=tools.INCIDENT_CLOSE_DESCRIPTION, annotations=closes)
    def close_incident(
        incident_id: Annotated[str, Field(description=p.INCIDENT_ID, min_length=1, max_length=128)],
        ctx: Context,
        resolution: Annotated[str, Field(description=p.RESOLUTION, max_length=4000)] = "",
        runbook_used: Annotated[str | None, Field(description=p.RUNBOOK_USED, max_length=128)] = None,
        succeeded: Annotated[bool | None, Field(description=p.SUCCEEDED)] = None,
        time_to_mitigate_s: Annotated[float | None, Field(description=p.TTM, ge=0, le=10**8)] = None,
        postmortem: Annotated[str | None, Field(description=p.POSTMORTEM, max_length=100_000)] = None,
    ) -> Annotated[CallToolResult, Incident]:
        return run(ctx, "close_incident", lambda memory: memory.incidents.close(
            incident_id, resolution=resolution, runbook_used=runbook_used, succeeded=succeeded,
            time_to_mitigate_s=time_to_mitigate_s, postmortem=postmortem, actor="mcp",
        ))  # fmt: skip

    @server.tool(description=tools.MEMORY_DESCRIPTION, annotations=read_only)
    def get_memory(
        memory_id: Annotated[str, Field(description=p.MEMORY_ID, min_length=1, max_length=128)],
        ctx: Context,
        history: Annotated[bool, Field(description=p.HISTORY)] = True,
    ) -> Annotated[CallToolResult, MemoryRead]:
        return run(ctx, "get_memory", lambda memory: tools.get_memory(memory, memory_id, history))

    @server.tool(description=tools.RUNBOOK_DESCRIPTION, annotations=read_only)
    def get_runbook(
        runbook_id: Annotated[str, Field(description=p.RUNBOOK_ID, min_length=1, max_length=128)],
        ctx: Context,
        service: Annotated[str | None, Field(description=p.RUNBOOK_SERVICE, max_length=128)] = None,
    ) -> Annotated[CallToolResult, RunbookRead]:
        return run(ctx, "get_runbook", lambda memory: tools.get_runbook(memory, runbook_id, service))

    @server.tool(description=tools.CHANGES_DESCRIPTION, annotations=read_only)
    def list_changes(
        ctx: Context,
        service: Annotated[str | None, Field(description=p.CHANGE_SERVICE, max_length=200)] = None,
        kind: Annotated[ChangeKind | None, Field(description=p.CHANGE_KIND)] = None,
        since: Annotated[IsoTime | None, Field(description=p.SINCE)] = None,
        until: Annotated[IsoTime | None, Field(description=p.UNTIL)] = None,
        limit: Annotated[int, Field(description=p.CHANGES_LIMIT, ge=1, le=100)] = 20,
    ) -> Annotated[CallToolResult, ChangeList]:
        return run(ctx, "list_changes", lambda memory: tools.list_changes(
            memory, service, kind.value if kind else None, since, until, limit
        ))  # fmt: skip
