"""The triage console: the alerts the webhooks received and the open incidents; for the one selected, what
memory says about it, and a vote on each suggested runbook that goes to the ledger."""

from __future__ import annotations

from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from grandbo.errors import GrandboError
from grandbo.model import Severity
from grandbo.tiers.keys import Scope
from grandbo.web import triage
from grandbo.web.forms import GroupFormDep, VoteForm, VoteFormDep, suggested_services
from grandbo.web.pages import redirect, render
from grandbo.web.session import PREFIX, SignedIn, Viewer

router = APIRouter(prefix=PREFIX, include_in_schema=False)


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
    filters = triage.QueueFilters.read({name: values[0] for name, values in parse_qs(queue[:1000]).items()})
    return back + (f"&{filters.query}" if filters.query else "")


@router.get("/triage", response_class=HTMLResponse)
def triage_page(request: Request, viewer: SignedIn, alert: str = "", incident: str = "") -> HTMLResponse:
    filters = triage.QueueFilters.read(request.query_params)
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
        services=suggested_services(viewer.memory.catalog.topology().names),
        view=view,
        error=error,
        status=404 if error else 200,
    )


@router.post("/triage/vote")
def vote(request: Request, viewer: SignedIn, form: VoteFormDep) -> Response:
    return _on_runbook(request, viewer, form, undo=False)


@router.post("/triage/unvote")
def unvote(request: Request, viewer: SignedIn, form: VoteFormDep) -> Response:
    return _on_runbook(request, viewer, form, undo=True)


def _on_runbook(request: Request, viewer: Viewer, form: VoteForm, *, undo: bool) -> Response:
    """A vote on a plan's runbook (it worked or not), or its undo; the ledger's record before and after."""
    viewer.require(Scope.WRITE, form.csrf)
    back = _back(form.kind, form.subject, form.queue)
    if not undo and (form.worked not in ("yes", "no") or not form.runbook):
        return redirect(request, back, "Choose whether the runbook worked.", error=True)
    try:
        chosen = _subject(viewer, form.kind, form.subject)
        memory, runbook, actor = viewer.memory, form.runbook, viewer.actor
        if undo:
            before, after, attempts = triage.undo(memory, chosen, runbook, actor)
        else:
            before, after, attempts = triage.vote(memory, chosen, runbook, form.worked == "yes", actor)
    except GrandboError as problem:
        return redirect(request, back, problem.message, error=True)
    moved = _moved(before, after, attempts)
    said = (
        f"Vote taken back: {form.runbook}'s win rate {moved}."
        if undo
        else (f"Recorded: {form.runbook} {'worked' if form.worked == 'yes' else 'did not work'}. Win rate {moved}.")
    )
    return redirect(request, back + f"#runbook-{quote(form.runbook, safe='')}", said)


@router.post("/triage/open-group")
def open_group(request: Request, viewer: SignedIn, form: GroupFormDep) -> Response:
    """Open an incident from an alert group (its alerts, services, first alert's time and title)."""
    viewer.require(Scope.WRITE, form.csrf)
    try:
        incident = viewer.memory.alert_groups.open_incident(form.group, actor=viewer.actor)
    except GrandboError as problem:
        return redirect(request, _back("alert", "", form.queue).split("?")[0], problem.message, error=True)
    return redirect(
        request,
        f"{PREFIX}/triage?incident={quote(incident.id, safe='')}",
        f"Opened {incident.id} from {len(incident.alerts)} alerts: {incident.title}",
    )
