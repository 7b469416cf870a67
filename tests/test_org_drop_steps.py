"""The embedded store drops an organization in steps of a few hundred rows, each its own write, so that the
file's only write lock is never held for the whole of a large org's deletion; the org is gone from the first
step, a drop cut short is finished when the store is next opened, and an org created again under the same name
finishes it first."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading

import pytest

from grandbo.errors import NotAuthorizedError, NotFoundError
from grandbo.service import Grandbo
from grandbo.store.base import CREDENTIALS, ORG_TABLES
from grandbo.store.sqlite import images, orgs
from grandbo.store.sqlite.store import SQLiteStore
from grandbo.tiers import keys
from grandbo.tiers.topology import Service

embedded = pytest.mark.parametrize("backend", ["sqlite"])


class _CutShort(Exception):
    """A crash in the middle of a drop."""


def _rows(settings, org: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    with sqlite3.connect(settings.home / "grandbo.db") as db:
        return {t: db.execute(f"SELECT count(*) FROM {t} WHERE org_id = ?", (org,)).fetchone()[0] for t in ORG_TABLES}


def _marked(settings) -> list[str]:  # type: ignore[no-untyped-def]
    with sqlite3.connect(settings.home / "grandbo.db") as db:
        return [key for (key,) in db.execute("SELECT key FROM store_meta WHERE key LIKE 'org_dropping:%'")]


def _seed(grandbo: Grandbo, org: str, entries: int) -> str:
    memory = grandbo.org(org, create=True)
    memory.remember_many([{"title": f"{org} walrus-cache stampede {n}", "body": "old"} for n in range(entries)])
    memory.catalog.put([Service(name=f"{org}-api")], actor="t")
    memory.recall("walrus-cache stampede after a cold start")  # an index kept, and its image saved at close
    return memory.keys.create("read", name="k")[1]


def _cut_short(grandbo: Grandbo, monkeypatch: pytest.MonkeyPatch, org: str, steps: int) -> None:
    """Drop `org` in steps of 4 rows, and "crash" after `steps` of them (every patch undone after)."""
    monkeypatch.setattr(orgs, "DROP_ROWS", 4)
    monkeypatch.setattr(orgs, "DROP_STEP_S", 0.0)  # one statement a write
    real, done = orgs._Dropping.step, [0]

    def cut(self: orgs._Dropping, db: sqlite3.Connection) -> int:
        if done[0] == steps:
            raise _CutShort
        done[0] += 1
        return real(self, db)

    monkeypatch.setattr(orgs._Dropping, "step", cut)
    with pytest.raises(_CutShort):
        grandbo.drop_org(org)
    monkeypatch.undo()


def test_every_org_table_is_emptied_and_credentials_go_first():
    assert set(orgs._DROPPED_IN_STEPS) == set(ORG_TABLES) - {"orgs"}
    assert set(CREDENTIALS) == {keys.KEYS, keys.WEBHOOK_SECRETS}


@embedded
def test_another_orgs_write_goes_in_between_the_drops_steps(grandbo, settings, monkeypatch):
    """Before, the whole drop was one write: another org's write waited for all of it."""
    _seed(grandbo, "big", 60)
    beta = grandbo.org("beta", create=True)
    monkeypatch.setattr(orgs, "DROP_ROWS", 5)
    monkeypatch.setattr(orgs, "DROP_STEP_S", 0.0)  # one statement a write
    real, steps, landed_at = orgs._Dropping.step, [0], []

    def step(self: orgs._Dropping, db: sqlite3.Connection) -> int:
        steps[0] += 1
        if steps[0] == 3:  # inside the drop's third write: beta's write waits for it, and no longer
            threading.Thread(
                target=lambda: (beta.remember({"title": "beta's write"}), landed_at.append(steps[0]))
            ).start()
        return real(self, db)

    monkeypatch.setattr(orgs._Dropping, "step", step)
    grandbo.drop_org("big")
    assert landed_at and landed_at[0] < steps[0] - 5, (landed_at, steps)
    assert _rows(settings, "big") == dict.fromkeys(ORG_TABLES, 0) and _marked(settings) == []
    assert [e.title for e in beta.entries()] == ["beta's write"]


