"""The memory explorer: search over the one read seam with each hit's explanation, filters, an entry's page
(its history from the event log, its embedding status, the corpus stats), and, for write keys, adding,
correcting and retiring entries through the write seam."""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import AfterValidator, BaseModel, ConfigDict

from grandbo.errors import GrandboError
from grandbo.model import Entry, Hit, Kind, RecallResult, Severity, Status
from grandbo.tiers.keys import Scope
from grandbo.web.forms import EntryFormDep, FormText
from grandbo.web.pages import redirect, render
from grandbo.web.session import PREFIX, SignedIn, entries_of
from grandbo.web.triage import bars

router = APIRouter(prefix=PREFIX, include_in_schema=False)
LISTED = 50
SEARCHED = 50
TIERS = {
    "episodic": (Kind.FINDING,),
    "semantic": (Kind.RUNBOOK, Kind.POSTMORTEM, Kind.FACT),
    "examples and notes": (Kind.EXAMPLE, Kind.NOTE),
}
STATUSES = ("active", "superseded", "retired", "any")


def _known(allowed: Collection[str], default: str = "") -> AfterValidator:
    """A filter's value when the console knows it, else `default` (a hand-edited link reads as no filter)."""
    return AfterValidator(lambda value: value if value in allowed else default)


class Filters(BaseModel):
    """The explorer's filters, read from the page's query parameters."""

    model_config = ConfigDict(frozen=True)

    tier: Annotated[str, _known(TIERS)] = ""
    kind: Annotated[str, _known({k.value for k in Kind})] = ""
    service: Annotated[str, AfterValidator(lambda value: value.strip().lower())] = ""
    status: Annotated[str, _known(STATUSES, "active")] = "active"

    def admits(self, entry: Entry) -> bool:
        if self.tier in TIERS and entry.kind not in TIERS[self.tier]:
            return False
        if self.kind and entry.kind.value != self.kind:
            return False
        if self.service and self.service not in entry.services:
            return False
        return self.status == "any" or entry.status.value == self.status


@router.get("/memory", response_class=HTMLResponse)
def explorer(
    request: Request, viewer: SignedIn, filters: Annotated[Filters, Query()], q: str = "", offset: str = "0"
) -> HTMLResponse:
    memory = viewer.memory
    result: RecallResult | None = None
    hits: list[Hit] = []
    listed: list[Entry] = []
    total, start, error, notes = 0, 0, None, []
    if q.strip():
        try:
            result = memory.recall(q.strip(), SEARCHED, services=[filters.service] if filters.service else None)
            hits = [hit for hit in result.hits if filters.admits(hit.entry)]
            total = len(hits)
        except GrandboError as problem:
            error = problem.message
        if filters.status not in ("active", "any"):
            notes.append("Recall searches active memories only; clear the query to list superseded or retired ones.")
    else:
        matching = [entry for entry in entries_of(request).newest_first(memory) if filters.admits(entry)]
        # ASCII digits only, and few (isdigit() holds for a superscript two and for 5,000 nines, which int() refuses)
        start = int(offset) if offset.isascii() and offset.isdigit() and len(offset) <= 9 else 0
        start = min(start, max(0, len(matching) - 1) // LISTED * LISTED)  # past the end: the last page
        total, listed = len(matching), matching[start : start + LISTED]
    return render(
        request,
        "memory.html",
        viewer,
        nav="memory",
        q=q,
        filters=filters,
        result=result,
        hits=hits,
        listed=listed,
        total=total,
        offset=start,
        per_page=LISTED,
        paging=_paging(q, filters, start, total),
        error=error,
        notes=notes,
        tiers=list(TIERS),
        kinds=[k.value for k in Kind],
        statuses=STATUSES,
        severities=[s.value for s in Severity],
        bars=bars,
        services=memory.catalog.topology().names,
    )


def _paging(q: str, filters: Filters, offset: int, total: int) -> dict[str, str]:
    """The listing's links to the newer and older pages (newest first), with its filters, when there are such."""
    if q.strip():
        return {}
    keep = {"tier": filters.tier, "kind": filters.kind, "service": filters.service, "status": filters.status}
    base = {name: value for name, value in keep.items() if value}
    links = {}
    if offset > 0:
        links["newer"] = f"{PREFIX}/memory?" + urlencode({**base, "offset": max(0, offset - LISTED)})
    if offset + LISTED < total:
        links["older"] = f"{PREFIX}/memory?" + urlencode({**base, "offset": offset + LISTED})
    return links


@router.post("/memory")
def add(request: Request, viewer: SignedIn, form: EntryFormDep) -> Response:
    viewer.require(Scope.WRITE, form.csrf)
    try:
        entry = viewer.memory.remember(form.fields(), actor=viewer.actor)
    except GrandboError as problem:
        return redirect(request, f"{PREFIX}/memory", problem.message, error=True)
    return redirect(request, f"{PREFIX}/memory/{quote(entry.id, safe='')}", f"Remembered {entry.id}.")


@router.get("/memory/{entry_id}", response_class=HTMLResponse)
def entry_page(request: Request, viewer: SignedIn, entry_id: str) -> HTMLResponse:
    memory = viewer.memory
    entry = memory.find(entry_id)
    if entry is None:
        return render(
            request,
            "error.html",
            viewer,
            status=404,
            title="No such entry",
            message=f"This organization has no entry {entry_id!r}.",
        )
    return render(
        request,
        "entry.html",
        viewer,
        nav="memory",
        entry=entry,
        history=memory.history(entry.id),
        embedding=memory.embedding(entry.id),
        space=memory.space,
        stats=memory.stats(),
        kinds=[k.value for k in Kind],
        severities=[s.value for s in Severity],
        active=entry.status is Status.ACTIVE,
    )


@router.post("/memory/{entry_id}/correct")
def correct(request: Request, viewer: SignedIn, entry_id: str, form: EntryFormDep) -> Response:
    viewer.require(Scope.WRITE, form.csrf)
    back = f"{PREFIX}/memory/{quote(entry_id, safe='')}"
    try:
        changes = form.changes(viewer.memory.get(entry_id))
        if not changes:
            return redirect(request, back, "Nothing changed: edit a field to correct the entry.", error=True)
        new = viewer.memory.correct(entry_id, changes, reason=form.reason.strip(), actor=viewer.actor)
    except GrandboError as problem:
        return redirect(request, back, problem.message, error=True)
    return redirect(request, f"{PREFIX}/memory/{quote(new.id, safe='')}", f"Corrected: {new.id} supersedes {entry_id}.")


@router.post("/memory/{entry_id}/retire")
def retire(request: Request, viewer: SignedIn, entry_id: str, csrf: FormText = "", reason: FormText = "") -> Response:
    viewer.require(Scope.WRITE, csrf)
    back = f"{PREFIX}/memory/{quote(entry_id, safe='')}"
    try:
        viewer.memory.retire(entry_id, reason=reason.strip(), actor=viewer.actor)
    except GrandboError as problem:
        return redirect(request, back, problem.message, error=True)
    return redirect(request, back, f"Retired {entry_id}: it has left recall; its history stays.")
