"""A full disk under the embedded store is a clear error naming the remedy: 507 `store_full` over REST (and
`/readyz` says writes are refused), exit 2 and one line on the CLI, no partial file left.

Two ways to fill it, both SQLite's real error path: `PRAGMA max_page_count` on the serving store's connection (a
write that needs a new page gets SQLITE_FULL, as from a full disk), and, where the machine lets an unprivileged
user mount one (`unshare -rm`), a real tmpfs filled to the last byte."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grandbo.config import Settings
from grandbo.service import Grandbo
from tests.serving import serving

pytestmark = pytest.mark.timeout(180)


def test_a_full_store_answers_507_over_rest_and_readyz_says_so(tmp_path):
    settings = Settings(home=tmp_path / "home")
    with Grandbo.init(settings, embedding="deterministic"):
        pass
    with Grandbo.open(settings, background=True) as grandbo, serving(grandbo) as served:
        memory = grandbo.org("acme", create=True)
        _, key = memory.keys.create("write", name="test", actor="test")
        db = grandbo._store._db  # type: ignore[attr-defined]  # the embedded store's one connection
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        db.execute(f"PRAGMA max_page_count = {pages}")  # not one page more: the next new page is a full disk
        big = {"title": "postmortem of the storage incident", "body": "disk latency " * 2000}
        with served.client(key) as client:
            refused = client.post("/v1/memories", json=big)
            assert refused.status_code == 507, refused.text
            error = refused.json()["error"]
            assert error["type"] == "store_full" and "Free space" in error["remedy"] and error["message"]
            assert set(error) == {"type", "message", "remedy", "detail"}
            ready = client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["status"] == "degraded", ready.text
            assert ready.json()["store"]["writable"] is False and ready.json()["store"]["error"] == "store_full"
            assert client.get("/v1/stats").status_code == 200  # reads go on
            assert client.get("/v1/stats").json()["total"] == 0  # and nothing of the refused write was kept
            db.execute("PRAGMA max_page_count = 1073741823")  # space freed
            written = client.post("/v1/memories", json=big)
            assert written.status_code == 201, written.text
            assert client.get("/readyz").json()["status"] == "ready"


def _can_mount_tmpfs(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe}"],
                          capture_output=True, check=False)  # fmt: skip
    return done.returncode == 0


SCRIPT = """
set -u
mount -t tmpfs -o size=1m tmpfs "$FULL"
run() {{ "{python}" -m grandbo "$@" >"$FULL.$1.out" 2>"$FULL.$1.err"; echo $? >"$FULL.$1.code"; }}
# the second store lives on the small disk, made while it has room, then the disk is filled to the last byte
GRANDBO_HOME="$FULL/home" "{python}" -m grandbo init --embedding deterministic >/dev/null
GRANDBO_HOME="$FULL/home" "{python}" -m grandbo orgs create acme >/dev/null
dd if=/dev/zero of="$FULL/filler" bs=4k 2>/dev/null
run backup "$FULL/backup.db"
GRANDBO_HOME="$FULL/home" run remember --org acme --title "checkout latency after the deploy"
GRANDBO_HOME="$FULL/home" run keys create --org acme --scope read
ls -A "$FULL" > "$FULL.listing"
"""


def test_a_full_disk_is_one_line_and_exit_2_on_the_cli_and_leaves_no_partial_file(tmp_path):
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("this machine lets no unprivileged user mount a tmpfs (unshare -rm)")
    home = tmp_path / "home"  # the first store, on the roomy disk: its backup goes to the full one
    with Grandbo.init(Settings(home=home), embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "disk latency on the ledger database"})
    full = tmp_path / "full"
    full.mkdir()
    script = SCRIPT.format(python=sys.executable)
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "FULL": str(full), "GRANDBO_HOME": str(home),
           "PYTHONPATH": ":".join(sys.path)}  # fmt: skip
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=150, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for command in ("backup", "remember", "keys"):
        code = (tmp_path / f"full.{command}.code").read_text().strip()
        err = (tmp_path / f"full.{command}.err").read_text()
        assert code == "2", (command, code, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (command, err)
        assert "is full" in lines[0] and "Free space" in lines[0], (command, err)
        assert "Traceback" not in err
    listing = (tmp_path / "full.listing").read_text().split()
    assert not [name for name in listing if name.startswith("backup.db")], listing  # no backup, no .partial


EXPORT_SCRIPT = """
set -u
mount -t tmpfs -o size=1m tmpfs "$FULL"
run() {{ label=$1; shift; "{python}" -m grandbo "$@" >"$FULL.$label.out" 2>"$FULL.$label.err"; echo $? >"$FULL.$label.code"; }}
run first export --org acme "$FULL/acme.jsonl"
cp "$FULL/acme.jsonl" "$FULL.before"
dd if=/dev/zero of="$FULL/filler" bs=4k 2>/dev/null
run again export --org acme "$FULL/acme.jsonl"
run entries export --entries --org acme "$FULL/new.jsonl"
cp "$FULL/acme.jsonl" "$FULL.after"
ls -A "$FULL" > "$FULL.listing"
"""


def test_an_export_onto_a_full_disk_names_the_file_and_leaves_the_last_one_whole(tmp_path):
    # Was "error: No space left on device. Check the path and its permissions." (probe 20b).
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("this machine lets no unprivileged user mount a tmpfs (unshare -rm)")
    home = tmp_path / "home"  # the store, on the roomy disk: the export goes to the small one
    with Grandbo.init(Settings(home=home), embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "disk latency on the ledger database"})
    full = tmp_path / "full"
    full.mkdir()
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "FULL": str(full), "GRANDBO_HOME": str(home),
           "PYTHONPATH": ":".join(sys.path)}  # fmt: skip
    done = subprocess.run(["unshare", "-rm", "sh", "-c", EXPORT_SCRIPT.format(python=sys.executable)], env=env,
                          capture_output=True, text=True, timeout=150, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "full.first.code").read_text().strip() == "0"
    for label, name, kept in (("again", "acme.jsonl", "acme.jsonl is as it was"),
                              ("entries", "new.jsonl", "no part of it is left there")):  # fmt: skip
        assert (tmp_path / f"full.{label}.code").read_text().strip() == "2"
        (line,) = (tmp_path / f"full.{label}.err").read_text().strip().splitlines()
        assert line.startswith(f"error: Cannot write the export to {full / name}: the disk holding it is full "
                               f"(no space left on device). Nothing of it was written ({kept}).")  # fmt: skip
    assert sorted((tmp_path / "full.listing").read_text().split()) == ["acme.jsonl", "filler"]  # no .partial
    assert (tmp_path / "full.after").read_bytes() == (tmp_path / "full.before").read_bytes()
