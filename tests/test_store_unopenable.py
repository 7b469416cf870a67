"""An embedded store that cannot be opened for writing is one line and exit 2, never a traceback (probe 20b D1, D2):
a store on a read-only filesystem, or one whose folder the user cannot write (a restored copy owned by another
user), failed in SQLite's first PRAGMA with a 40-frame traceback from every command, `serve` and `backup` included;
GRANDBO_HOME naming a file said "not initialized, run `grandbo init`", which then failed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from grandbo.cli import app
from grandbo.config import Settings
from grandbo.errors import ConfigError, StoreUnavailableError
from grandbo.service import Grandbo


def _run(home, *args):  # type: ignore[no-untyped-def]
    env = {"GRANDBO_HOME": str(home), "GRANDBO_EMBEDDING_PROVIDER": "deterministic"}
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def unwritable(tmp_path):  # type: ignore[no-untyped-def]
    """An initialized store where SQLite cannot make its -wal and -shm files, as on a read-only mount: folders
    stand where they go (the tests run as root here, whom no mode bit stops)."""
    home = tmp_path / "home"
    with Grandbo.init(Settings(home=home), embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "disk latency on the ledger database"})
    for part in ("grandbo.db-wal", "grandbo.db-shm"):
        (home / part).unlink(missing_ok=True)
        (home / part).mkdir()
    return home


def test_a_store_sqlite_cannot_write_beside_is_one_line_with_the_remedy(unwritable, tmp_path):
    with pytest.raises(StoreUnavailableError, match="needs its file and its folder writable"):
        Grandbo.open(Settings(home=unwritable))
    for args in (
        ["stats", "--org", "acme"],
        ["backup", str(tmp_path / "copy.db")],
        ["recall", "disk", "--org", "acme"],
    ):
        result = _run(unwritable, *args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "read-write" in lines[0] and "chown" in lines[0], (args, result.stderr)
    assert not (tmp_path / "copy.db").exists()
    env = {**os.environ, "GRANDBO_HOME": str(unwritable), "GRANDBO_EMBEDDING_PROVIDER": "deterministic"}
    served = subprocess.run([sys.executable, "-m", "grandbo", "serve", "--port", "1"], env=env, capture_output=True,
                            text=True, timeout=120, check=False)  # fmt: skip
    assert served.returncode == 2 and "Traceback" not in served.stderr, served.stderr
    assert "needs its file and its folder writable" in served.stderr


def test_a_home_that_is_a_file_is_said_so_by_every_command(tmp_path):
    home = tmp_path / "afile"
    home.write_text("not a folder\n")
    with pytest.raises(ConfigError, match="is a file"):
        Grandbo.open(Settings(home=home))
    for args in (["stats"], ["init", "--embedding", "deterministic"]):
        result = _run(home, *args)
        assert result.exit_code == 2, (args, result.output)
        assert f"{home} is a file" in result.stderr and "GRANDBO_HOME" in result.stderr, (args, result.stderr)
        assert "not initialized" not in result.stderr
    assert home.read_text() == "not a folder\n"


def test_a_store_file_that_is_no_database_says_so_not_chown(tmp_path):
    """Review 20: every error of SQLite's first PRAGMA was given the remedy of a read-only folder (chown it)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "grandbo.db").write_bytes(bytes(range(256)) * 32)
    result = _run(home, "stats")
    assert result.exit_code == 2 and "no SQLite database" in result.stderr and "chown" not in result.stderr


def test_a_python_linking_an_sqlite_too_old_for_the_store_says_which_and_what_to_do(tmp_path, monkeypatch):
    """Migration 33's check reads JSON with `->` (SQLite 3.38): with an older library (Ubuntu 22.04's python3.11
    links 3.37.2) the migration failed on a syntax error; the store now says what it needs before it opens."""
    import sqlite3

    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 37, 2))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.37.2")
    with pytest.raises(
        StoreUnavailableError, match=r"needs SQLite 3\.38\.0 or later; this Python links SQLite 3\.37\.2"
    ):
        Grandbo.init(Settings(home=tmp_path / "home"), embedding="deterministic")
    assert not (tmp_path / "home" / "grandbo.db").exists()
