"""What a restore killed halfway leaves beside the embedded store (`grandbo.db.restoring`: a whole copy of the backup,
every org's memory, which a later purge does not reach) is removed by the next open of the store, which says so (it
stayed, unsaid, until the next restore); a restore under way is neither swept by another process nor run twice at
once (a second restore removed the copy the first had proved, and the first then wrote an empty database over the
store: every org gone)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandbo.cli import app
from grandbo.store.sqlite.backup import sweep_staged
from tests.serving import until

CANARY = "restore canary entry: the session cache evicts keys under memory pressure"
ENV = {"GRANDBO_EMBEDDING_PROVIDER": "deterministic", "GRANDBO_LOG_LEVEL": "WARNING"}


def _run(home: Path, *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env={"GRANDBO_HOME": str(home), **ENV})


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An embedded store holding the canary entry, and a good backup of it beside (`good.db`)."""
    home = tmp_path / "home"
    assert _run(home, "init", "--org", "r1").exit_code == 0
    assert _run(home, "remember", "--org", "r1", "--title", CANARY, "--kind", "finding").exit_code == 0
    assert _run(home, "backup", str(tmp_path / "good.db")).exit_code == 0
    return home


def _beside(home: Path) -> list[str]:
    return sorted(path.name for path in home.iterdir() if not path.name.startswith("grandbo.db-"))


# `grandbo restore` in a process of its own that signals itself (SIGKILL, SIGSTOP) where the restore reaches a point
# of its code: EVENT ("call", "return") of the function NAME.
_RESTORE_UNTIL = """
import os, signal, sys
from grandbo.cli import app
event, name, how = sys.argv[1:4]
def at(frame, what, arg):
    if what == event and frame.f_code.co_name == name:
        sys.setprofile(None)
        os.kill(os.getpid(), getattr(signal, how))
sys.setprofile(at)
app(["restore", *sys.argv[4:]], prog_name="grandbo")
"""


def _restore_until(home: Path, backup: Path, event: str, name: str, how: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _RESTORE_UNTIL, event, name, how, str(backup)],
                            env={**os.environ, "GRANDBO_HOME": str(home), **ENV},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


@pytest.mark.parametrize(
    ("event", "name", "left"),
    [
        ("call", "_prove", ["grandbo.db.restoring"]),  # the backup copied beside the store, not proved yet
        ("call", "_remove", ["grandbo.db.before-restore.partial", "grandbo.db.restoring"]),  # the store copied too
        ("call", "_fit", ["grandbo.db.before-restore", "grandbo.db.restoring"]),  # at the write over the store
    ],
    ids=["copied", "keeping", "writing"],
)
def test_a_restore_killed_halfway_leaves_a_copy_the_next_start_removes_and_says(home, tmp_path, event, name, left):
    restoring = _restore_until(home, tmp_path / "good.db", event, name, "SIGKILL")
    assert restoring.wait(timeout=120) == -signal.SIGKILL
    assert _beside(home) == ["grandbo.db", *left]  # what the kill left beside the store
    with closing(sqlite3.connect(home / "grandbo.db.restoring")) as copy:  # a whole Grandbo store, to look at
        assert copy.execute("SELECT count(*) FROM orgs").fetchone() == (1,)

    listed = _run(home, "orgs", "list")  # the next start: any command, `grandbo serve`, a worker
    assert listed.exit_code == 0, listed.output
    assert "store.restore_leftover_removed" in listed.stderr and "removed='grandbo.db" in listed.stderr
    assert "grandbo.db.restoring" in listed.stderr, listed.stderr
    assert "a restore that was cut short: a copy of a backup, not the store" in listed.stderr
    assert _beside(home) == ["grandbo.db", *[n for n in left if n == "grandbo.db.before-restore"]]
    recalled = _run(home, "recall", CANARY, "--org", "r1")  # the store is as the kill left it: untouched
    assert recalled.exit_code == 0 and "restore canary entry" in recalled.stdout, recalled.output
    assert "restore_leftover" not in recalled.stderr  # nothing left, nothing said


def _stopped(process: subprocess.Popen[bytes]) -> bool:
    assert process.poll() is None, "the restore ended"
    return Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()[0] == "T"


def test_a_restore_under_way_is_not_swept_by_a_start_and_a_second_one_is_refused(home, tmp_path):
    restoring = _restore_until(home, tmp_path / "good.db", "call", "_prove", "SIGSTOP")
    try:
        until(lambda: _stopped(restoring), "the restore stopped with its copy made")
        assert _run(home, "orgs", "list").exit_code == 0  # a start while it runs
        assert sweep_staged(home / "grandbo.db") is None
        assert (home / "grandbo.db.restoring").exists()  # its copy, left to it
        second = _run(home, "restore", str(tmp_path / "good.db"))
        assert second.exit_code == 2 and "Traceback" not in second.output, second.output
        assert "Another `grandbo restore` of" in second.stderr and "one restore at a time" in second.stderr
        assert (home / "grandbo.db.restoring").exists()
    finally:
        restoring.send_signal(signal.SIGCONT)
    assert restoring.wait(timeout=120) == 0  # the first one ends well, with its copy in place
    assert _beside(home) == ["grandbo.db", "grandbo.db.before-restore"]
