"""A file that is not a Grandbo backup is refused before the store is touched, and a restore keeps the store it
replaces (probe 20b R1): another application's SQLite file (golang-migrate's `schema_migrations` has a `version`
column too) or a backup missing a table passed the old checks, was written over the live store, and only then
failed to migrate; the store was gone and every later command was a traceback."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from grandbo.cli import app
from grandbo.config import Settings
from grandbo.devtools.postgres import BIN_DIR
from grandbo.errors import StoreError
from grandbo.service import Grandbo
from tests.conftest import reset_postgres

CANARY = "restore canary entry: the session cache evicts keys under memory pressure"


def _run(home: Path, *args: str):  # type: ignore[no-untyped-def]
    env = {"GRANDBO_HOME": str(home), "GRANDBO_EMBEDDING_PROVIDER": "deterministic"}
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An embedded store holding the canary entry, and a good backup of it beside (`good.db`)."""
    home = tmp_path / "home"
    assert _run(home, "init", "--org", "r1").exit_code == 0
    assert (
        _run(home, "remember", "--org", "r1", "--title", CANARY, "--body", "canary", "--kind", "finding").exit_code == 0
    )
    assert _run(home, "backup", str(tmp_path / "good.db")).exit_code == 0
    return home


def _golang_migrate(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE schema_migrations (version bigint not null primary key, dirty boolean not null)")
        db.execute("INSERT INTO schema_migrations VALUES (1, 0)")
        db.execute("CREATE TABLE users (id integer primary key, email text)")
    db.close()


def _without(table: str):  # type: ignore[no-untyped-def]
    def make(path: Path) -> None:  # a Grandbo backup that lost a table (a copy made table by table, cut short)
        path.write_bytes((path.parent / "good.db").read_bytes())
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA foreign_keys = OFF")
            db.execute(f"DROP TABLE {table}")
        db.close()

    return make


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (_golang_migrate, "it lacks tables store_meta, orgs, memory_events, memory_entries and 3 more"),
        (_without("memory_entries"), "it lacks table memory_entries"),
        (_without("documents"), "it lacks table documents"),
        (lambda path: path.write_bytes(bytes(range(256)) * 40), "SQLite cannot read it: file is not a database"),
    ],
    ids=["golang-migrate", "no-memory-entries", "no-documents", "random-bytes"],
)
def test_a_file_that_is_not_a_grandbo_backup_is_one_line_and_leaves_the_store_answering(home, tmp_path, make, why):
    candidate = tmp_path / "candidate.db"
    make(candidate)
    result = _run(home, "restore", str(candidate))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"error: {candidate} is not a Grandbo backup ({why}): nothing was changed. Name a file `grandbo backup` wrote."
    )
    assert "Traceback" not in result.output
    assert sorted(p.name for p in home.iterdir() if not p.name.startswith("grandbo.db-")) == ["grandbo.db"]
    recalled = _run(home, "recall", CANARY, "--org", "r1")
    assert recalled.exit_code == 0 and "restore canary entry" in recalled.stdout, recalled.output
    assert _run(home, "stats", "--org", "r1").exit_code == 0


def test_a_backup_without_its_embedding_space_or_its_migrations_grandbo_names_is_refused(home, tmp_path):
    for name, statement, why in [
        ("nospace.db", "DELETE FROM store_meta", "its store_meta records no embedding space: no provider, model, dimension"),
        ("unledgered.db", "DELETE FROM schema_migrations", "its schema_migrations records no migration"),
        ("renamed.db", "UPDATE schema_migrations SET name = 'create users' WHERE version = 1",
         "its schema_migrations names migration 1 'create users', not as Grandbo does"),
    ]:  # fmt: skip
        candidate = tmp_path / name
        candidate.write_bytes((tmp_path / "good.db").read_bytes())
        with sqlite3.connect(candidate) as db:
            db.execute(statement)
        db.close()
        with Grandbo.open(Settings(home=home)) as grandbo:
            with pytest.raises(StoreError, match=f"^{candidate} is not a Grandbo backup \\({why}\\): nothing was"):
                grandbo.restore(candidate)
            assert grandbo.org("r1").stats().total == 1


def test_a_restore_keeps_the_store_it_replaced_owner_only_and_that_copy_restores_it_back(home, tmp_path):
    assert (
        _run(home, "remember", "--org", "r1", "--title", "written after the backup", "--kind", "finding").exit_code == 0
    )
    result = _run(home, "restore", str(tmp_path / "good.db"))
    kept = home / "grandbo.db.before-restore"
    assert result.exit_code == 0, result.output
    assert f"the store it replaced is kept at {kept} (owner-only) until the next restore" in result.stdout
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert not list(home.glob("*.restoring*")) and not list(home.glob("*.before-restore?*"))  # no -wal, .partial
    with Grandbo.open(Settings(home=home)) as grandbo:
        assert [e.title for e in grandbo.org("r1").entries()] == [CANARY]
        assert grandbo.restore(kept) == kept  # the undo: what the restore replaced comes back
        assert sorted(e.title for e in grandbo.org("r1").entries()) == sorted([CANARY, "written after the backup"])
    with Grandbo.open(Settings(home=home)) as grandbo:  # and a fresh process opens it
        assert grandbo.org("r1").stats().total == 2


def test_a_backup_of_another_page_size_restores(home, tmp_path):
    other = tmp_path / "other.db"
    other.write_bytes((tmp_path / "good.db").read_bytes())
    with sqlite3.connect(other) as db:
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute("PRAGMA page_size = 8192")
        db.execute("VACUUM")  # SQLite's backup API cannot write its pages into a store in WAL mode as they are
    db.close()
    with Grandbo.open(Settings(home=home)) as grandbo:
        grandbo.restore(other)
        assert [e.title for e in grandbo.org("r1").entries()] == [CANARY]


@pytest.mark.postgres
def test_a_postgres_archive_missing_a_table_is_refused_and_changes_nothing(pg_server, pg_database, tmp_path):
    reset_postgres(pg_database)
    database = urlsplit(pg_database).path.lstrip("/")
    settings = Settings(home=tmp_path / "home", database_url=pg_database, backup_database_url=pg_server.url(database),
                        pg_bin_dir=BIN_DIR)  # fmt: skip
    partial = tmp_path / "partial.dump"
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "still here after the refusal"})
        subprocess.run(  # a dump of every table but one (`pg_dump -T`)
            [str(BIN_DIR / "pg_dump"), "--format=custom", "--exclude-table=orgs", "--file", str(partial),
             "--dbname", pg_server.url(database)], check=True, capture_output=True,
        )  # fmt: skip
        with pytest.raises(StoreError, match=r"not a Grandbo backup of a Postgres store \(it lacks table orgs\)"):
            grandbo.restore(partial)
        assert grandbo.org("acme").stats().total == 1
