"""Backup and restore of the embedded store: a restore drill."""

from __future__ import annotations

import pytest

from grandbo.config import Settings
from grandbo.errors import ConfigError, StoreError
from grandbo.service import Grandbo


def _state(memory):
    return (
        [e.model_dump(mode="json") for e in memory.entries(include_inactive=True)],
        [[ev.model_dump(mode="json") for ev in memory.history(e.id)] for e in memory.entries(include_inactive=True)],
        [i.model_dump(mode="json") for i in memory.incidents.find()],
        memory.ledger.effectiveness("RB-1").attempts,
        memory.stats().readable,
    )


def test_restore_drill_brings_back_exactly_what_was_backed_up(tmp_path):
    settings = Settings(home=tmp_path / "home")
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        kept = memory.remember({"title": "redis eviction storm on the session cache", "body": "keys evicted"})
        memory.correct(kept.id, {"body": "keys evicted under allkeys-lru"}, reason="cause")
        memory.incidents.open("checkout outage", incident_id="INC-1")
        memory.ledger.record("RB-1", "succeeded")
        before = _state(memory)
        grandbo.backup(tmp_path / "backup.db")
        memory.remember({"title": "written after the backup"})
        grandbo.drop_org("acme")  # the disaster
    with Grandbo.open(settings) as grandbo:
        grandbo.restore(tmp_path / "backup.db")
        memory = grandbo.org("acme")
        assert _state(memory) == before
        assert memory.recall("redis eviction storm on the sessions").hits[0].entry.title.startswith("redis")
        memory.remember({"title": "the restored store takes writes"})
    with Grandbo.open(settings) as grandbo:  # and it is what a fresh process opens
        assert grandbo.org("acme").stats().total == 2


def test_restoring_something_that_is_not_a_backup_is_refused_and_changes_nothing(tmp_path):
    settings = Settings(home=tmp_path / "home")
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "still here after the refusal"})
        with pytest.raises(StoreError, match="not a"):
            grandbo.restore(tmp_path / "junk.db")
        assert grandbo.org("acme").stats().total == 1


def test_a_postgres_store_points_to_pg_dump(grandbo, backend, tmp_path):
    if backend == "sqlite":
        grandbo.backup(tmp_path / "b.db")
        assert (tmp_path / "b.db").stat().st_size > 0
        return
    with pytest.raises(ConfigError, match="pg_dump"):
        grandbo.backup(tmp_path / "b.dump")
