"""A rolling upgrade: a process of this release, left running while a newer release migrates the store under it,
refuses to read or write it (503 store_upgraded), never goes on the way its own schema had it (probe 23a F1).

A release before migration 26, left serving an embedded store that a process of the release after it had migrated,
created orgs with incarnation 0 (the column's default), and a same-named org created after a drop with 0 again: the
newer process's handle of the dropped org filed its next write in the new org. The fence (`store.fence`) is what
the next upgrade meets."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from grandbo.errors import MigrationError, StoreUpgradedError
from grandbo.retrieval.index import IMAGE_FORMAT
from grandbo.retrieval.text import index_terms
from grandbo.service import Grandbo
from grandbo.store import fence
from grandbo.store.postgres import migrations
from grandbo.store.postgres.store import PostgresStore
from grandbo.store.sqlite.migrations import MIGRATIONS as SQLITE_MIGRATIONS
from tests.conftest import owner_url
from tests.serving import serving
from tests.test_index_images import _answers, _seed

LATER = 10_000  # a migration number no release has: a newer release's


def _migrate_as_a_newer_release(settings) -> None:  # type: ignore[no-untyped-def]
    """What a newer release's migration leaves: its number among the store's."""
    if settings.database_url:
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn:
            conn.execute("INSERT INTO schema_migrations VALUES (%s, 'a newer release', now())", (LATER,))
        return
    with sqlite3.connect(settings.home / "grandbo.db") as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (?, 'a newer release', '2027-01-01')", (LATER,))


def _undo(settings) -> None:  # type: ignore[no-untyped-def]
    if settings.database_url:
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn:
            conn.execute("DELETE FROM schema_migrations WHERE version = %s", (LATER,))


def test_a_process_refuses_a_store_a_newer_release_migrated_while_it_ran(grandbo, settings):
    acme = grandbo.org("acme", create=True)
    acme.remember({"title": "disk latency on the ledger database", "body": "iostat showed the volume saturated"})
    assert acme.recall("disk latency on the ledger database").hits
    _migrate_as_a_newer_release(settings)
    try:
        with pytest.raises(StoreUpgradedError, match=f"migrated to schema version {LATER} by a newer release") as w:
            acme.remember({"title": "written after the upgrade", "body": "by the process left behind"})
        assert w.value.status == 503 and w.value.code == "store_upgraded"
        assert "Restart this process with the release that migrated the store" in w.value.message
        with pytest.raises(StoreUpgradedError):  # a read too: it would read rows as its own schema had them
            grandbo.org("acme").recall("disk latency on the ledger database")
        with pytest.raises(StoreUpgradedError):
            grandbo.org("beta", create=True)
        with pytest.raises(StoreUpgradedError):  # any read, once the process has seen the migration
            acme.stats()
    finally:
        _undo(settings)
    if not settings.database_url:  # the file kept nothing the process left behind wrote
        with sqlite3.connect(settings.home / "grandbo.db") as conn:
            assert conn.execute("SELECT count(*) FROM memory_entries").fetchone() == (1,)
            assert conn.execute("SELECT org_id FROM orgs").fetchall() == [("acme",)]


def test_a_server_left_behind_is_not_ready_and_answers_each_request_503_store_upgraded(grandbo, settings):
    """A load balancer sends it nothing more: `/readyz` is 503, and a request that reaches it is refused whole."""
    _, key = grandbo.org("acme", create=True).keys.create("write")
    with serving(grandbo) as served, served.client(key) as client:
        assert client.get("/readyz").status_code == 200
        _migrate_as_a_newer_release(settings)
        try:
            ready = client.get("/readyz")
            assert ready.status_code == 503 and ready.json()["store"]["error"] == "store_upgraded"
            written = client.post("/v1/memories", json={"title": "written after the upgrade"})
            assert written.status_code == 503, written.text
            assert written.json()["error"]["type"] == "store_upgraded", written.text
        finally:
            _undo(settings)


def test_the_release_that_knows_the_migration_opens_the_store(settings):
    """The fence is past this release's newest migration only: its own and older ones pass."""
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "disk latency on the ledger database"})
    if not settings.database_url:
        with sqlite3.connect(settings.home / "grandbo.db") as conn:
            newest = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
        assert newest == max(version for version, _, _ in SQLITE_MIGRATIONS)
    with Grandbo.open(settings) as grandbo:
        assert grandbo.org("acme").stats().total == 1


@pytest.mark.postgres
def test_a_postgres_migration_waits_for_the_transactions_that_read_the_schema_before_it(
    pg_database, monkeypatch: pytest.MonkeyPatch
):
    """A transaction of a process that read the schema's version before a migration began ends before the migration
    changes anything (it would otherwise write, after the migration, rows the way the older schema had them); one
    after the migration reads its number and is refused."""
    older = PostgresStore(pg_database, index_terms)
    owner = owner_url(pg_database)
    later = (LATER, "a newer release", ["CREATE TABLE a_newer_release (id integer)"])
    try:
        older.ensure_org("acme")
        with older.consistent_read("acme"):
            older.marks("acme")  # the transaction has read the version: it holds schema_migrations until it ends
            monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, later])
            monkeypatch.setattr(fence, "MIGRATION_WAIT_MS", 200)  # it gives up (not to wait for the test's end)
            with pytest.raises(MigrationError, match=f"Migration {LATER} .a newer release. waited 0.2 s") as refused:
                PostgresStore(pg_database, index_terms, migrate_url=owner).close()
            assert "Run `grandbo migrate` again" in refused.value.message
            older.marks("acme")  # the transaction goes on, on the schema it read
        PostgresStore(pg_database, index_terms, migrate_url=owner).close()
        with pytest.raises(StoreUpgradedError, match=f"schema version {LATER}"):
            older.marks("acme")
    finally:
        older.close()
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS a_newer_release")
            conn.execute("DELETE FROM schema_migrations WHERE version = %s", (LATER,))


def test_an_image_a_newer_release_saved_is_rebuilt_from_the_rows_and_never_replaced(settings, raw):
    """Two releases on one store, of two image formats: the older process cannot read the newer's image, so it
    builds the index from the rows (answering as before), and leaves the image in place. It replaced it with one of
    its own format, which the newer release then could not read: every first recall of either rebuilt the index."""
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        _seed(grandbo, "acme", 300)
        before = _answers(grandbo)
    ((data,),) = raw("SELECT data FROM index_images WHERE org_id = %s", ("acme",), org="acme")
    newer = bytes(data).replace(f'"format": {IMAGE_FORMAT}'.encode(), f'"format": {IMAGE_FORMAT + 1}'.encode(), 1)
    assert newer != bytes(data)
    raw("UPDATE index_images SET data = %s WHERE org_id = %s", (newer, "acme"), org="acme")
    with Grandbo.open(settings) as grandbo:
        assert _answers(grandbo) == before  # built from the rows, not read from an image it does not know
        assert grandbo._keeper.counts["built"] == 1
        grandbo.org("acme").remember({"title": "written while the two releases serve", "kind": "finding"})
        _answers(grandbo)
    ((kept,),) = raw("SELECT data FROM index_images WHERE org_id = %s", ("acme",), org="acme")
    assert bytes(kept) == newer  # closing saved no image over the newer release's
