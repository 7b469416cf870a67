"""`grandbo import` on a full disk (issue 26, disk full): it went on to split every batch and refuse each line
alike, exiting 1 with 51 lines of "refused by the store: The disk ... is full" for a file of 50. Now it stops at
the first, in one line naming the remedy, with exit 2, as `remember`, `keys create` and `backup` do."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grandbo.config import Settings
from grandbo.errors import StoreFullError
from grandbo.service import Grandbo
from tests.test_disk_full import _can_mount_tmpfs

pytestmark = pytest.mark.timeout(180)

SCRIPT = """
set -u
mount -t tmpfs -o size=1m tmpfs "$FULL"
GRANDBO_HOME="$FULL/home" "{python}" -m grandbo init --embedding deterministic >/dev/null
GRANDBO_HOME="$FULL/home" "{python}" -m grandbo orgs create acme >/dev/null
dd if=/dev/zero of="$FULL/filler" bs=4k count=$(( $(df -k "$FULL" | awk 'NR==2 {{print $4}}') / 4 - 48 )) 2>/dev/null
GRANDBO_HOME="$FULL/home" "{python}" -m grandbo import --org acme "$LINES" >"$FULL.out" 2>"$FULL.err"
echo $? >"$FULL.code"
"""


def test_an_import_onto_a_full_disk_stops_at_once_in_one_line_with_exit_2(tmp_path):
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("this machine lets no unprivileged user mount a tmpfs (unshare -rm)")
    lines = tmp_path / "lines.jsonl"
    lines.write_text("".join(json.dumps({"title": f"disk latency on ledger-db {n}", "body": f"ledger{n} latency " * 800}) + "\n"
                             for n in range(50)))  # fmt: skip
    full = tmp_path / "full"
    full.mkdir()
    # no reserve (GRANDBO_DISK_RESERVE_MB), so that the write meets the full disk itself
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "FULL": str(full), "LINES": str(lines),
           "PYTHONPATH": ":".join(sys.path), "GRANDBO_DISK_RESERVE_MB": "0"}  # fmt: skip
    done = subprocess.run(["unshare", "-rm", "sh", "-c", SCRIPT.format(python=sys.executable)], env=env,
                          capture_output=True, text=True, timeout=150, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    code = (tmp_path / "full.code").read_text().strip()
    err = (tmp_path / "full.err").read_text()
    said = err.strip().splitlines()
    assert code == "2", (code, err)
    assert len(said) == 1 and said[0].startswith("error: ") and "Traceback" not in err, err
    assert "is full" in said[0] and "stopped at line" in said[0] and "Free space" in said[0], err


def test_the_library_import_stops_at_the_first_full_disk_error(tmp_path):
    settings = Settings(home=tmp_path / "home")
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        lines = tmp_path / "lines.jsonl"
        lines.write_text("".join(json.dumps({"title": f"disk latency {n}", "body": "disk latency " * 500}) + "\n"
                                 for n in range(50)))  # fmt: skip
        db = grandbo._store._db  # type: ignore[attr-defined]  # the embedded store's one connection
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        db.execute(f"PRAGMA max_page_count = {pages}")  # not one page more: the next new page is a full disk
        with pytest.raises(StoreFullError, match=r"stopped at line 1 with 0 lines stored") as raised:
            memory.import_file(lines)
        assert raised.value.detail["line"] == 1 and memory.stats().total == 0
        db.execute("PRAGMA max_page_count = 1073741823")  # space freed: a rerun imports all
        assert memory.import_file(lines).imported == 50
