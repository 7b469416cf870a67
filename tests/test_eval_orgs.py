"""`grandbo eval` inside a configured Postgres store removes the temporary organizations that killed runs left
(only those, by name and age), and `grandbo orgs list` does not list evaluation orgs as the user's."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from grandbo.cli import app
from grandbo.config import Settings
from grandbo.eval.orgs import is_eval_org, new_eval_org, stale_eval_orgs
from grandbo.model import utcnow
from grandbo.service import Grandbo
from tests.conftest import reset_postgres


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(done.stdout)


@pytest.mark.postgres
def test_a_postgres_eval_removes_only_the_orgs_killed_runs_left(pg_database, tmp_path, monkeypatch):
    reset_postgres(pg_database)
    monkeypatch.setenv("GRANDBO_DATABASE_URL", pg_database)
    mine = new_eval_org().split("-")
    killed = f"eval-{mine[1]}-{_dead_pid()}-abcdef"  # this machine, a process that is gone
    running_elsewhere, legacy_recent = "eval-0f0f0f-4242-abcdef", "eval-1a2b3c4d"
    with Grandbo.init(Settings(home=tmp_path / "home", database_url=pg_database), embedding="deterministic") as g:
        for org in ("acme", "evaluation", killed, running_elsewhere, legacy_recent):
            g.create_org(org)
    runner = CliRunner()
    ran = runner.invoke(app, ["eval", "incidents", "--embedding", "deterministic", "--json"])
    assert ran.exit_code == 0, ran.stderr
    assert f"removed {killed}, the temporary organization of an evaluation that did not finish" in ran.stderr
    listed = runner.invoke(app, ["orgs", "list", "--all", "--json"])
    assert json.loads(listed.stdout) == ["acme", running_elsewhere, legacy_recent, "evaluation"]  # its own is gone too
    assert json.loads(runner.invoke(app, ["orgs", "list", "--json"]).stdout) == ["acme", legacy_recent, "evaluation"]
    text = runner.invoke(app, ["orgs", "list"]).stdout
    assert text.splitlines()[:3] == ["acme", legacy_recent, "evaluation"] and "1 temporary organization(s)" in text


def test_an_eval_org_goes_by_age_when_its_process_cannot_be_asked():
    now = utcnow()
    created = {"eval-1a2b3c4d": now - timedelta(hours=25), "eval-0f0f0f-4242-abcdef": now - timedelta(hours=25),
               "eval-99999999": now - timedelta(hours=1), "evaluation-old": now - timedelta(days=400),
               new_eval_org(): now - timedelta(days=400)}  # fmt: skip
    assert stale_eval_orgs(created, now) == ["eval-0f0f0f-4242-abcdef"]  # never a live run's own


def test_a_users_org_named_like_an_old_release_eval_org_is_never_dropped_nor_hidden():
    # Older releases named their evaluation orgs eval-<8 hex>, a shape a person's own org can have (a date is 8
    # hex digits): nothing tells such an org from a leftover, so an evaluation leaves it and orgs list shows it.
    now = utcnow()
    created = {"eval-20261130": now - timedelta(days=2), "eval-1a2b3c4d": now - timedelta(days=30)}
    assert stale_eval_orgs(created, now) == []
    assert not is_eval_org("eval-20261130") and is_eval_org(new_eval_org())
