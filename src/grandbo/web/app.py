"""The console's door: sign-in and sign-out, its stylesheet, and `install`, which `create_app` calls to mount
every console page under `/ui`."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from importlib import resources

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from grandbo.errors import GrandboError, RateLimitedError
from grandbo.service import Grandbo
from grandbo.web import routes_insight, routes_memory, routes_triage
from grandbo.web.analytics import AnalyticsCache
from grandbo.web.corpus import CorpusCounts
from grandbo.web.forms import FormText
from grandbo.web.pages import redirect, render, safe_next
from grandbo.web.session import (
    LOGIN_CSRF,
    PREFIX,
    SESSION,
    NotAllowed,
    Session,
    Sessions,
    SignInRequired,
    sessions_of,
)

router = APIRouter(prefix=PREFIX, include_in_schema=False)
CSS = resources.files("grandbo.web").joinpath("static/console.css").read_bytes()


@router.get("")
@router.get("/")
def index(request: Request) -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/triage", status_code=303)


@router.get("/static/console.css")
def stylesheet() -> Response:
    return Response(CSS, media_type="text/css", headers={"Cache-Control": "public, max-age=3600"})


@router.get("/sign-in", response_class=HTMLResponse)
def sign_in_page(request: Request, next: str = "") -> HTMLResponse:
    return _sign_in_form(request, next, None)


def _sign_in_form(request: Request, next_path: str, error: str | None, status: int = 200) -> HTMLResponse:
    token = secrets.token_urlsafe(16)
    response = render(
        request, "sign_in.html", None, status=status, next=safe_next(next_path), login_csrf=token, error=error
    )
    sessions_of(request).set_cookie(response, request, LOGIN_CSRF, token, 1800)
    return response


@router.post("/sign-in")
def sign_in(request: Request, key: FormText = "", csrf: FormText = "", next: FormText = "") -> Response:
    expected = request.cookies.get(LOGIN_CSRF, "")
    if not expected or not secrets.compare_digest(expected.encode(), csrf.encode()):
        return _sign_in_form(request, next, "The sign-in form expired; try again.", 400)
    sessions = sessions_of(request)
    try:
        cookie, record, memory = sessions.sign_in(key)
    except GrandboError:
        message = (
            "That key is unknown, revoked or mistyped. Paste a whole key (gbk.ORG.ID.SECRET); make one with "
            "`grandbo keys create --org ORG --scope read|write|admin`."
        )
        return _sign_in_form(request, next, message, 401)
    try:  # a sign-in is one of the key's requests (it was counted nowhere: a key could sign in without limit)
        sessions.grandbo.rate_limits.take(memory.org, record.id)
    except RateLimitedError as error:
        refused = _sign_in_form(request, next, f"{error.message} {error.remedy}", 429)
        refused.headers["Retry-After"] = str(error.retry_after)
        return refused
    response = redirect(
        request, safe_next(next), f"Signed in with the {record.scope.value} key {record.name or record.id}."
    )
    sessions.set_cookie(response, request, SESSION, cookie, sessions.seconds)
    response.delete_cookie(LOGIN_CSRF, path=PREFIX)
    return response


@router.post("/sign-out")
def sign_out(request: Request, viewer: Session, csrf: FormText = "") -> Response:
    viewer.require(viewer.key.scope, csrf)
    response = redirect(request, f"{PREFIX}/sign-in", "Signed out.")
    response.delete_cookie(SESSION, path=PREFIX)
    return response


def _to_sign_in(request: Request, error: Exception) -> Response:
    assert isinstance(error, SignInRequired)
    response = RedirectResponse(f"{PREFIX}/sign-in?next={error.next_path}", status_code=303)
    response.delete_cookie(SESSION, path=PREFIX)
    if error.message is not None:  # the session ended for a reason the sign-in page says (its org was deleted)
        sessions_of(request).flash(response, request, error.message, "error")
    return response


def _not_allowed(request: Request, error: Exception) -> Response:
    assert isinstance(error, NotAllowed)
    viewer = sessions_of(request).viewer(request)
    response = render(request, "error.html", viewer, status=error.status, title="Not allowed", message=error.message)
    if error.retry_after is not None:
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def _failed(request: Request, status: int, message: str) -> Response:
    """The page for a failure no route answered: drawn without the viewer, whose session read may be what
    failed, and with nothing of the error but its message."""
    return render(request, "error.html", None, status=status, title="This page failed", message=message)


def install(app: FastAPI, grandbo: Grandbo) -> dict[str, Callable[[Request, int, str], Response]]:
    """Serve the console under /ui on `app`, for the organizations of `grandbo`; returns the page that answers
    a console request's unexpected failure, by path prefix (`grandbo.api.app.Contained`)."""
    settings = grandbo.settings
    app.state.console_sessions = Sessions(grandbo, settings.session_secret(), settings.web_session_hours)
    app.state.console_analytics = AnalyticsCache()
    app.state.console_counts = CorpusCounts()
    app.add_exception_handler(SignInRequired, _to_sign_in)
    app.add_exception_handler(NotAllowed, _not_allowed)
    app.include_router(router)
    for module in (routes_triage, routes_memory, routes_insight):
        app.include_router(module.router)
    return {PREFIX: _failed}
