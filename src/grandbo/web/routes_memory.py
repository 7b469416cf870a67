"""The memory explorer: search over the one read seam with each hit's explanation, filters, the entries newest
first a page at a time, an entry's page (its history from the event log, its embedding status, the corpus stats),
and, for write keys, adding, correcting and retiring entries through the write seam.

The listing is read from the store a page at a time, as `GET /v1/memories` reads it (its filters in SQL, its
(time, id) cursor, its byte bound): it read every entry of the org (from the console's entry cache) to count them
and slice one page, and four viewers of an org of 228,000 entries took another org's recall p50 from 7 to 182 ms
(probe 20a F0). It counts the entries it lists only when they fit on one page."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import AfterValidator, BaseModel, ConfigDict

from grandbo.errors import GrandboError, InvalidInputError
from grandbo.memory import OrgMemory
from grandbo.model import Entry, Hit, Kind, Listing, RecallResult, Severity, Status
from grandbo.names import service_name
from grandbo.pages import LARGEST_ENTRY, Mark, Read, decode, encode, entries_read, filled
from grandbo.tiers.keys import Scope
from grandbo.web.corpus import CorpusCounts
from grandbo.web.forms import EntryFormDep, FormText, suggested_services
from grandbo.web.pages import redirect, render
from grandbo.web.session import PREFIX, SignedIn
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
    service: Annotated[str, AfterValidator(service_name)] = ""
    status: Annotated[str, _known(STATUSES, "active")] = "active"

    def admits(self, entry: Entry) -> bool:
        if self.tier in TIERS and entry.kind not in TIERS[self.tier]:
            return False
        if self.kind and entry.kind.value != self.kind:
            return False
        if self.service and self.service not in entry.services:
            return False
        return self.status == "any" or entry.status.value == self.status

    def listing(self, n: int, before: Mark | None, after: Mark | None) -> Listing:
        """The store's page of `n` entries these filters admit (`admits`, asked in SQL), before or after a place."""
        status = Status(self.status) if self.status in ("superseded", "retired") else None
        kind = Kind(self.kind) if self.kind else None
        return Listing(n, before, kind, self.service or None, TIERS.get(self.tier, ()), status, after)


@dataclass(frozen=True)
class _Listed:
    """One page of the listing, newest first: its entries, whether it starts at the newest entry, whether older
    ones follow, and how many entries precede it (as the link that led to it said: a label, never a read)."""

    entries: list[Entry]
    newest: bool
    older: bool
    start: int


@router.get("/memory", response_class=HTMLResponse)
def explorer(
    request: Request,
    viewer: SignedIn,
    filters: Annotated[Filters, Query()],
    q: str = "",
    before: str = "",
    after: str = "",
    start: str = "0",
) -> HTMLResponse:
    memory = viewer.memory
    result: RecallResult | None = None
    hits: list[Hit] = []
    page = _Listed([], True, False, 0)
    error, notes, total = None, [], None
    if q.strip():
        total = 0
        try:
            result = memory.recall(q.strip(), SEARCHED, services=[filters.service] if filters.service else None)
            hits = [hit for hit in result.hits if filters.admits(hit.entry)]
            total = len(hits)
        except GrandboError as problem:
            error = problem.message
        if filters.status not in ("active", "any"):
            notes.append("Recall searches active memories only; clear the query to list superseded or retired ones.")
    else:
        # ASCII digits only, and few (isdigit() holds for a superscript two and for 5,000 nines, which int() refuses)
        shown = int(start) if start.isascii() and start.isdigit() and len(start) <= 9 else 0
        page = _listed(memory, filters, _place(before), _place(after), shown)
        total = len(page.entries) if page.newest and not page.older else None  # counted only when all are shown
    return render(
        request,
        "memory.html",
        viewer,
        nav="memory",
        q=q,
        filters=filters,
        result=result,
        hits=hits,
        listed=page.entries,
        total=total,
        offset=page.start,
        per_page=LISTED,
        paging=_paging(q, filters, page),
        error=error,
        notes=notes,
        tiers=list(TIERS),
        kinds=[k.value for k in Kind],
        statuses=STATUSES,
        severities=[s.value for s in Severity],
        bars=bars,
        services=suggested_services(memory.catalog.topology().names),
    )


def _place(cursor: str) -> Mark | None:
    """The place a pager's link names; a link the console did not make (edited, truncated) reads as none."""
    try:
        return decode(cursor[:400])
    except InvalidInputError:
        return None


def _listed(memory: OrgMemory, filters: Filters, before: Mark | None, after: Mark | None, start: int) -> _Listed:
    """The page of the entries `filters` admit that is older than `before`, or (`after`) the next newer than
    `after`, newest first: at most LISTED entries and `pages.MAX_PAGE_BYTES`, read from the store as
    `GET /v1/memories` reads them (one more than the page, to know whether another follows). A newer page that
    reaches the newest entry is the first page."""
    inactive = filters.status != "active"

    def read(newer: bool) -> Read[Entry]:
        def listing(n: int, at: Mark | None) -> list[Entry]:
            return memory.entries(
                include_inactive=inactive, listing=filters.listing(n, *((None, at) if newer else (at, None)))
            )

        return entries_read(listing)

    if after is not None:
        _, found, more = filled(read(True), LISTED, after, LARGEST_ENTRY)
        if more is not None:
            return _Listed(found[::-1], False, True, max(0, start - len(found)))
        before, start = None, 0
    _, found, more = filled(read(False), LISTED, before, LARGEST_ENTRY)
    if not found and before is not None:  # past the oldest (its entry retired from the filter, say): the last page
        return _listed(memory, filters, None, before, start)
    return _Listed(found, before is None, more is not None, start if before is not None else 0)


def _paging(q: str, filters: Filters, page: _Listed) -> dict[str, str]:
    """The listing's links to the newer and older pages (newest first), with its filters, when there are such: each
    names the place it goes on from (the first or the last entry shown) and how many entries precede it."""
    if q.strip():
        return {}
    keep = {"tier": filters.tier, "kind": filters.kind, "service": filters.service, "status": filters.status}
    base = {name: value for name, value in keep.items() if value}
    links, shown = {}, page.entries
    if shown and not page.newest:
        links["newer"] = _link(base, after=_mark(shown[0]), start=page.start)
    if shown and page.older:
        links["older"] = _link(base, before=_mark(shown[-1]), start=page.start + len(shown))
    return links


def _mark(entry: Entry) -> str:
    return encode((entry.created_at, entry.id)) or ""


def _link(base: dict[str, str], **place: str | int) -> str:
    return f"{PREFIX}/memory?" + urlencode({**base, **place})


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
    counts: CorpusCounts = request.app.state.console_counts
    stats, age = counts.get(memory)  # a join of every active entry with its vector: once in STATS_SECONDS an org
    return render(
        request,
        "entry.html",
        viewer,
        nav="memory",
        entry=entry,
        history=memory.history(entry.id),
        embedding=memory.embedding(entry.id),
        space=memory.space,
        stats=stats,
        stats_age=age,
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
