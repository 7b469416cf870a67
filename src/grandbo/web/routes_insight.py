"""Analytics (charts drawn on the server) and the profile with the learned notes and their review."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from grandbo.errors import GrandboError, UnreadableRecordError
from grandbo.tiers.keys import Scope
from grandbo.tiers.learning_model import REVIEWED_SHOWN
from grandbo.web import analytics, charts
from grandbo.web.forms import FormText
from grandbo.web.pages import redirect, render
from grandbo.web.session import PREFIX, SignedIn

router = APIRouter(prefix=PREFIX, include_in_schema=False)


@router.get("/analytics", response_class=HTMLResponse)
def analytics_page(request: Request, viewer: SignedIn) -> HTMLResponse:
    kept: analytics.AnalyticsCache = request.app.state.console_analytics
    data = kept.get(viewer.memory)  # built again only once the org's data changed
    tried = [(rid, e) for rid, e in data.runbooks if e.attempts][: analytics.TOP_RUNBOOKS]
    rows = [
        charts.Interval(
            rid,
            e.win_rate,
            e.interval[0],
            e.interval[1],
            f"{e.win_rate:.0%} [{e.interval[0]:.0%}–{e.interval[1]:.0%}], {e.successes}/{e.attempts}",
        )
        for rid, e in tried
    ]
    stats, page = data.stats, charts.Page()
    drawn = {
        "runbooks": charts.intervals(rows, "Runbook success rate with its 90% credible interval", page=page),
        "mttr": charts.lines(data.mttr, "Median time to mitigate per service, by month", " min", page=page),
        "incidents": charts.hbars([(s, float(n)) for s, n in data.incidents], "Incidents per service", page=page),
        "growth": charts.lines(data.growth, "Memory entries over time (cumulative, days in UTC)", "", page=page),
        "embedded": charts.split(
            [("embedded", stats.readable), ("unembedded (lexical only)", stats.unreadable)],
            "Entries the vector arm can read",
            page=page,
        ),
    }
    return render(request, "analytics.html", viewer, nav="analytics", data=data, charts=drawn, tried=tried)


@router.get("/profile", response_class=HTMLResponse)
def profile_page(request: Request, viewer: SignedIn) -> HTMLResponse:
    memory = viewer.memory
    learning = memory.learning
    reviewed = learning.reviewed(REVIEWED_SHOWN)  # an org's every archived note was listed (and read) each view
    notes = [*learning.notes(), *learning.pending(), *reviewed]
    notes.sort(key=lambda n: (n.status not in ("active", "edited"), n.reviewed_at is not None, n.created_at))
    try:
        profile, unreadable = memory.profile.get(), None
    except UnreadableRecordError as problem:  # said, beside what can be read; its form mends it, notes stay
        profile, unreadable = memory.profile.readable(), problem.message
    return render(request, "profile.html", viewer, nav="profile", profile=profile, notes=notes, unreadable=unreadable,
                  reviewed=bool(reviewed), more_reviewed=len(reviewed) == REVIEWED_SHOWN)  # fmt: skip


@router.post("/profile/facts")
def set_fact(
    request: Request, viewer: SignedIn, csrf: FormText = "", name: FormText = "", value: FormText = ""
) -> Response:
    viewer.require(Scope.ADMIN, csrf)
    back = f"{PREFIX}/profile"
    if not name.strip():
        return redirect(request, back, "Name the fact (for example: products).", error=True)
    try:
        viewer.memory.profile.update({"facts": {name.strip(): value.strip()}}, actor=viewer.actor)
    except GrandboError as problem:
        return redirect(request, back, problem.message, error=True)
    said = f"Fact {name.strip()!r} saved." if value.strip() else f"Fact {name.strip()!r} removed."
    return redirect(request, back, said)


@router.post("/notes/prune")
def prune_notes(request: Request, viewer: SignedIn, csrf: FormText = "") -> Response:
    """Delete the rejected and archived notes (`Learning.prune_notes`): room under GRANDBO_NOTES_PER_ORG."""
    viewer.require(Scope.ADMIN, csrf)
    back = f"{PREFIX}/profile#notes-h"
    try:
        pruned = viewer.memory.learning.prune_notes(actor=viewer.actor)
    except GrandboError as problem:
        return redirect(request, back, problem.message, error=True)
    return redirect(request, back, f"Deleted {pruned.rejected} rejected and {pruned.archived} archived notes; the "
                    "rejected rules will not be learned again.")  # fmt: skip


@router.post("/notes/{note_id}/{action}")
def review_note(
    request: Request, viewer: SignedIn, note_id: str, action: str, csrf: FormText = "", text: FormText = ""
) -> Response:
    viewer.require(Scope.ADMIN, csrf)
    back = f"{PREFIX}/profile#note-{note_id}"
    learning = viewer.memory.learning
    try:
        if action == "accept":
            learning.accept_note(note_id, actor=viewer.actor)
            said = "accepted"
        elif action == "edit":
            learning.edit_note(note_id, text, actor=viewer.actor)
            said = "edited and accepted"
        elif action == "reject":
            learning.reject_note(note_id, actor=viewer.actor)
            said = "rejected: it leaves the context block and will not be learned again"
        elif action == "delete":
            learning.delete_note(note_id, actor=viewer.actor)
            back, said = f"{PREFIX}/profile#notes-h", "deleted: its rule will not be learned again"
        else:
            return redirect(request, back, f"Unknown review action {action!r}: accept, edit, reject or delete.",
                            error=True)  # fmt: skip
    except GrandboError as problem:
        return redirect(request, back, problem.message, error=True)
    return redirect(request, back, f"Note {note_id} {said}.")
