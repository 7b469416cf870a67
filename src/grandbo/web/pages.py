"""Drawing pages: the Jinja2 templates shipped with the package, the headers every console page carries,
and redirects that leave a one-line message for the next page."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from grandbo.tiers.context import WAITING_WORDS
from grandbo.web.markdown import markdown
from grandbo.web.session import FLASH, PREFIX, Viewer, sessions_of

# No script at all, styles from our own origin, forms only to ourselves, never framed.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def _when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _pct(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:.{digits}%}"


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


environment = Environment(
    loader=PackageLoader("grandbo.web", "templates"),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
environment.filters.update(when=_when, pct=_pct, minutes=_minutes, markdown=markdown)
environment.globals["prefix"] = PREFIX
environment.globals["waiting_words"] = WAITING_WORDS  # why a recall with memories still waiting has no verdict


def render(
    request: Request, template: str, viewer: Viewer | None, *, status: int = 200, **context: Any
) -> HTMLResponse:
    sessions = sessions_of(request)
    flash = sessions.take_flash(request)
    context.setdefault("nav", "")
    html = environment.get_template(template).render(viewer=viewer, flash=flash, path=request.url.path, **context)
    response = HTMLResponse(html, status_code=status, headers=HEADERS)
    if flash is not None:
        response.delete_cookie(FLASH, path=PREFIX)
    return response


def redirect(request: Request, to: str, message: str | None = None, *, error: bool = False) -> RedirectResponse:
    """303 to `to` (a console path), leaving `message` for the page drawn there."""
    response = RedirectResponse(to, status_code=303, headers={"Cache-Control": "no-store"})
    if message:
        sessions_of(request).flash(response, request, message, "error" if error else "ok")
    return response


def safe_next(path: str | None) -> str:
    """Where to go after signing in: only a console path of this server (never another site)."""
    if path and path.startswith(PREFIX + "/") and not path.startswith("//") and "\\" not in path:
        return path
    return f"{PREFIX}/triage"
