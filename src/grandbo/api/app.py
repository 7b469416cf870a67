"""The REST API: FastAPI over the org-bound handle, one JSON error shape, request logs, body limits.

Every route acts through the handle of the organization its API key belongs to (`deps`); no route names
an organization or touches a store. Routes are plain `def` functions, so FastAPI runs them on its worker
threads and recall's lexical and vector work never blocks the event loop.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grandbo.api import (
    openapi,
    routes_changes,
    routes_groups,
    routes_history,
    routes_memory,
    routes_org,
    routes_tools,
    routes_work,
    uploads,
)  # fmt: skip
from grandbo.api.bodies import BodyLimit, Budget
from grandbo.api.clean import CleanInput, ErrorPage, error_response, face_page
from grandbo.api.value_bounds import RouteBounds
from grandbo.errors import GrandboError
from grandbo.service import Grandbo
from grandbo.values import UNDECODABLE_REMEDY, undecodable

log = structlog.get_logger("grandbo.api")


def error_body(kind: str, message: str, remedy: str, detail: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    return {"error": {"type": kind, "message": message, "remedy": remedy, "detail": detail or {}}}


def _grandbo_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, GrandboError)
    return error_response(error)


def _problem(issue: dict[str, Any], content_type: str) -> dict[str, str]:
    """One validation issue as a field and a message; a body that is not JSON, or not sent as JSON, says so
    instead of pydantic's words for it."""
    loc = tuple(issue.get("loc", ()))
    if issue.get("type") == "json_invalid":
        where = f" at character {loc[1]}" if len(loc) > 1 else ""
        return {"field": "", "message": f"not valid JSON ({issue.get('ctx', {}).get('error', '')}{where})"}
    if issue.get("type") == "model_attributes_type" and loc == ("body",):
        if "json" in content_type:
            return {"field": "", "message": "must be a JSON object"}
        sent = content_type or "missing"
        return {"field": "", "message": f"must be a JSON object sent with `Content-Type: application/json` "
                f"(this request's Content-Type is {sent!r})"}  # fmt: skip
    return {"field": ".".join(str(part) for part in loc if part != "body"), "message": issue["msg"]}


def _validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    content_type = request.headers.get("content-type", "").lower()
    problems = [_problem(issue, content_type) for issue in error.errors()]
    listed = "; ".join(f"{p['field'] or 'body'}: {p['message']}" for p in problems[:5])
    return JSONResponse(
        error_body(
            "invalid_input",
            f"Invalid request: {listed}.",
            "Correct the fields named and send it again.",
            {"errors": problems},
        ),
        status_code=422,
    )


def _http_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    kinds = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}
    remedy = "See /openapi.json for the routes and their methods."
    if error.status_code == 400 and isinstance(bad := error.__cause__, UnicodeDecodeError):  # charset=latin-1
        detail = {"byte": f"0x{bad.object[bad.start : bad.start + 1].hex()}", "position": bad.start}
        said = undecodable(bad)
        return JSONResponse(
            error_body("bad_request", said[0].upper() + said[1:] + ".", UNDECODABLE_REMEDY, detail), status_code=400
        )
    if error.status_code == 400:  # the body could not be parsed at all (JSON nested past any parser's depth)
        remedy = "Send the body as plain JSON: an object, nested a few levels at most."
    return JSONResponse(
        error_body(kinds.get(error.status_code, "http_error"), str(error.detail), remedy),
        status_code=error.status_code,
    )


CLIENT_GONE = 499  # the request log's status of a request the app never answered: its client was gone


class HttpOnly:
    """A plain ASGI middleware (the decorator kind costs a millisecond a request) that acts on HTTP requests
    only: `http` is called for those, every other scope (the lifespan) passes through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class RequestLog(HttpOnly):
    """One structured line per request: method, route, status, org, duration. A request the app never answered
    because its client was gone (it left, or its body did not come in time: the connection answered it 408, logged
    `http.request_timeout`) is logged 499, nginx's "client closed request", not as a server error: a client
    sending its body slowly showed as a 500 in every count of the server's failures (probe 32)."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        status = CLIENT_GONE  # unless the app answers, or fails (below)
        scope.setdefault("state", {})["org"] = None

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        except BaseException:
            status = 500 if status == CLIENT_GONE else status  # answered by `Contained` (or the server)
            raise
        finally:
            route = scope.get("route")
            log.info(
                "http.request",
                method=scope["method"],
                route=getattr(route, "path", scope["path"]),
                status=status,
                org=scope["state"].get("org"),
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
            )


