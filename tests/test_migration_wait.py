"""A process opening an embedded store that another process is migrating waits for that migration, saying so, and
then finds nothing left to apply; one opening a store migrated already takes no write lock at all. Before, either
open waited the busy timeout (10 s) for the other process's write lock and failed with "The SQLite store is busy:
... so nothing was written", though it had been asked to write nothing, and named no migration.

The other process stands for a migration as SQLite sees one: the store's newest migration missing from its record
(what the release before leaves), and the file's write lock held until the migration commits it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from grandbo.errors import StoreBusyError
from grandbo.retrieval.text import index_terms
from grandbo.service import Grandbo
from grandbo.store.sqlite import schema
from grandbo.store.sqlite.migrations import MIGRATIONS
from grandbo.store.sqlite.store import SQLiteStore

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])

NEWEST = max(version for version, _, _ in MIGRATIONS)

# Holds the store's write lock (BEGIN IMMEDIATE) until a line comes on stdin, then commits: with argv[2] == "migrate",
# the store's newest migration is first struck from its record (committed), and recorded again at the commit.
_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "migrate":
    db.execute("DELETE FROM schema_migrations WHERE version = ?", (int(sys.argv[3]),))
db.execute("BEGIN IMMEDIATE")
print("holding", flush=True)
sys.stdin.readline()
if sys.argv[2] == "migrate":
    db.execute("INSERT INTO schema_migrations VALUES (?, 'migrated meanwhile', '2026-12-07')", (int(sys.argv[3]),))
db.execute("COMMIT")
"""


@contextmanager
def _holding(path: Path, what: str) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the store's write lock (`_HOLDER`), until a line is written to its stdin."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), what, str(NEWEST)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        yield holder
    finally:
        if holder.poll() is None:  # not let go by the test already
            holder.communicate("\n", timeout=60)


def _made(settings) -> None:  # type: ignore[no-untyped-def]
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.create_org(settings.org)


def _grandbo(settings, *args: str) -> subprocess.Popen[str]:  # type: ignore[no-untyped-def]
    env = {**os.environ, "GRANDBO_HOME": str(settings.home), "GRANDBO_EMBEDDING_PROVIDER": "deterministic"}
    env.pop("GRANDBO_LOG_LEVEL", None)  # as an operator runs it: log lines off
    return subprocess.Popen([sys.executable, "-m", "grandbo", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def test_an_open_during_another_process_s_migration_waits_for_it_and_says_so(settings):
    _made(settings)
    with _holding(settings.home / "grandbo.db", "migrate") as migrating:
        stats = _grandbo(settings, "stats")
        assert stats.stderr is not None
        said = stats.stderr.readline()  # before the other process lets go (or, before, the busy error 10 s on)
        assert "store.waiting_for_migration" in said and f"to_version={NEWEST}" in said, said
        assert "another process holds the store's write lock, most likely migrating it" in said
        migrating.communicate("\n", timeout=60)  # its migration commits
    out, err = stats.communicate(timeout=60)
    assert stats.returncode == 0, err
    assert f"org_id: {settings.org}" in out


def test_an_open_of_a_migrated_store_takes_no_write_lock(settings):
    """Another process's long write (an import, a backup) holds the write lock for as long as it lasts: a process
    opened meanwhile starts and reads at once."""
    _made(settings)
    with _holding(settings.home / "grandbo.db", "write"):
        stats = _grandbo(settings, "stats")
        out, err = stats.communicate(timeout=60)  # the lock still held
    assert stats.returncode == 0, err
    assert f"org_id: {settings.org}" in out and err == ""


def test_an_open_that_waited_out_its_bound_for_a_migration_says_what_to_do(settings, monkeypatch):
    monkeypatch.setattr(schema, "MIGRATION_WAIT_S", 0.2)
    _made(settings)
    path = settings.home / "grandbo.db"
    with _holding(path, "migrate"), pytest.raises(StoreBusyError) as refused:
        SQLiteStore(path, index_terms)
    message = refused.value.message
    assert f"Cannot open the SQLite store at {path}: it needs migrating to schema version {NEWEST}" in message
    assert "most likely another Grandbo process migrating it" in message
    assert "Start this process again once that one is done" in message and "`grandbo migrate`" in message
