"""Migration 32 on an embedded store written before it: every org's events numbered again from 1 in the order they
were written, each entry's and index image's mark moved with them, nothing lost (`test_seq_per_org.py` has why)."""

from __future__ import annotations

import random

import pytest

from grandbo.eval.bench import synthetic_entry
from grandbo.service import Grandbo
from tests.conftest import undo_migration
from tests.test_index_images import TOPICS, _answers

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])  # Postgres numbered them per org from its first release

# The layout before migration 32, put back from the one after it: one store-wide sequence (AUTOINCREMENT), each event
# numbered by its place in the store's write order (the table's rowid, which keeps the gaps a dropped org left).
_TRIGGERS = [
    f"""CREATE TRIGGER memory_events_append_only_{op.lower()} BEFORE {op} ON memory_events
    WHEN NOT EXISTS (SELECT 1 FROM log_erasures WHERE org_id = OLD.org_id)
    BEGIN SELECT RAISE(ABORT, 'memory_events is append-only'); END"""
    for op in ("UPDATE", "DELETE")
]
STORE_WIDE = [
    "CREATE TABLE store_wide (seq INTEGER PRIMARY KEY AUTOINCREMENT, org_id TEXT NOT NULL REFERENCES orgs (org_id), "
    "entry_id TEXT NOT NULL, type TEXT NOT NULL, payload TEXT NOT NULL, actor TEXT NOT NULL, at TEXT NOT NULL)",
    "INSERT INTO store_wide SELECT rowid, org_id, entry_id, type, payload, actor, at FROM memory_events ORDER BY rowid",
    *[
        f"UPDATE {table} SET {column} = coalesce((SELECT e.rowid FROM memory_events e "
        f"WHERE e.org_id = {table}.org_id AND e.seq = {table}.{column}), 0)"
        for table, column in (("memory_entries", "seq"), ("index_images", "entry_seq"))
    ],
    "DROP TRIGGER memory_events_append_only_update",
    "DROP TRIGGER memory_events_append_only_delete",
    "DROP TABLE memory_events",
    "ALTER TABLE store_wide RENAME TO memory_events",
    "CREATE INDEX memory_events_by_org ON memory_events (org_id, seq)",
    "CREATE INDEX memory_events_by_entry ON memory_events (org_id, entry_id, seq)",
    "CREATE INDEX memory_events_purged ON memory_events (org_id, seq) WHERE type = 'purged'",
    *_TRIGGERS,
]
ORGS = ("alpha", "beta")


def _interleaved(grandbo: Grandbo) -> None:
    """Two orgs' writes interleaved, a third org's between them dropped (a gap in the numbers), every kind of event."""
    rng = random.Random(32)
    alpha, beta = grandbo.org("alpha", create=True), grandbo.org("beta", create=True)
    for start in range(0, 300, 100):
        for org, memory in (("alpha", alpha), ("beta", beta)):
            memory.remember_many(
                [synthetic_entry(rng, n).model_copy(update={"id": f"{org}-{n}"}) for n in range(start, start + 100)]
            )
        if start == 100:
            grandbo.org("gamma", create=True).remember_many([synthetic_entry(rng, n) for n in range(20)])
    grandbo.drop_org("gamma")
    for memory in (alpha, beta):
        memory.recall(TOPICS[0], 10)  # each org's index, saved as an image on closing (at its marks then)
    alpha.remember({"id": "alpha-late", "title": "Alpha payments gateway timeouts", "body": "After a rotation."})
    beta.correct("beta-3", {"body": "Corrected: the consumer group rebalanced."}, reason="detail")
    alpha.retire("alpha-5", reason="resolved")
    beta.purge("beta-7", reason="leaked secret", actor="admin")
    alpha.correct("alpha-9", {"title": "Corrected title"}, reason="detail")


def _logs(raw) -> dict[str, list[tuple[object, ...]]]:
    """Each org's events in their order, their numbers apart: (seq, entry id, type, payload)."""
    return {org: raw("SELECT seq, entry_id, type, payload FROM memory_events WHERE org_id = %s ORDER BY seq", (org,))
            for org in ORGS}  # fmt: skip


def test_events_are_numbered_per_org_in_write_order_on_an_existing_store(settings, raw):
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        _interleaved(grandbo)
        seen = {org: {e.id: e for e in grandbo.org(org).entries(include_inactive=True)} for org in ORGS}
    upgrade = undo_migration(settings, 32, *STORE_WIDE)
    before = _logs(raw)
    alpha_seqs = [event[0] for event in before["alpha"]]
    assert alpha_seqs[-1] > len(alpha_seqs) + len(before["beta"])  # store-wide, interleaved, past gamma's gap
    marked = {(org, entry_id): seq for org, entry_id, seq in raw("SELECT org_id, entry_id, seq FROM memory_entries")}
    images = dict(raw("SELECT org_id, entry_seq FROM index_images"))
    assert set(images) == set(ORGS)
    # What each number is, per org, after the migration: its place in the org's own log.
    place = {org: {event[0]: n for n, event in enumerate(before[org], start=1)} for org in ORGS}

    with Grandbo.open(upgrade) as upgraded:
        assert 32 in upgraded._store.schema_versions()
        after = _logs(raw)
        for org in ORGS:
            assert [event[0] for event in after[org]] == list(range(1, len(before[org]) + 1))
            assert [event[1:] for event in after[org]] == [event[1:] for event in before[org]]
            histories: dict[str, list[int]] = {}
            for seq, entry_id, *_ in before[org]:
                histories.setdefault(entry_id, []).append(place[org][seq])
            memory = upgraded.org(org)
            entries = {e.id: e for e in memory.entries(include_inactive=True)}
            assert entries == seen[org]  # every entry as it was written, its number the one it was first given
            for entry_id, entry in entries.items():
                assert entry.seq == place[org][marked[org, entry_id]]
                assert [event.seq for event in memory.history(entry_id)] == histories[entry_id]
        assert dict(raw("SELECT org_id, entry_seq FROM index_images")) == {
            org: place[org][seq] for org, seq in images.items()
        }
        loaded = {org: _answers(upgraded, org) for org in ORGS}
        assert (upgraded._keeper.counts["loaded"], upgraded._keeper.counts["built"]) == (2, 0)
    raw("DELETE FROM index_images")
    with Grandbo.open(settings) as rebuilt:  # the images loaded answer as indexes built from the renumbered rows
        for org in ORGS:
            assert _answers(rebuilt, org) == loaded[org]
        assert rebuilt.org("alpha").remember({"title": "Alpha after the upgrade"}).seq == len(before["alpha"]) + 1


def test_the_upgrade_leaves_no_log_of_what_it_wrote_again(settings):
    """Migration 32 writes every event, entry and index image again, and the write-ahead log held those pages (1.2 GB
    for 300,000 events, docs/benchmarks.md) for as long as any process kept the store open: it is emptied once the
    store is migrated."""
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        _interleaved(grandbo)
    upgrade = undo_migration(settings, 32, *STORE_WIDE)
    with Grandbo.open(upgrade) as upgraded:
        assert 32 in upgraded._store.schema_versions()
        assert (settings.home / "grandbo.db-wal").stat().st_size == 0
        upgraded.org("alpha").remember({"title": "Alpha after the upgrade"})  # written and read as before
        assert upgraded.org("alpha").get("alpha-late") is not None
