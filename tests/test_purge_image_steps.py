"""The embedded store erases an org's index image after a purge a piece at a time, each piece its own short write,
instead of deleting its megabytes in the purge's transaction: the file's only write lock is never held for a whole
image. From the purge's commit the image is never loaded; a crash before it is erased leaves it for the next open."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from grandbo.errors import StoreBusyError
from grandbo.service import Grandbo
from grandbo.store.sqlite import images
from grandbo.store.sqlite.erasure import Erasure
from grandbo.store.sqlite.store import SQLiteStore

embedded = pytest.mark.parametrize("backend", ["sqlite"])
TOPIC = "zorblaxian flux capacitor overheats again"


def _image_rows(settings) -> int:  # type: ignore[no-untyped-def]
    with sqlite3.connect(settings.home / "grandbo.db") as db:
        return int(db.execute("SELECT count(*) FROM index_images WHERE org_id = 'acme'").fetchone()[0])


def _seeded(settings) -> str:  # type: ignore[no-untyped-def]
    """An org whose index image is saved (at close), and the id of an entry holding a secret."""
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember_many([{"title": f"zorblaxian flux capacitor {n} overheats", "body": "x"} for n in range(300)])
        secret = memory.remember({"title": "token pasted by mistake", "body": "sk-live-quuxwidget-0042"})
        assert memory.recall(TOPIC).hits
        grandbo.org("beta", create=True).remember({"title": "beta's own entry"})
    assert _image_rows(settings) == 1
    return secret.id


@embedded
def test_another_orgs_write_goes_in_between_the_images_pieces(settings, monkeypatch):
    """Before, the image went in the purge's own transaction: another org's write waited for all of it."""
    secret = _seeded(settings)
    monkeypatch.setattr(images, "IMAGE_PIECE", 4096)
    real, steps, landed_at = images.ImageEraser.step, [0], []
    with Grandbo.open(settings) as grandbo:
        beta = grandbo.org("beta")

        def step(self: images.ImageEraser, db: sqlite3.Connection, rowid: int, saved_at: str) -> int:
            steps[0] += 1
            if steps[0] == 2:  # inside the second piece's write: beta's write waits for it, and no longer
                threading.Thread(target=lambda: (beta.remember({"title": "beta"}), landed_at.append(steps[0]))).start()
            return real(self, db, rowid, saved_at)

        monkeypatch.setattr(images.ImageEraser, "step", step)
        grandbo.org("acme").purge(secret, reason="a secret", actor="t")
        assert _image_rows(settings) == 0
        files = [settings.home / name for name in ("grandbo.db", "grandbo.db-wal")]
        left = b"".join(path.read_bytes() for path in files if path.exists())
    assert landed_at and landed_at[0] < steps[0] - 3, (landed_at, steps)
    assert b"quuxwidget" not in left


@embedded
def test_an_image_made_before_a_purge_is_never_loaded_and_is_erased_at_the_next_open(settings, monkeypatch):
    secret = _seeded(settings)

    def crash(self: Erasure, org_id: str | None = None) -> None:
        raise KeyboardInterrupt  # the process dies between the purge's commit and the image's erasure

    with Grandbo.open(settings) as grandbo:
        monkeypatch.setattr(Erasure, "erase_images_made_before_purges", crash)
        with pytest.raises(KeyboardInterrupt):
            grandbo.org("acme").purge(secret, reason="a secret", actor="t")
        monkeypatch.undo()
        assert _image_rows(settings) == 1  # still there, with the purged entry's words
        with grandbo._store.snapshot("acme") as snapshot:  # every process's load of the org's index
            assert snapshot.stored() is None
    with Grandbo.open(settings) as reopened:  # the next open erases it
        assert _image_rows(settings) == 0
        memory = reopened.org("acme")
        assert memory.recall(TOPIC).hits
        assert secret not in [hit.entry.id for hit in memory.recall("token pasted by mistake in a config").hits]


@embedded
def test_a_purge_whose_image_could_not_be_erased_still_succeeds_and_the_worker_erases_it(settings, monkeypatch):
    """The purge has committed when its image is erased: a failure there (the file's lock held past the busy
    timeout by another process) was the purge's error, and the image stayed until the store was next opened."""
    secret = _seeded(settings)

    def busy(self: Erasure, org_id: str | None = None) -> list[str]:
        raise StoreBusyError("The SQLite store is busy.", detail={})

    with Grandbo.open(settings) as grandbo:
        monkeypatch.setattr(Erasure, "erase_images_made_before_purges", busy)
        purged = grandbo.org("acme").purge(secret, reason="a secret", actor="t")
        monkeypatch.undo()
        assert purged.title == "[purged]" and _image_rows(settings) == 1
        monkeypatch.setattr(SQLiteStore, "MAINTAIN_EVERY_S", 0.0)
        assert grandbo._store.maintain() == ["acme"]  # the worker's maintenance, a moment later
        assert _image_rows(settings) == 0


@embedded
def test_whether_an_image_was_made_before_a_purge_reads_only_the_org_s_purges(grandbo, settings):
    """Asked on every image load and every open: it walked every event the org logged since its image (an import of
    100,000 entries since, at each CLI command). Migration 22 indexes the purges alone."""
    with sqlite3.connect(settings.home / "grandbo.db") as db:
        for query in (images.ORGS_WITH_ONE, images.MADE_BEFORE_A_PURGE.replace("?", "'acme'")):
            plan = " ".join(row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + query))
            assert "USING INDEX memory_events_purged" in plan, plan
