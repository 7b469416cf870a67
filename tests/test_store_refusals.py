"""A Postgres that refuses the configuration is not an outage: `grandbo serve` and `grandbo worker` say so at once.

A wrong password (28P01), an unknown database (3D000) or role (28000), no password at all, or a URL psycopg cannot
read waited like a server that is down, by default for ever, each try saying only "cannot reach"; an unknown URL
parameter went up as a traceback. Now each is one line saying what is wrong and what to do, exit 2, while a server
that is down, starting up or shutting down is still waited for (tests/test_store_start_wait.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from typer.testing import CliRunner

from grandbo.cli import app
from grandbo.store.postgres.refusals import refusal
from tests.serving import free_port

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]  # a refusal that waited for ever fails in 2 minutes


def _with(url: str, **parts: str) -> str:
    split = urlsplit(url)
    netloc = (
        f"{parts.get('user', split.username)}:{parts.get('password', split.password)}@{split.hostname}:{split.port}"
    )
    return urlunsplit(split._replace(netloc=netloc, path=parts.get("path", split.path)))


def _env(url: str, tmp_path: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("GRANDBO_")},
        "GRANDBO_DATABASE_URL": url,
        "GRANDBO_HOME": str(tmp_path / "home"),
    }  # fmt: skip  (GRANDBO_STORE_WAIT_SECONDS unset: it waits for ever)


def _start(command: list[str], url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`grandbo COMMAND` as a process of its own."""
    return subprocess.run([sys.executable, "-m", "grandbo", *command], env=_env(url, tmp_path), text=True,
                          capture_output=True, timeout=60)  # fmt: skip


def _worker(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> subprocess.CompletedProcess[str]:
    """`grandbo worker` run in this process as `python -m grandbo worker` runs it (`grandbo.cli.main` is the app
    CliRunner invokes), with the environment `_start` gives its process; the SIGTERM and SIGINT handlers the
    worker puts in are put back after it (a second interpreter's start for each refusal, saved)."""
    for variable in [k for k in os.environ if k.startswith("GRANDBO_")]:
        monkeypatch.delenv(variable)
    for variable, value in _env(url, tmp_path).items():
        monkeypatch.setenv(variable, value)
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        ran = CliRunner().invoke(app, ["worker"])
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return subprocess.CompletedProcess(["grandbo", "worker"], ran.exit_code, ran.stdout, ran.stderr)


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_wrong_password_stops_serve_and_worker_at_once_with_one_line_saying_what_to_do(
    pg_database, tmp_path, monkeypatch, command
):
    url = _with(pg_database, password="not-the-password")
    if command == "worker":
        started = _worker(url, tmp_path, monkeypatch)
    else:
        started = _start([command, "--no-worker", "--port", str(free_port())], url, tmp_path)
    said = started.stderr.strip()
    assert started.returncode == 2 and len(said.splitlines()) == 1, said
    assert "refused the password" in said and "SQLSTATE 28P01" in said and "not an outage" in said, said
    assert "Fix the password in GRANDBO_DATABASE_URL" in said and "not-the-password" not in said, said
    assert "waits for" not in said and "Traceback" not in said, said


@pytest.mark.parametrize(
    ("parts", "said"),
    [
        ({"path": "/no_such_database"}, "SQLSTATE 3D000"),
        ({"user": "no_such_role"}, "SQLSTATE 28P01"),  # the server does not tell a missing role from a wrong password
        ({"path": "/x?bogus=1"}, 'cannot be used: invalid URI query parameter: "bogus"'),
    ],
)
def test_other_configuration_errors_stop_the_worker_at_once(pg_database, tmp_path, monkeypatch, parts, said):
    started = _worker(_with(pg_database, **parts), tmp_path, monkeypatch)
    assert started.returncode == 2 and said in started.stderr and "not an outage" in started.stderr, started.stderr
    assert len(started.stderr.strip().splitlines()) == 1 and "Traceback" not in started.stderr, started.stderr


@pytest.mark.parametrize(
    "failure",
    [
        'connection to server at "10.0.0.5", port 5432 failed: FATAL:  the database system is starting up',
        'connection to server at "10.0.0.5", port 5432 failed: FATAL:  the database system is shutting down',
        'connection to server at "10.0.0.5", port 5432 failed: FATAL:  the database system is in recovery mode',
        'connection to server at "10.0.0.5", port 5432 failed: FATAL:  sorry, too many clients already',
        'connection to server at "10.0.0.5", port 5432 failed: Connection refused',
        'connection to server at "10.0.0.5", port 5432 failed: timeout expired',
    ],
)
def test_a_server_down_starting_or_full_is_an_outage_waited_for(failure):
    assert refusal("postgresql://db", psycopg.OperationalError(f"connection failed: {failure}")) is None


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("postgresql://grandbo:pa%zz-S3cret@127.0.0.1:{port}/grandbo", "pa%zz-S3cret"),  # a % not percent-encoded
        ("postgresql://grandbo:S3cret%@127.0.0.1:{port}/grandbo", "S3cret%"),
    ],
)
def test_a_url_psycopg_cannot_read_is_refused_without_saying_its_password(tmp_path, monkeypatch, url, secret):
    started = _worker(url.format(port=free_port()), tmp_path, monkeypatch)
    said = started.stderr.strip()
    assert started.returncode == 2 and "cannot be used" in said and "not an outage" in said, said
    assert secret not in said and "S3cret" not in said, said


def test_a_store_url_of_no_known_scheme_is_refused_without_saying_its_password(tmp_path, monkeypatch):
    url = "host=127.0.0.1 user=grandbo password=S3cretWord dbname=grandbo"
    started = _worker(url, tmp_path, monkeypatch)
    assert started.returncode == 2 and "Unsupported store URL" in started.stderr, started.stderr
    assert "S3cretWord" not in started.stderr, started.stderr