@embedded
def test_a_drop_cut_short_has_taken_the_org_and_is_finished_at_the_next_open(grandbo, settings, monkeypatch):
    key = _seed(grandbo, "big", 30)
    _seed(grandbo, "other", 3)
    _cut_short(grandbo, monkeypatch, "big", 3)
    left = _rows(settings, "big")
    assert left["orgs"] == 0 and sum(left.values()) > 0 and _marked(settings) == ["org_dropping:big"]
    with Grandbo.open(settings) as other:  # another process, right after: the org is gone, its key with it
        assert "big" not in other.orgs()
        with pytest.raises(NotAuthorizedError):
            other.authenticate(key)
        with pytest.raises(NotFoundError):
            other.org("big")
    with Grandbo.open(settings) as reopened:  # an open while the drop may still be going on leaves it to it
        assert _marked(settings) == ["org_dropping:big"]
    monkeypatch.setattr(orgs, "DROP_STALE_S", 0.0)  # its last step long ago: cut short
    with Grandbo.open(settings) as reopened:  # the next open finishes it
        assert reopened.orgs() == ["other"]
        assert reopened.org("other").stats().total == 3
    assert _rows(settings, "big") == dict.fromkeys(ORG_TABLES, 0) and _marked(settings) == []


@pytest.mark.org_made_again_at_once
@embedded
def test_an_org_created_again_finishes_the_drop_first(grandbo, settings, monkeypatch):
    _seed(grandbo, "acme", 30)
    _cut_short(grandbo, monkeypatch, "acme", 2)
    new = grandbo.org("acme", create=True)
    new.remember({"title": "the new org's own entry"})
    assert [e.title for e in new.entries()] == ["the new org's own entry"]
    assert new.recall("walrus-cache stampede after a cold start").hits == [] and new.catalog.topology().services == {}
    assert _marked(settings) == []
    assert {t: n for t, n in _rows(settings, "acme").items() if n} == {
        "orgs": 1, "memory_entries": 1, "memory_events": 1, "entry_vectors": 1
    }  # fmt: skip


@embedded
def test_foreign_keys_hold_again_after_a_drop(grandbo, settings):
    _seed(grandbo, "acme", 3)
    memory = grandbo.org("acme")
    grandbo.drop_org("acme")
    with pytest.raises(NotFoundError):  # a handle taken before: its write is refused
        memory.remember({"title": "late"})
    store = grandbo._store
    assert tuple(store._db.execute("PRAGMA foreign_keys").fetchone()) == (1,)
    # A row of an org that does not exist is refused by the file itself.
    with pytest.raises(sqlite3.IntegrityError), store._write() as db:
        db.execute("INSERT INTO documents (org_id, collection, doc_id, data, version, updated_at) "
                   "VALUES ('acme', 'notes', 'x', '{}', 1, '2026-12-06T00:00:00+00:00')")  # fmt: skip


@embedded
def test_dropping_an_org_that_does_not_exist_changes_nothing(grandbo, settings):
    _seed(grandbo, "acme", 2)
    before = _rows(settings, "acme")
    grandbo.drop_org("ghost")
    assert _rows(settings, "acme") == before and _marked(settings) == []


@embedded
def test_nothing_of_a_dropped_org_is_left_in_the_file(settings, monkeypatch):
    """Its rows and its index image (zeroed in place a piece at a time, then deleted) leave no byte of its text in
    the store's file or its write-ahead log."""
    monkeypatch.setattr(images, "IMAGE_PIECE", 4096)  # the image in many pieces
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember_many([{"title": f"zorblaxian flux capacitor {n} overheats", "body": "quuxwidget"}
                              for n in range(200)])  # fmt: skip
        assert memory.recall("zorblaxian flux capacitor overheats again").hits  # its index, saved at close
        grandbo.org("beta", create=True).remember({"title": "beta's own entry"})
    with Grandbo.open(settings) as grandbo:
        with sqlite3.connect(settings.home / "grandbo.db") as db:
            assert db.execute("SELECT length(data) FROM index_images WHERE org_id = 'acme'").fetchone()[0] > 8192
        grandbo.drop_org("acme")
        files = [settings.home / name for name in ("grandbo.db", "grandbo.db-wal")]
        left = b"".join(path.read_bytes() for path in files if path.exists())
    assert b"zorblaxian" not in left and b"quuxwidget" not in left
    assert b"beta's own entry" in left


