"""`/v1/alert-groups`: the candidate incidents alert grouping formed (`tiers.grouping`), and opening one as an
incident (`POST /v1/incidents` with `from_alerts` opens one from alerts named by id)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from grandbo.api.deps import ReadMemory, WriteMemory
from grandbo.api.paging import Page, PageAsked, bounded_page
from grandbo.tiers.grouping import AlertGroup
from grandbo.tiers.incident_model import Incident
from grandbo.values import IsoTime

router = APIRouter(prefix="/v1")
GroupId = Annotated[str, Path(min_length=1, max_length=64)]
LARGEST_GROUP = 128 * 1024  # a group's JSON: GROUP_LISTED alerts, members and unknown services, the catalog's


class AlertGroupPage(Page[AlertGroup]):
    """A page of alert groups, and where the next one starts."""


class OpenGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(default=None, min_length=1, max_length=500, description="Default: from the group.")


@router.get("/alert-groups", response_model=AlertGroupPage, tags=["alerts"])
def list_alert_groups(
    memory: ReadMemory,
    asked: PageAsked,
    status: Annotated[Literal["open", "opened", "dismissed"] | None, Query()] = None,
    service: Annotated[str | None, Query(max_length=128, description="A catalog name or one of its aliases.")] = None,
    since: Annotated[IsoTime | None, Query(description="Changed at or after this time (ISO 8601).")] = None,
) -> Response:
    """The alert groups (candidate incidents), the most recently changed first, a page at a time. With `service`,
    a page holds only the groups with that service and may hold fewer than `limit`; follow `next_cursor`. A page
    holds at most 2 MiB (`next_cursor` gives the rest)."""
    return bounded_page(lambda n, after: memory.alert_groups.page(n, after=after, status=status, service=service,
                                                                  since=since), asked, LARGEST_GROUP)  # fmt: skip


@router.get("/alert-groups/{group_id}", response_model=AlertGroup, tags=["alerts"])
def get_alert_group(group_id: GroupId, memory: ReadMemory) -> dict[str, Any]:
    """One alert group: its alerts, services, first and last alert, status and the incident opened from it."""
    return memory.alert_groups.get(group_id).model_dump(mode="json")


@router.post("/alert-groups/{group_id}/open", status_code=201, response_model=Incident, tags=["incidents"])
def open_alert_group(
    group_id: GroupId, memory: WriteMemory, response: Response, body: OpenGroup | None = None
) -> dict[str, Any]:
    """Open an incident from a group: it lists the group's alerts and services, starts when the first alert
    fired, is titled after it; the group becomes `opened` (409 when it already is, naming the incident). 200 with
    the incident when a request at the same moment, or an attempt that failed half-way, opened it: it is opened
    once."""
    title = body.title if body else None
    incident, opened = memory.alert_groups.open_group(group_id, title=title, actor="api")
    if not opened:
        response.status_code = 200
    return incident.model_dump(mode="json")


@router.post("/alert-groups/{group_id}/dismiss", response_model=AlertGroup, tags=["alerts"])
def dismiss_alert_group(group_id: GroupId, memory: WriteMemory) -> dict[str, Any]:
    """Dismiss a group (not an incident): no alert joins it any more."""
    return memory.alert_groups.dismiss(group_id, actor="api").model_dump(mode="json")