class NoStore(HttpOnly):
    """`Cache-Control: no-store` on every answer that says nothing of caching itself (the console's stylesheet and
    the Swagger UI's files do): the API and MCP answer an organization's data under its key, and a cache between
    clients and Grandbo told to keep GET answers whatever their `Authorization` (a CDN's cache-everything rule) would
    give one org's page to another org's request of the same URL (probe 26: no answer said not to keep it); a probe's
    answer kept would hide the server's state."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sent(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if all(name.lower() != b"cache-control" for name, _ in headers):
                    message = {**message, "headers": [*headers, (b"cache-control", b"no-store")]}
            await send(message)

        await self.app(scope, receive, sent)


_FAILED, _RETRY = "Grandbo failed to answer this request.", "Retry; if it persists, see the server log."


class Contained:
    """Answer an exception nothing inside answered, once, and let none reach the server.

    Starlette's outermost layer answers an unexpected exception with the app's 500 handler and then raises it
    again, for the server to log; uvicorn closes the connection on any exception it sees, even after a whole
    response, so the next request on that keep-alive connection (or one sent behind it) was cut off unanswered:
    the client saw a connection reset. Here the failure is logged with its traceback (for the operator; the
    client gets none) and answered in the error shape: a 500, or a GrandboError's own status when one escaped
    an exception handler, as a face's page under a prefix in `pages` (the console's). A response already
    started is not answered again: one cut short ends its connection (the server closes it), so no client takes
    a cut body for a whole one. BaseExceptions that are not Exceptions (cancellation, exit, interrupt) are the
    server's: uvicorn answers them with its own 500 and `Connection: close`."""

    def __init__(self, app: ASGIApp, pages: Mapping[str, ErrorPage]) -> None:
        self.app, self.pages = app, pages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as error:
            log.error(
                "http.unexpected_error",
                method=scope["method"],
                route=getattr(scope.get("route"), "path", scope["path"]),
                org=scope.get("state", {}).get("org"),
                response_started=started,
                error=f"{type(error).__name__}: {str(error)[:300]}",
                exc_info=error,
            )
            if not started:
                await self._answer(Request(scope), error)(scope, receive, send)

    def _answer(self, request: Request, error: Exception) -> Response:
        status, message = 500, f"{_FAILED} {_RETRY}"
        if isinstance(error, GrandboError):
            status, message = error.status, f"{error.message} {error.remedy}"
        path = request.url.path
        if (page := face_page(self.pages, path)) is not None:
            try:
                return page(request, status, message)
            except Exception as failed:  # the page itself may need what failed: the error shape still answers
                log.error("http.error_page_failed", route=path, error=f"{type(failed).__name__}: {failed}"[:300])
        if isinstance(error, GrandboError):
            return _grandbo_error(request, error)
        return JSONResponse(error_body("internal", _FAILED, _RETRY), status_code=500)


class _McpPath:
    """Serve the MCP endpoint at `/mcp` itself (it is mounted at `/mcp/`), without a redirect."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            scope = {**scope, "path": "/mcp/", "raw_path": b"/mcp/"}
        await self.app(scope, receive, send)


def operation_id(route: APIRoute) -> str:
    """A route's OpenAPI operation id: its function's name (`remember`, `list_alerts`), which a client generator
    makes a method of; FastAPI's default adds the path and method (`remember_v1_memories_post`)."""
    return route.name


