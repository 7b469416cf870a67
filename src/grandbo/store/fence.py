"""The schema fence of a rolling upgrade: a process reads and writes the store only while its newest migration is
one this release knows.

A process started before a newer release migrated the store (`grandbo migrate` on Postgres; the first process of
the newer release to open the embedded file) went on reading and writing it the way its own schema had it: an org
it created after migration 26 had incarnation 0 on SQLite, the column's default, so a same-named org created after
a drop got 0 again, and a newer process's handle of the dropped org filed its writes in the new one (probe 23a).
Each transaction now reads the store's newest migration with what it reads first (Postgres: with the org it sets;
SQLite: in each write, and with an index's watermarks), and past this release's newest refuses with
`StoreUpgradedError`. On Postgres a migration holds `schema_migrations` exclusively until it commits
(`MIGRATION_FENCE`), so a transaction that read the version before it ends before the migration starts."""

from __future__ import annotations

from collections.abc import Iterable

from grandbo.errors import MigrationError, StoreUpgradedError

NEWEST = "(SELECT max(version) FROM schema_migrations)"
"""The store's newest migration, a column of the statement each transaction starts with."""

MIGRATION_FENCE = "LOCK TABLE schema_migrations IN ACCESS EXCLUSIVE MODE"
"""Taken by a Postgres migration before its statements: a transaction that read the version holds the table until
it ends, and one that reads it meanwhile waits for the migration and reads its number."""

MIGRATION_WAIT_MS = 3000
"""How long a Postgres migration waits for the fence: every process's next transaction queues behind its request
meanwhile, so one held up by a long transaction (an export's read) gives up rather than stall every request."""


def held_up(version: int, name: str) -> MigrationError:
    """The refusal of migration `version` (`name`) that waited MIGRATION_WAIT_MS for the fence."""
    return MigrationError(
        f"Migration {version} ({name}) waited {MIGRATION_WAIT_MS / 1000:g} s for transactions of running processes "
        "that read the schema before it (a long export or import, say) and changed nothing: every request waits "
        "while a migration waits. Run `grandbo migrate` again when they are done.",
        detail={"version": version, "waited_ms": MIGRATION_WAIT_MS},
    )


def newest(migrations: Iterable[tuple[int, str, object]]) -> int:
    """The newest migration of a release's list."""
    return max(version for version, _, _ in migrations)


def hold(found: int | None, known: int | None) -> None:
    """Refuse (StoreUpgradedError) a store whose newest migration `found` is past `known`, this release's newest
    (None: not checked yet, as while this process migrates)."""
    if known is None or found is None or found <= known:
        return
    raise StoreUpgradedError(
        f"The store was migrated to schema version {found} by a newer release while this process ran "
        f"(this release knows up to {known}); nothing was read or written. {StoreUpgradedError.remedy}",
        detail={"schema_version": found, "known_version": known},
    )
