"""A failure no handler expected, on a real server: the client gets the error shape (the console a page), the
operator a logged traceback, and the connection keeps serving.

The failure is real: a table the write needs is renamed away by another connection (a damaged store), so the
write fails with the driver's own error. A lock held past the busy timeout, which was this failure before, is now
an expected one: store_busy, 503, with what to do."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlencode

import pytest
import structlog

from tests.serving import OneConnection, serving
from tests.test_console_http import csrf_of, signed_in

pytestmark = [pytest.mark.parametrize("backend", ["sqlite"], indirect=True), pytest.mark.brief_lock_waits]


@contextmanager
def table_missing(settings, table: str) -> Iterator[None]:  # type: ignore[no-untyped-def]
    outside = sqlite3.connect(settings.home / "grandbo.db", isolation_level=None)
    outside.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
    try:
        yield
    finally:
        outside.execute(f"ALTER TABLE {table}_away RENAME TO {table}")
        outside.close()


@contextmanager
def file_locked(settings) -> Iterator[None]:  # type: ignore[no-untyped-def]
    blocker = sqlite3.connect(settings.home / "grandbo.db", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_an_unexpected_failure_answers_the_error_shape_and_the_connection_serves_on(grandbo, settings):
    """Starlette answered the 500 and raised the error again; uvicorn then closed the connection, so the next
    request on it (httpx's pooled connection, or one sent behind it) was reset, never answered."""
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    body = json.dumps({"title": "Disk full on db-1", "body": "the WAL grew past the volume"}).encode()
    with serving(grandbo) as served, structlog.testing.capture_logs() as logs:
        client = OneConnection(served.url)
        with table_missing(settings, "memory_entries"):
            failed = client.request("POST", "/v1/memories", body, headers)
        after = client.request("POST", "/v1/memories", body, headers)  # the same connection, the store free again
        client.close()
    assert failed.status_code == 500 and failed.headers["content-type"] == "application/json"
    assert failed.json() == {"error": {"type": "internal", "message": "Grandbo failed to answer this request.",
                                       "remedy": "Retry; if it persists, see the server log.", "detail": {}}}  # fmt: skip
    assert "Traceback" not in failed.text and "memory_entries" not in failed.text
    assert after.status_code == 201 and memory.get(after.json()["id"]).title == "Disk full on db-1"
    (logged,) = [line for line in logs if line["event"] == "http.unexpected_error"]
    assert logged["route"] == "/v1/memories" and logged["org"] == "acme" and "no such table" in logged["error"]
    assert isinstance(logged["exc_info"], sqlite3.OperationalError)  # the operator's traceback


def test_an_unexpected_failure_of_a_console_page_is_a_page_and_the_session_serves_on(grandbo, settings):
    alpha = grandbo.org("alpha", create=True)
    _, key = alpha.keys.create("write")
    with serving(grandbo) as served:
        browser = signed_in(served, key)
        csrf = csrf_of(browser)
        cookies = "; ".join(f"{name}={value}" for name, value in browser.cookies.items())
        form = {"Cookie": cookies, "Content-Type": "application/x-www-form-urlencoded"}
        client = OneConnection(served.url)
        with table_missing(settings, "memory_entries"):
            failed = client.request(
                "POST", "/ui/memory", urlencode({"title": "Disk full", "csrf": csrf}).encode(), form
            )
        page = client.request("GET", "/ui/memory", None, {"Cookie": cookies})
        client.close()
    assert failed.status_code == 500 and failed.headers["content-type"].startswith("text/html")
    assert "Grandbo failed to answer this request. Retry" in failed.text and "<h1>This page failed</h1>" in failed.text
    assert "Traceback" not in failed.text and "memory_entries" not in failed.text
    assert failed.headers["content-security-policy"].startswith("default-src 'none'")  # the console's own headers
    assert page.status_code == 200 and "Sign out" in page.text  # still signed in, on the same connection


def test_a_store_locked_past_the_busy_timeout_is_a_503_that_says_what_to_do(grandbo, settings):
    """It was the driver's bare "database is locked": a 500 over the API and a traceback in the CLI."""
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    body = json.dumps({"title": "Disk full on db-1", "body": "the WAL grew past the volume"}).encode()
    with serving(grandbo) as served:
        client = OneConnection(served.url)
        with file_locked(settings):
            busy = client.request("POST", "/v1/memories", body, headers)
        after = client.request("POST", "/v1/memories", body, headers)
        client.close()
    assert busy.status_code == 503
    error = busy.json()["error"]
    assert error["type"] == "store_busy" and "nothing was written" in error["message"]
    assert "Retry when" in error["remedy"] and str(settings.home) not in busy.text
    assert after.status_code == 201 and memory.stats().total == 1  # the refused write left nothing behind


def test_the_cli_says_the_store_is_busy_instead_of_a_traceback(settings, monkeypatch):
    from typer.testing import CliRunner

    from grandbo.cli import app

    monkeypatch.setenv("GRANDBO_HOME", str(settings.home))
    runner = CliRunner()
    assert runner.invoke(app, ["init", "--embedding", "deterministic"]).exit_code == 0
    with file_locked(settings):
        result = runner.invoke(app, ["remember", "--title", "Disk full", "--body", "on db-1", "--kind", "fact"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)  # no traceback: an exit
    assert "is busy" in result.stderr and "Retry when" in result.stderr