def create_app(grandbo: Grandbo, *, mcp: bool = True, console: bool = True) -> FastAPI:
    """The whole HTTP face of one open Grandbo: `/v1` routes, `/healthz`, `/readyz`, MCP at `/mcp` and the web
    console at `/ui`."""
    mcp_server = None
    if mcp:
        from grandbo.mcp.server import http_server

        mcp_server = http_server(grandbo)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if mcp_server is None:
            yield
            return
        async with mcp_server.session_manager.run():
            yield

    app = FastAPI(
        title="Grandbo",
        version="1",
        summary="Institutional memory for AI agents and on-call teams: has this happened before, and what worked?",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        docs_url=None,  # served below from files installed with Grandbo: FastAPI's loads its page from a CDN
        redoc_url=None,  # ReDoc's page too, and it had no local copy
        swagger_ui_oauth2_redirect_url=None,  # no OAuth: a key is given to Authorize
    )
    _swagger_ui(app)
    app.state.grandbo = grandbo
    app.state.import_uploads = set()  # orgs whose import uploads to this process (`routes_history`)
    uploads.sweep(grandbo.settings.home)  # a killed server's uploads (`api.uploads`)
    app.add_exception_handler(GrandboError, _grandbo_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)

    pages: dict[str, ErrorPage] = {}  # filled by the console, once it is installed
    app.add_middleware(CleanInput, pages=pages)  # inside BodyLimit: it admits a body's request before reading it
    app.state.bodies = Budget(grandbo.settings.request_buffer_mb << 20)  # the request bodies held at once
    app.add_middleware(BodyLimit, budget=app.state.bodies)  # reads a body when the app asks for it
    app.add_middleware(_McpPath)
    app.add_middleware(RequestLog)
    app.add_middleware(Contained, pages=pages)  # outermost of ours but one: it sees what every other layer raises
    app.add_middleware(NoStore)  # on Contained's answers too
    routers = (
        routes_memory.router, routes_work.router, routes_org.router, routes_tools.router, routes_history.router,
        routes_changes.router, routes_groups.router,
    )  # fmt: skip
    for router in routers:
        app.include_router(router)
    routes_memory.add_health(app, grandbo)
    routes = [route for router in routers for route in router.routes if isinstance(route, APIRoute)]
    app.state.value_bounds = RouteBounds(routes)  # each body's bound, as `CleanInput` counts it
    app.openapi = partial(openapi.document, app, routes)  # type: ignore[method-assign]  # FastAPI's documented override
    if console:
        from grandbo.web import install

        pages.update(install(app, grandbo))
    if mcp_server is not None:
        from grandbo.mcp.server import guarded

        app.mount("/mcp", guarded(mcp_server, grandbo))
    return app


_SWAGGER_FILES = {  # served at /swagger/NAME: Swagger UI as `fastapi-swagger` installs it, and its type
    "swagger-ui-bundle.js": "application/javascript", "swagger-ui.css": "text/css", "favicon-32x32.png": "image/png",
}  # fmt: skip


def _swagger_ui(app: FastAPI) -> None:
    """`/docs`, the Swagger UI of `/openapi.json`, with its script and stylesheet served by this server from
    the copy installed with Grandbo (`fastapi-swagger`, Swagger UI 5, which reads OpenAPI 3.1): FastAPI's own
    page fetched them from cdn.jsdelivr.net, and without the internet (air-gapped, a locked-down network) it
    stayed blank.

    The package's own page is not used: it named its files by absolute URLs built from the request (`http://`
    behind a proxy that ends TLS, which the browser refuses on an `https` page: blank again), kept the key given
    to Authorize in the browser's local storage for good (an admin key, on whatever machine opened the page), and
    read 1.7 MB from disk on the event loop for each request of its script, with no caching."""
    from importlib.resources import files

    from fastapi.openapi.docs import get_swagger_ui_html

    bundled = files("fastapi_swagger") / "resources"
    cached: dict[str, bytes] = {}

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> Response:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title="Grandbo API",
            swagger_js_url=f"{root}/swagger/swagger-ui-bundle.js", swagger_css_url=f"{root}/swagger/swagger-ui.css",
            swagger_favicon_url=f"{root}/swagger/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": False},  # the key lasts as long as the page
        )  # fmt: skip

    @app.get("/swagger/{name}", include_in_schema=False)
    async def swagger_file(name: str) -> Response:
        if name not in _SWAGGER_FILES:
            raise StarletteHTTPException(404)
        if name not in cached:  # read once; they change only with the installed package
            cached[name] = (bundled / name).read_bytes()
        return Response(
            cached[name], media_type=_SWAGGER_FILES[name], headers={"cache-control": "public, max-age=86400"}
        )
