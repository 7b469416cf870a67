"""Whether a file handed to `restore` is a Grandbo store, judged before anything of the live store is touched.

Another application's SQLite file can look like a backup at a glance: golang-migrate, Rails, dbmate and sqlx all
keep a `schema_migrations` table with a `version` column, and a copy cut short (or made table by table) lacks
some of Grandbo's tables. Either, restored, left a store no command could open, and the one it replaced was
gone. The tables and columns a backup must have are derived from the migrations its `schema_migrations` says
were applied (run on an empty in-memory database), never from a list kept by hand.
"""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

from grandbo.errors import StoreError
from grandbo.store.files import refuse_newer_backup
from grandbo.store.sqlite.migrations import MIGRATIONS

# `Schema._migrate` creates it; no numbered migration does.
_LEDGER = "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
_SPACE_KEYS = ("provider", "model", "dimension")


def not_a_backup(source: Path, why: str) -> StoreError:
    """The refusal of a file that is not a Grandbo backup, saying why (`why`: "it lacks table store_meta")."""
    return StoreError(
        f"{source} is not a Grandbo backup ({why}): nothing was changed. Name a file `grandbo backup` wrote.",
        detail={"path": str(source), "reason": why},
    )


def check(source: Path, db: sqlite3.Connection) -> None:
    """Refuse the file `db` has open unless it is a sound Grandbo store this release can restore: SQLite reads it
    and finds it intact; it has the tables and columns of the migrations it records, by the names this release
    gives them; it records its embedding space. Raises StoreError (MigrationError for a newer release's)."""
    try:
        (verdict,) = db.execute("PRAGMA integrity_check").fetchone()
        tables = _tables(db)
    except sqlite3.DatabaseError as error:  # not SQLite at all: "file is not a database"
        raise not_a_backup(source, f"SQLite cannot read it: {error}") from error
    if verdict != "ok":
        raise StoreError(
            f"{source} is damaged (SQLite's integrity check: {verdict}): nothing was changed. Restore an older backup.",
            detail={"path": str(source)},
        )
    # The first migration's tables (no later one drops any) and the ledger, before the ledger is read: the message
    # names what a foreign file lacks most plainly.
    _refuse_missing(source, tables, {name: [] for name in _schema(frozenset({MIGRATIONS[0][0]}))})
    _refuse_missing(source, tables, {"schema_migrations": _schema(frozenset())["schema_migrations"]})
    applied = dict(db.execute("SELECT version, name FROM schema_migrations").fetchall())
    if not applied:
        raise not_a_backup(source, "its schema_migrations records no migration")
    refuse_newer_backup(source, set(applied), MIGRATIONS)
    names = {version: name for version, name, _ in MIGRATIONS}
    if renamed := sorted(version for version, name in applied.items() if names[version] != name):
        version = renamed[0]
        raise not_a_backup(
            source, f"its schema_migrations names migration {version} {applied[version]!r}, not as Grandbo does"
        )
    _refuse_missing(source, tables, _schema(frozenset(applied)))
    meta = dict(db.execute("SELECT key, value FROM store_meta").fetchall())
    if absent := [key for key in _SPACE_KEYS if not meta.get(key)]:
        raise not_a_backup(source, f"its store_meta records no embedding space: no {', '.join(absent)}")


def _refuse_missing(source: Path, tables: dict[str, list[str]], expected: dict[str, list[str]]) -> None:
    """Refuse `source` when it lacks one of the `expected` tables, or one of a table's expected columns."""
    if missing := [name for name in expected if name not in tables]:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise not_a_backup(source, f"it lacks table{'s' if len(missing) > 1 else ''} {shown}")
    for name, columns in expected.items():
        if lacking := [column for column in columns if column not in tables[name]]:
            raise not_a_backup(source, f"its table {name} lacks column{'s' if len(lacking) > 1 else ''} "
                                       f"{', '.join(lacking)}")  # fmt: skip


def _tables(db: sqlite3.Connection) -> dict[str, list[str]]:
    """Every table of the database `db` has open and its columns, in the order they were made."""
    names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
    return {
        name: [column[1] for column in db.execute(f'PRAGMA table_info("{name}")')]
        for name in names
        if not name.startswith("sqlite_")
    }


@functools.cache
def _schema(versions: frozenset[int]) -> dict[str, list[str]]:
    """The tables and columns a store has once `versions` of MIGRATIONS (and no other) are applied."""
    db = sqlite3.connect(":memory:")
    try:
        db.execute(_LEDGER)
        for version, _, statements in MIGRATIONS:
            if version in versions:
                for statement in statements:
                    db.execute(statement)  # the steps in Python (REDERIVE_TERMS...) are SQL comments
        return _tables(db)
    finally:
        db.close()
