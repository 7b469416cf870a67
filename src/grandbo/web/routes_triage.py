"""The triage console: the alerts the webhooks received and the open incidents; for the one selected, what
memory says about it, and a vote on each suggested runbook that goes to the ledger."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from grandbo.errors import GrandboError
from grandbo.model import Severity
from grandbo.tiers.keys import Scope
from grandbo.web import triage
from grandbo.web.pages import redirect, render
from grandbo.web.session import PREFIX, SignedIn, Viewer

router = APIRouter(prefix=PREFIX, include_in_schema=False)
FormText = Annotated[str, Form()]


def _subject(viewer: Viewer, kind: str, subject_id: str) -> triage.Subject:
    if kind == "incident":
        return triage.incident_subject(viewer.memory, subject_id)
    return triage.alert_subject(viewer.memory, subject_id)


def _moved(before: float, after: float, attempts: int) -> str:
    """How a vote (or its undo) moved a runbook's record, as the page says it."""
    return f"{before:.1%} → {after:.1%} over {attempts} attempt{'s' if attempts != 1 else ''}"


def _back(kind: str, subject: str, queue: str) -> str:
    """The page a form returns to: the subject, in the queue as it was filtered (only the known filters)."""
    back = f"{PREFIX}/triage?{'incident' if kind == 'incident' else 'alert'}={quote(subject, safe='')}"
    asked = parse_qs(queue[:1000])
    filters = triage.QueueFilters.read(
        *(asked.get(name, [""])[0] for name in ("status", "severity", "service", "source"))
    )
    return back + (f"&{filters.query}" if filters.query else "")


@router.get("/triage", response_class=HTMLResponse)
def triage_page(
    request: Request,
    viewer: SignedIn,
    alert: str = "",
    incident: str = "",
    status: str = "",
    severity: str = "",
    service: str = "",
    source: str = "",
) -> HTMLResponse:
    filters = triage.QueueFilters.read(status, severity, service, source)
    queue = triage.queue(viewer.memory, filters)
    view, error = None, None
    try:
        if incident:
            view = triage.build(viewer.memory, _subject(viewer, "incident", incident))
        elif alert:
            view = triage.build(viewer.memory, _subject(viewer, "alert", alert))
        elif (first := queue.first) is not None:  # the top of the queue as drawn
            view = triage.build(viewer.memory, _subject(viewer, first.kind, first.id))
    except GrandboError as problem:  # an id of nothing this organization holds
        error = problem.message
    return render(
        request,
        "triage.html",
        viewer,
        nav="triage",
        queue=queue,
        filters=filters,
        sources=triage.SOURCES,
        severities=[s.value for s in Severity],
        services=viewer.memory.catalog.topology().names,
        view=view,
        error=error,
        status=404 if error else 200,
    )


@router.post("/triage/vote")
def vote(
    request: Request,
    viewer: SignedIn,
    csrf: FormText = "",
    kind: FormText = "alert",
    subject: FormText = "",
    runbook: FormText = "",
    worked: FormText = "",
    queue: FormText = "",
) -> Response:
    viewer.require(Scope.WRITE, csrf)
    back = _back(kind, subject, queue)
    if worked not in ("yes", "no") or not runbook:
        return redirect(request, back, "Choose whether the runbook worked.", error=True)
    try:
        chosen = _subject(viewer, kind, subject)
        before, after, attempts = triage.vote(viewer.memory, chosen, runbook, worked == "yes", viewer.actor)
    except GrandboError as problem:
        return redirect(request, back, problem.message, error=True)
    said = "worked" if worked == "yes" else "did not work"
    return redirect(
        request,
        back + f"#runbook-{quote(runbook, safe='')}",
        f"Recorded: {runbook} {said}. Win rate {_moved(before, after, attempts)}.",
    )


@router.post("/triage/unvote")
def unvote(
    request: Request,
    viewer: SignedIn,
    csrf: FormText = "",
    kind: FormText = "alert",
    subject: FormText = "",
    runbook: FormText = "",
    queue: FormText = "",
) -> Response:
    viewer.require(Scope.WRITE, csrf)
    back = _back(kind, subject, queue)
    try:
        chosen = _subject(viewer, kind, subject)
        before, after, attempts = triage.undo(viewer.memory, chosen, runbook, viewer.actor)
    except GrandboError as problem:
        return redirect(request, back, problem.message, error=True)
    return redirect(
        request,
        back + f"#runbook-{quote(runbook, safe='')}",
        f"Vote taken back: {runbook}'s win rate {_moved(before, after, attempts)}.",
    )


@router.post("/triage/open-group")
def open_group(
    request: Request, viewer: SignedIn, csrf: FormText = "", group: FormText = "", queue: FormText = ""
) -> Response:
    """Open an incident from an alert group (its alerts, services, first alert's time and title)."""
    viewer.require(Scope.WRITE, csrf)
    try:
        incident = viewer.memory.alert_groups.open_incident(group, actor=viewer.actor)
    except GrandboError as problem:
        return redirect(request, _back("alert", "", queue).split("?")[0], problem.message, error=True)
    return redirect(
        request,
        f"{PREFIX}/triage?incident={quote(incident.id, safe='')}",
        f"Opened {incident.id} from {len(incident.alerts)} alerts: {incident.title}",
    )
