"""Backup and restore of the embedded store: a restore drill."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from grandbo.config import Settings
from grandbo.devtools.postgres import BIN_DIR
from grandbo.errors import ConfigError, InvalidInputError, MigrationError, StoreError
from grandbo.service import Grandbo
from tests.conftest import owner_url, reset_postgres


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
        kept = memory.remember(
            {
                "title": "redis eviction storm on the session cache",
                "body": "keys evicted",
                "meta": {"runbook_id": "RB-1"},
            }
        )  # the runbook its outcome counts for
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


def test_a_postgres_store_needs_a_backup_role(grandbo, backend, tmp_path):
    if backend == "sqlite":
        grandbo.backup(tmp_path / "b.db")
        assert (tmp_path / "b.db").stat().st_size > 0
        return
    with pytest.raises(ConfigError, match="GRANDBO_BACKUP_DATABASE_URL"):
        grandbo.backup(tmp_path / "b.dump")
    assert not (tmp_path / "b.dump").exists()


@pytest.mark.parametrize("where", ["under-a-file", "unwritable"])
def test_a_backup_path_that_cannot_be_written_is_refused_naming_it(grandbo, backend, tmp_path, where):
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    path = tmp_path / "notes.txt" / "b.db" if where == "under-a-file" else Path("/proc/grandbo-backup.db")
    with pytest.raises(InvalidInputError, match=f"Cannot write a backup to {path}") as caught:
        grandbo.backup(path)
    assert ("is a file, not a folder" if where == "under-a-file" else "folder you can write to") in caught.value.message


def test_a_backup_of_a_newer_release_is_refused_and_the_store_is_left_as_it_was(tmp_path):
    import sqlite3

    settings = Settings(home=tmp_path / "home")
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "the store before the restore"})
        grandbo.backup(tmp_path / "newer.db")
        with sqlite3.connect(tmp_path / "newer.db") as newer:  # what a later release's migration leaves
            newer.execute("INSERT INTO schema_migrations VALUES (99, 'from the future', '2027-01-01')")
        grandbo.org("acme").remember({"title": "written after the backup"})
        with pytest.raises(MigrationError, match=r"newer release \(schema versions \[99\].*Nothing was changed"):
            grandbo.restore(tmp_path / "newer.db")
    with Grandbo.open(settings) as grandbo:  # the store still opens, with what it held
        assert grandbo.org("acme").stats().total == 2


def test_a_backup_onto_the_store_itself_is_refused_and_the_store_keeps_working(tmp_path):
    settings = Settings(home=tmp_path / "home")
    with Grandbo.init(settings, embedding="deterministic") as grandbo, Grandbo.open(settings) as other:
        grandbo.org("default", create=True).remember({"title": "written before the backup"})
        inode = (tmp_path / "home" / "grandbo.db").stat().st_ino
        with pytest.raises(InvalidInputError, match="is the store itself"):
            grandbo.backup(tmp_path / "home" / "." / "grandbo.db")
        other.org("default").remember({"title": "written by another process after it"})
        assert (tmp_path / "home" / "grandbo.db").stat().st_ino == inode
    with Grandbo.open(settings) as grandbo:
        assert grandbo.org("default").stats().total == 2


def _seed(memory):
    kept = memory.remember(
        {"title": "redis eviction storm on the session cache", "body": "keys evicted", "meta": {"runbook_id": "RB-1"}}
    )  # the runbook its outcome counts for
    memory.correct(kept.id, {"body": "keys evicted under allkeys-lru"}, reason="cause")
    memory.remember({"title": "checkout-api connection pool exhausted", "body": "raise the pool"})
    memory.incidents.open("checkout outage", incident_id="INC-1")
    memory.ledger.record("RB-1", "succeeded")
    memory.profile.update({"facts": {"team": "platform"}})


def _ranking(memory):
    return [(h.entry.id, round(h.sort_score, 6)) for h in memory.recall("redis eviction storm on the sessions").hits]


def _pg_settings(pg_server, pg_database, home: Path, pg_bin_dir: Path = BIN_DIR) -> Settings:
    """A fresh Postgres store's settings, with the backup role (the server's superuser) and client tools."""
    reset_postgres(pg_database)
    database = urlsplit(pg_database).path.lstrip("/")
    return Settings(home=home, database_url=pg_database, backup_database_url=pg_server.url(database),
                    pg_bin_dir=pg_bin_dir)  # fmt: skip


@pytest.mark.postgres
def test_postgres_restore_drill_brings_back_exactly_what_was_backed_up(pg_server, pg_database, tmp_path):
    settings = _pg_settings(pg_server, pg_database, tmp_path / "home")
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        _seed(memory)
        grandbo.org("other", create=True).remember({"title": "the other org's memory"})
        before, ranking = _state(memory), _ranking(memory)
        grandbo.backup(tmp_path / "backup.dump")
        memory.remember({"title": "written after the backup"})
        grandbo.drop_org("acme")  # the disasters: an org deleted, a table dropped by hand
        with psycopg.connect(settings.backup_database_url, autocommit=True) as conn:
            conn.execute("DROP TABLE document_events")
        grandbo.restore(tmp_path / "backup.dump")
        memory = grandbo.org("acme")
        assert _state(memory) == before and _ranking(memory) == ranking and ranking
        assert [e.title for e in grandbo.org("other").entries()] == ["the other org's memory"]
        memory.remember({"title": "the restored store takes writes"})
    runtime_only = settings.model_copy(update={"backup_database_url": None})
    with Grandbo.open(runtime_only) as grandbo:  # a fresh process, as the runtime role: it still owns nothing
        assert grandbo.org("acme").stats().total == 3
    with psycopg.connect(pg_database) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("ALTER TABLE memory_entries NO FORCE ROW LEVEL SECURITY")


@pytest.mark.postgres
def test_restoring_a_file_that_is_not_a_postgres_backup_is_refused_and_changes_nothing(
    pg_server, pg_database, tmp_path
):
    settings = _pg_settings(pg_server, pg_database, tmp_path / "home")
    (tmp_path / "junk.dump").write_bytes(b"PGDMP not really" * 100)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "still here after the refusal"})
        with pytest.raises(StoreError, match="not a Grandbo backup"):
            grandbo.restore(tmp_path / "junk.dump")
        assert grandbo.org("acme").stats().total == 1
    elsewhere = settings.model_copy(update={"backup_database_url": pg_server.admin_url})  # the `postgres` db
    with Grandbo.open(elsewhere) as grandbo, pytest.raises(ConfigError, match="names the database postgres"):
        grandbo.backup(tmp_path / "wrong.dump")


@pytest.mark.postgres
def test_a_backup_url_with_a_wrong_password_is_an_error_naming_it_not_a_traceback(pg_server, pg_database, tmp_path):
    settings = _pg_settings(pg_server, pg_database, tmp_path / "home")
    wrong = str(settings.backup_database_url).replace("postgres:", "postgres:x", 1).replace("@", "x@", 1)
    settings = settings.model_copy(update={"backup_database_url": wrong})
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        with pytest.raises(ConfigError, match="GRANDBO_BACKUP_DATABASE_URL") as caught:  # not an outage to wait on
            grandbo.backup(tmp_path / "b.dump")
        assert "password authentication failed" in caught.value.message
        assert not (tmp_path / "b.dump").exists()


@pytest.mark.postgres
def test_a_backup_of_the_other_backend_is_refused_with_the_way_to_move_organizations(pg_server, pg_database, tmp_path):
    postgres = _pg_settings(pg_server, pg_database, tmp_path / "pg")
    embedded = Settings(home=tmp_path / "embedded")
    with (
        Grandbo.init(postgres, embedding="deterministic") as on_pg,
        Grandbo.init(embedded, embedding="deterministic") as on_file,
    ):
        on_pg.org("acme", create=True).remember({"title": "kept on postgres"})
        on_file.org("acme", create=True).remember({"title": "kept in the file"})
        on_pg.backup(tmp_path / "pg.dump")
        on_file.backup(tmp_path / "file.db")
        with pytest.raises(
            StoreError, match=r"is a backup of a Postgres store \(pg_dump\), and this is the embedded"
        ) as caught:
            on_file.restore(tmp_path / "pg.dump")
        assert "grandbo import-events" in caught.value.message
        with pytest.raises(StoreError, match=r"is a backup of the embedded \(SQLite\) store, and this is a Postgres"):
            on_pg.restore(tmp_path / "file.db")
        assert [e.title for e in on_pg.org("acme").entries()] == ["kept on postgres"]
        assert [e.title for e in on_file.org("acme").entries()] == ["kept in the file"]


@pytest.mark.postgres
def test_client_tools_older_than_the_server_are_named_with_the_setting_that_picks_others(
    pg_server, pg_database, tmp_path
):
    old_tools = tmp_path / "pg15"  # what Debian 12's postgresql-client answers an 18 server
    old_tools.mkdir()
    (old_tools / "pg_dump").write_text(
        "#!/bin/sh\necho 'pg_dump: error: aborting because of server version mismatch' >&2\nexit 1\n"
    )
    (old_tools / "pg_dump").chmod(0o755)
    settings = _pg_settings(pg_server, pg_database, tmp_path / "home", pg_bin_dir=old_tools)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        with pytest.raises(StoreError, match="set GRANDBO_PG_BIN_DIR to a folder holding pg_dump") as caught:
            grandbo.backup(tmp_path / "b.dump")
        assert f"{old_tools}/pg_dump is older than the server" in caught.value.message
        assert not (tmp_path / "b.dump").exists()


@pytest.mark.postgres
def test_a_postgres_backup_of_a_newer_release_is_refused_and_changes_nothing(pg_server, pg_database, tmp_path):
    settings = _pg_settings(pg_server, pg_database, tmp_path / "home")
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "the store before the restore"})
        with psycopg.connect(owner_url(pg_database), autocommit=True) as owner:  # what a later release leaves
            owner.execute("INSERT INTO schema_migrations VALUES (99, 'from the future', now())")
            grandbo.backup(tmp_path / "newer.dump")
            owner.execute("DELETE FROM schema_migrations WHERE version = 99")
        grandbo.org("acme").remember({"title": "written after the backup"})
        with pytest.raises(MigrationError, match=r"newer release \(schema versions \[99\].*Nothing was changed"):
            grandbo.restore(tmp_path / "newer.dump")
        assert grandbo.org("acme").stats().total == 2
    with Grandbo.open(settings) as grandbo:  # the database still opens, with what it held
        assert grandbo.org("acme").stats().total == 2


def test_a_backup_is_readable_by_its_owner_only(settings, backend, request, tmp_path):
    """A backup holds every organization's memory and their webhook secrets in clear; under the usual umask
    (022) it was readable by every user of the machine."""
    if backend == "postgres":
        pg_server = request.getfixturevalue("pg_server")
        database = urlsplit(settings.database_url).path.lstrip("/")
        settings = settings.model_copy(update={"backup_database_url": pg_server.url(database), "pg_bin_dir": BIN_DIR})
    previous = os.umask(0o022)
    try:
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            memory = grandbo.org("acme", create=True)
            memory.webhook_secrets.add("pagerduty", "a-signing-secret-in-clear")
            grandbo.backup(tmp_path / "backups" / "grandbo.backup")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "backups" / "grandbo.backup").stat().st_mode) == 0o600


def test_a_new_embedded_store_is_readable_by_its_owner_only(tmp_path):
    previous = os.umask(0o022)
    try:
        with Grandbo.init(Settings(home=tmp_path / "home"), embedding="deterministic") as grandbo:
            grandbo.org("acme", create=True).remember({"title": "what every user of the machine could read"})
            files = sorted((tmp_path / "home").glob("grandbo.db*"))
            modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in files}
    finally:
        os.umask(previous)
    assert "grandbo.db" in modes and "grandbo.db-wal" in modes
    assert set(modes.values()) == {0o600}, modes


def test_an_existing_embedded_store_readable_by_others_is_made_owner_only_once_and_kept(tmp_path):
    import sqlite3

    import structlog

    settings = Settings(home=tmp_path / "home")
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "what every user of the machine could read"})
    db = tmp_path / "home" / "grandbo.db"
    holder = sqlite3.connect(db)  # another process's connection keeps the -wal and -shm files in place
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("INSERT INTO store_meta (key, value) VALUES ('left-by', 'an older release')")
    holder.commit()
    parts = [db, db.with_name("grandbo.db-wal"), db.with_name("grandbo.db-shm")]
    for part in parts:  # what a release that left the mode to the umask (0022) made
        part.chmod(0o644)
    inodes = [part.stat().st_ino for part in parts]
    try:
        with structlog.testing.capture_logs() as logs, Grandbo.open(settings) as grandbo:
            assert grandbo.org("acme").entries()[0].title == "what every user of the machine could read"
        with structlog.testing.capture_logs() as again, Grandbo.open(settings):
            pass
        modes = [stat.S_IMODE(part.stat().st_mode) for part in parts]  # the -wal and -shm are still there
    finally:
        holder.close()
    tightened = [line for line in logs if line["event"] == "store.file_permissions_tightened"]
    assert sorted(line["path"] for line in tightened) == sorted(str(part) for part in parts)
    assert all(line["was"] == "0o644" and line["now"] == "0o600" for line in tightened)
    assert not [line for line in again if line["event"] == "store.file_permissions_tightened"]
    assert modes == [0o600, 0o600, 0o600]
    assert db.stat().st_ino == inodes[0]  # the same file, tightened in place


def test_embed_jobs_leased_when_the_backup_was_taken_are_free_at_once_after_a_restore(
    settings, backend, request, tmp_path
):
    from grandbo.model import EventType, utcnow
    from grandbo.ports import NewEvent

    if backend == "postgres":
        pg_server = request.getfixturevalue("pg_server")
        database = urlsplit(settings.database_url).path.lstrip("/")
        settings = settings.model_copy(update={"backup_database_url": pg_server.url(database), "pg_bin_dir": BIN_DIR})
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        store = grandbo._store  # a worker's view: the jobs themselves
        store.ensure_org("acme")
        payload = {"title": "checkout-api pool exhausted", "body": "raise the pool", "kind": "fact",
                   "source": "admin", "occurred_at": utcnow().isoformat()}  # fmt: skip
        store.append("acme", [NewEvent(f"e{n}", EventType.REMEMBERED, payload, "test", utcnow()) for n in range(3)])
        leased = store.claim_jobs(2, 5, "acme")  # a worker is embedding two of them as the backup is taken
        assert len(leased) == 2 and store.claim_jobs(10, 5, "acme")[0].entry_id == "e2"
        grandbo.backup(tmp_path / "grandbo.backup")
        grandbo.restore(tmp_path / "grandbo.backup")  # the worker that held the leases is gone
        again = store.claim_jobs(10, 5, "acme")
    assert sorted(job.entry_id for job in again) == ["e0", "e1", "e2"]


def test_write_behinds_leased_when_the_backup_was_taken_are_free_at_once_after_a_restore_and_not_counted(
    settings, backend, request, tmp_path
):
    """A restore freed the embed jobs' leases, not the write-behinds' (`pending_work`): a lease the backup held kept its
    piece from every runner until it ran out, and then counted as an attempt lost with its runner ("killed or
    crashed"), which no runner was."""
    from grandbo.ports import NewWork
    from grandbo.redrive import ALERT_TRIAGE

    if backend == "postgres":
        pg_server = request.getfixturevalue("pg_server")
        database = urlsplit(settings.database_url).path.lstrip("/")
        settings = settings.model_copy(update={"backup_database_url": pg_server.url(database), "pg_bin_dir": BIN_DIR})
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        store = grandbo._store  # a runner's view: the work itself
        store.ensure_org("acme")
        store.put_documents("acme", [], "test", [NewWork(ALERT_TRIAGE, f"A-{n}") for n in range(2)])
        (leased,) = store.claim_work(1, 5, 300)  # a runner is triaging one as the backup is taken
        grandbo.backup(tmp_path / "grandbo.backup")
        store.release_work([leased])  # the runner stops here: its lease ends with it, in the store it wrote to
        grandbo.restore(tmp_path / "grandbo.backup")  # the backup's lease is of no runner now
        again = store.claim_work(10, 5, 300)
    assert sorted(work.subject for work in again) == ["A-0", "A-1"]
    assert [work.attempts for work in again] == [0, 0]  # nothing failed: no attempt counted


_KILLED_COPY = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("CREATE TABLE copied (x)")
db.execute("BEGIN")  # a copy under way, as SQLite's backup API writes it: a rollback journal beside it
db.executemany("INSERT INTO copied VALUES (?)", [("a page of the store " * 50,)] * 2000)
os.kill(os.getpid(), 9)
"""


def test_what_a_backup_killed_halfway_left_is_removed_by_the_next_and_said(cli, tmp_path):
    """kill -9 during a backup leaves `NAME.partial` (463 MB in probe 20b) and SQLite's journal of it; the next backup
    to the name reused the file and said nothing of it."""
    target = tmp_path / "backups" / "grandbo.db"
    target.parent.mkdir()
    subprocess.run([sys.executable, "-c", _KILLED_COPY, f"{target}.partial"], check=False)
    left = sorted(path.name for path in target.parent.iterdir())
    assert left == ["grandbo.db.partial", "grandbo.db.partial-journal"], left  # what a killed copy leaves
    said = cli("backup", str(target)).stdout.splitlines()
    assert said[0].startswith("removed grandbo.db.partial, grandbo.db.partial-journal (")
    assert said[0].endswith(f"): left beside {target} by a backup to it that was cut short")
    assert said[1].startswith("backed up ") and len(said) == 2
    assert sorted(path.name for path in target.parent.iterdir()) == ["grandbo.db"]
    with closing(sqlite3.connect(target)) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert copy.execute("SELECT count(*) FROM sqlite_master WHERE name = 'copied'").fetchone() == (0,)
    assert "removed" not in cli("backup", str(target)).stdout  # nothing left, nothing said
