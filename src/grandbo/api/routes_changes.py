"""`/v1/changes`: what changed (deploys, config pushes, flag flips), received from the change sources and listed."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request, Response
from pydantic import BaseModel, Field

from grandbo.api.deliveries import answered, delivery_route, receive
from grandbo.api.deps import ReadMemory, WriteMemory
from grandbo.api.paging import Page, PageAsked, bounded_page
from grandbo.ingest import changes
from grandbo.tiers.change_model import Change, ChangeKind
from grandbo.values import IsoTime

router = APIRouter(prefix="/v1")
LARGEST_CHANGE = 32 * 1024  # a change's JSON: its id, service, version (200), summary and url (2,000), escaped


class ChangesReceived(BaseModel):
    """What a delivery did with each of its changes."""

    changes: list[Change]
    new: int = Field(description="Changes stored by this delivery.")
    updated: int = Field(description="Changes stored before that this delivery said something else of.")
    unchanged: int = Field(description="Redeliveries: nothing written.")


@router.post("/changes/{source}", tags=["changes"], **delivery_route(
    ChangesReceived,
    "At least one change was stored or updated.",
    "The source's payload as it sends it: github (deployment, deployment_status), argocd (README's template), "
    "pagerduty (a change event of its Events API v2), generic ({id, service, kind, summary, version, url, at}, "
    "one object or a list).",
    {},
))  # fmt: skip
async def receive_changes(
    source: Annotated[str, Path(max_length=64, description=f"One of {', '.join(changes.SOURCES)}.")],
    request: Request,
    memory: WriteMemory,
    x_github_event: Annotated[str | None, Header(max_length=100, description="github: the event's name.")] = None,
    x_hub_signature_256: Annotated[
        str | None,
        Header(max_length=200, description="github only, and required there: `sha256=<hex HMAC-SHA256 of the body>` "
               "with the org's secret (`grandbo webhooks add github`)."),
    ] = None,
) -> Response:  # fmt: skip
    """Receive the changes of one delivery: each stored once per source and id (a redelivery writes nothing;
    another body for the same id replaces it, its history kept). An unknown source is a 404 listing the valid
    ones; a bad payload a 422 naming the field; a bad or missing GitHub signature a 401."""
    received = await receive(request, changes.receive, memory, source)
    count = {outcome: sum(got == outcome for _, got in received) for outcome in ("new", "updated", "unchanged")}
    out = ChangesReceived(changes=[change for change, _ in received], **count)
    return answered(out, wrote=bool(out.new or out.updated))


class ChangePage(Page[Change]):
    """A page of changes, the latest first, and where the next one starts."""


@router.get("/changes", response_model=ChangePage, tags=["changes"])
def list_changes(
    memory: ReadMemory,
    asked: PageAsked,
    service: Annotated[str | None, Query(max_length=200, description="A catalog name or one of its aliases.")] = None,
    kind: Annotated[ChangeKind | None, Query()] = None,
    source: Annotated[str | None, Query(max_length=64, description="github, argocd, pagerduty, generic, cli.")] = None,
    since: Annotated[IsoTime | None, Query(description="Took effect at or after this time (ISO 8601).")] = None,
    until: Annotated[IsoTime | None, Query(description="Took effect at or before this time (ISO 8601).")] = None,
) -> Response:
    """The changes, the latest first (by the time each took effect), a page of at most `limit` and 2 MiB at a time
    (`next_cursor` gives the rest); reads the page only."""
    return bounded_page(lambda n, after: memory.changes.page(service=service, kind=kind, source=source, since=since,
                                                             until=until, limit=n, cursor=after),
                        asked, LARGEST_CHANGE)  # fmt: skip


@router.get("/changes/{change_id:path}", response_model=Change, tags=["changes"])
def get_change(change_id: Annotated[str, Path(min_length=1, max_length=300)], memory: ReadMemory) -> Response:
    """One change, by `SOURCE:ID` (`github:4711`) or by the source's id alone when only one source used it."""
    return Response(memory.changes.get(change_id).model_dump_json(), media_type="application/json")