@embedded
def test_an_org_created_while_its_drop_starts_keeps_its_own_rows(grandbo, settings, monkeypatch):
    """The creation read no drop's mark, then the drop's first write committed, then the creation inserted the org:
    the drop's later steps deleted the new org's rows with the old one's (a fresh-eyes review's repro). The mark is
    now read again in the creation's own write, and a marked drop is finished before the org is made."""
    _seed(grandbo, "acme", 20)
    store = grandbo._store
    real = orgs.Orgs._finish_drop
    checked, dropped, created = threading.Event(), threading.Event(), threading.Event()

    def finish(self: orgs.Orgs, org_id: str) -> None:
        if threading.current_thread().name == "creator":
            real(self, org_id)  # no mark yet: the drop starts right after this read
            checked.set()
            dropped.wait(10)
        elif threading.current_thread().name == "dropper":
            dropped.set()  # its first write has committed
            created.wait(10)  # its steps come after the new org wrote
            real(self, org_id)
        else:
            real(self, org_id)

    monkeypatch.setattr(orgs.Orgs, "_finish_drop", finish)

    def create() -> None:
        store.ensure_org("acme")
        grandbo.org("acme", create=True).remember({"title": "the new org's entry"})
        created.set()

    def drop() -> None:
        checked.wait(10)
        store.drop_org("acme")

    threads = [threading.Thread(target=create, name="creator"), threading.Thread(target=drop, name="dropper")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    monkeypatch.undo()
    rows = _rows(settings, "acme")
    assert rows["orgs"] == 1 and rows["memory_entries"] == 1, rows
    assert [e.title for e in grandbo.org("acme").entries()] == ["the new org's entry"] and _marked(settings) == []


@embedded
def test_the_worker_finishes_a_drop_cut_short_in_a_process_restarted_at_once(grandbo, settings, monkeypatch):
    """At open only a drop whose last step is 30 s old is finished (one going on in another process is left to it):
    a process restarted at once after the crash left the dropped org's rows in the file until some later open."""
    _seed(grandbo, "big", 30)
    _cut_short(grandbo, monkeypatch, "big", 2)
    with Grandbo.open(settings) as restarted:
        assert _marked(settings) == ["org_dropping:big"]  # too recent for the open
        assert restarted._store.maintain() == []  # nor for the worker, yet
        monkeypatch.setattr(orgs, "DROP_STALE_S", 0.0)
        monkeypatch.setattr(SQLiteStore, "MAINTAIN_EVERY_S", 0.0)
        assert restarted._store.maintain() == ["big"]
    assert _rows(settings, "big") == dict.fromkeys(ORG_TABLES, 0) and _marked(settings) == []


# `grandbo orgs delete` in a process of its own that kills itself (SIGKILL) at its drop's first step: the org's row
# went (the drop's first write committed), every other row of it is left.
_KILLED_AT_THE_FIRST_STEP = """
import os, signal, sys
from grandbo.cli import app
def at(frame, what, arg):
    if what == "call" and frame.f_code.co_name == "step" and frame.f_code.co_filename.endswith("orgs.py"):
        os.kill(os.getpid(), signal.SIGKILL)
sys.setprofile(at)
app(["orgs", "delete", sys.argv[1], "--yes"], prog_name="grandbo")
"""


@embedded
def test_a_drop_killed_mid_way_is_finished_by_the_next_command_at_once(grandbo, settings):
    """Probe 32: a drop killed -9 left the dropped org's rows (its entries' text) in the file through every command
    run in the next 30 s (`DROP_STALE_S`: its process might still be at it); its process is proved gone now."""
    _seed(grandbo, "big", 30)
    _seed(grandbo, "other", 3)
    env = {**os.environ, "GRANDBO_HOME": str(settings.home)}
    killed = subprocess.run([sys.executable, "-c", _KILLED_AT_THE_FIRST_STEP, "big"], env=env, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert _rows(settings, "big")["memory_entries"] == 30 and _marked(settings) == ["org_dropping:big"]
    stats = subprocess.run([sys.executable, "-m", "grandbo", "stats", "--org", "other"], env=env, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert stats.returncode == 0, stats.stderr[-2000:]
    assert _rows(settings, "big") == dict.fromkeys(ORG_TABLES, 0) and _marked(settings) == []
