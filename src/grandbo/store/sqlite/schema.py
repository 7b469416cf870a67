"""The embedded store's schema: migrations (`migrations.py`), the terms they derive again, the embedding space."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

import structlog

from grandbo.errors import MigrationError, StoreBusyError
from grandbo.model import EmbeddingSpace, utcnow
from grandbo.store import fence, projection
from grandbo.store.base import REDERIVE_BATCH, REDERIVE_TERMS, TERMS_DERIVED_VECTORS, TermsOf, loads_json
from grandbo.store.sql.entries import FILL_INCIDENT_KEYS, fill_incident_keys, incident_keys_read, incident_keys_write
from grandbo.store.sql.service_names import (
    NORMALIZE_SERVICE_NAMES,
    normalize_documents,
    normalize_entries,
    read_documents,
    read_entries,
    rename_service,
)
from grandbo.store.sql.services import LOWER_CHANGE_SERVICES, lower_change_services, read_services, write_service
from grandbo.store.sqlite.connection import Connection, LockWait, next_epoch
from grandbo.store.sqlite.dialect import DOCUMENTS, REPLACE, json_text
from grandbo.store.sqlite.migrations import MIGRATIONS
from grandbo.store.sqlite.outbox import enqueue_missing
from grandbo.store.sqlite.unembeddable import requeue_entries

log = structlog.get_logger(__name__)
# How long an open with migrations to apply waits for another process's write lock: most likely another process of
# this release migrating the store (a large store's migration takes minutes: 300,000 events, migration 32), which
# leaves nothing to apply once it commits. Any other write waits the busy timeout (10 s), after which an open of a
# store being migrated failed as "busy: nothing was written".
MIGRATION_WAIT_S = 900.0


class Schema(Connection):
    def _migrate(self) -> None:
        """Apply this release's migrations the store lacks, in one write. A store that lacks none is only read: its
        open takes no write lock, so another process's long write never holds it up."""
        if (applied := self._applied()) is not None and not self._pending(applied):
            self.schema_known = fence.newest(MIGRATIONS)
            return
        with self._write(wait=self._migration_wait()) as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            applied = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
            self._pending(applied)
            upgraded = False  # an existing store migrated, not a new one made
            for version, name, statements in MIGRATIONS:
                if version in applied:
                    continue
                for statement in statements:
                    if statement == REDERIVE_TERMS:
                        self._rederive_terms(db)
                    elif statement == LOWER_CHANGE_SERVICES:
                        _lower_change_services(db)
                    elif statement == FILL_INCIDENT_KEYS:
                        _fill_incident_keys(db)
                    elif statement == NORMALIZE_SERVICE_NAMES:
                        self._normalize_service_names(db)
                    else:
                        db.execute(statement)
                db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, utcnow().isoformat()),
                )
                log.info("store.migrated", version=version, name=name)
                upgraded = bool(applied)
        self.schema_known = fence.newest(MIGRATIONS)
        if upgraded:  # the log holds every page the migrations wrote (1.2 GB for migration 32 of 300,000 events),
            self._emptied_log("migrated")  # and kept that size while any process had the file open

    def _applied(self) -> set[int] | None:
        """The store's migrations, read without the write lock; None: it has no record of them (a new store)."""
        try:
            with self._reading() as db:
                return {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
        except sqlite3.OperationalError as error:
            if "no such table" not in str(error):
                raise
            return None

    def _pending(self, applied: set[int]) -> list[int]:
        """This release's migrations missing from `applied`; MigrationError when it holds one of a newer release."""
        known = {version for version, _, _ in MIGRATIONS}
        if applied - known:
            raise MigrationError(
                f"The store at {self.path} has schema versions {sorted(applied - known)} that this Grandbo "
                "does not know; it was written by a newer release. Upgrade Grandbo.",
                detail={"unknown_versions": sorted(applied - known)},
            )
        return sorted(known - applied)

    def _migration_wait(self) -> LockWait:
        """A migration's wait for another process's write lock: MIGRATION_WAIT_S, said when it starts, refused with
        what to do when it ends."""
        newest = fence.newest(MIGRATIONS)

        def waiting() -> None:
            log.warning("store.waiting_for_migration", path=str(self.path), to_version=newest,
                        waits_up_to_s=MIGRATION_WAIT_S, why="another process holds the store's write lock, most "
                        "likely migrating it: this one migrates what is left once it lets go")  # fmt: skip

        def refusal() -> StoreBusyError:
            return StoreBusyError(
                f"Cannot open the SQLite store at {self.path}: it needs migrating to schema version {newest}, and "
                f"another process held its write lock for the {MIGRATION_WAIT_S:g} s this one waited to do it: most "
                "likely another Grandbo process migrating it (a large store's migration takes minutes), or a long "
                "import, backup, restore or purge. Start this process again once that one is done; or stop every "
                "process of the store and run `grandbo migrate` alone.",
                detail={"path": str(self.path), "waited_s": MIGRATION_WAIT_S, "to_version": newest},
            )

        return LockWait(MIGRATION_WAIT_S, refusal, waiting)

    def _rederive_terms(self, db: sqlite3.Connection) -> None:
        """Migration step REDERIVE_TERMS (store/base.py), org by org, in batches of entries."""
        space = self.space() if db.execute("SELECT 1 FROM store_meta WHERE key = 'provider'").fetchone() else None
        changed = 0
        for org_id, language in _languages(db).items():
            updated = rederive_org(db, self._terms_of, org_id, language)
            if space is not None and space.provider == TERMS_DERIVED_VECTORS:
                db.executemany(
                    "DELETE FROM entry_vectors WHERE org_id = ? AND entry_id = ? AND provider = ?",
                    [(org_id, entry_id, TERMS_DERIVED_VECTORS) for entry_id in updated],
                )
                requeue_entries(db, org_id, updated)
            changed += len(updated)
        queued = enqueue_missing(db, None, space) if space is not None and changed else 0
        db.execute("UPDATE orgs SET epoch = ?", (next_epoch(db),))
        log.info("store.terms_rederived", entries_changed=changed, embed_jobs=queued)

    def _normalize_service_names(self, db: sqlite3.Connection) -> None:
        """Migration step NORMALIZE_SERVICE_NAMES (store/sql/service_names.py), org by org."""
        space = self.space() if db.execute("SELECT 1 FROM store_meta WHERE key = 'provider'").fetchone() else None
        entries = documents = 0
        for org_id, language in _languages(db).items():
            changed = _normalize_entries(db, org_id, self._terms_of, language)
            if changed:  # the text their vectors embedded changed: embedded again
                db.executemany("DELETE FROM entry_vectors WHERE org_id = ? AND entry_id = ?",
                               [(org_id, entry_id) for entry_id in changed])  # fmt: skip
                requeue_entries(db, org_id, changed)
            entries += len(changed)
            documents += _normalize_documents(db, org_id)
        queued = enqueue_missing(db, None, space) if space is not None and entries else 0
        db.execute("UPDATE orgs SET epoch = ?", (next_epoch(db),))
        log.info("store.service_names_normalized", entries=entries, documents=documents, embed_jobs=queued)

    def schema_versions(self) -> list[int]:
        with self._reading() as db:
            return [row[0] for row in db.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()]

    def initialize(self, space: EmbeddingSpace) -> None:
        with self._write() as db:
            db.executemany(
                f"{REPLACE} INTO store_meta (key, value) VALUES (?, ?)",
                [
                    ("provider", space.provider),
                    ("model", space.model),
                    ("dimension", str(space.dimension)),
                    ("created_at", utcnow().isoformat()),
                ],
            )

    def switch_space(self, space: EmbeddingSpace, *, every_entry: bool = False) -> int:
        with self._write() as db:
            db.executemany(
                "UPDATE store_meta SET value = ? WHERE key = ?",
                [(space.provider, "provider"), (space.model, "model"), (str(space.dimension), "dimension")],
            )
            if every_entry:
                db.execute("DELETE FROM entry_vectors")
                db.execute("UPDATE orgs SET epoch = ?", (next_epoch(db),))
            count = enqueue_missing(db, None, space)
        return count


def rederive_org(db: sqlite3.Connection, terms_of: TermsOf, org_id: str, language: str | None) -> list[str]:
    """`projection.rederive` of one org, in this transaction."""
    read = projection.REDERIVE_READ.format(p="?")
    return projection.rederive(
        lambda after: db.execute(read, (org_id, after, REDERIVE_BATCH)).fetchall(),
        lambda updates: store_terms(db, org_id, updates),
        terms_of,
        language,
        loads_json,
    )


def store_terms(db: sqlite3.Connection, org_id: str, terms: Mapping[str, str]) -> None:
    db.executemany(
        "UPDATE memory_entries SET terms = ? WHERE org_id = ? AND entry_id = ?",
        [(new, org_id, entry_id) for entry_id, new in terms.items()],
    )


def _lower_change_services(db: sqlite3.Connection) -> None:
    """Migration step LOWER_CHANGE_SERVICES (store/sql/services.py), org by org."""
    orgs = [org_id for (org_id,) in db.execute("SELECT org_id FROM orgs ORDER BY org_id")]
    lowered = sum(_lower_org(db, org_id) for org_id in orgs)
    log.info("store.change_services_lowered", changes=lowered)


def _lower_org(db: sqlite3.Connection, org_id: str) -> int:
    read, write = read_services(DOCUMENTS), write_service(DOCUMENTS, "json_set(data, '$.service', ?)")
    return lower_change_services(
        lambda after: db.execute(read, (org_id, after)).fetchall(),
        lambda due: db.executemany(write, [(service, org_id, doc_id) for service, doc_id in due]),
    )


def _normalize_entries(db: sqlite3.Connection, org_id: str, terms_of: TermsOf, language: str | None) -> list[str]:
    write = "UPDATE memory_entries SET services = ?, terms = ?, content_hash = ? WHERE org_id = ? AND entry_id = ?"
    return normalize_entries(
        lambda after: db.execute(read_entries("?"), (org_id, after)).fetchall(),
        lambda due: db.executemany(
            write, [(json_text(names), terms, digest, org_id, entry_id) for entry_id, names, terms, digest in due]
        ),
        lambda title, body, tags, names: " ".join(terms_of(title, body, tags, names, language)),
        loads_json,
    )


def _normalize_documents(db: sqlite3.Connection, org_id: str) -> int:
    write = "UPDATE documents SET data = ? WHERE org_id = ? AND collection = ? AND doc_id = ?"
    return normalize_documents(
        lambda collection, after: db.execute(read_documents("?"), (org_id, collection, after)).fetchall(),
        lambda collection, due: db.executemany(
            write, [(json_text(data), org_id, collection, doc_id) for data, doc_id in due]
        ),
        lambda doc_id, data: rename_service(db, "?", json_text, loads_json, org_id, doc_id, data),
        loads_json,
    )


def _fill_incident_keys(db: sqlite3.Connection) -> None:
    """Migration step FILL_INCIDENT_KEYS (store/sql/entries.py), org by org."""
    orgs = [org_id for (org_id,) in db.execute("SELECT org_id FROM orgs ORDER BY org_id")]
    log.info("store.incident_keys_filled", entries=sum(_fill_org(db, org_id) for org_id in orgs))


def _fill_org(db: sqlite3.Connection, org_id: str) -> int:
    read, write = incident_keys_read("?"), incident_keys_write("?")
    return fill_incident_keys(
        lambda after: db.execute(read, (org_id, after)).fetchall(),
        lambda due: db.executemany(write, [(key, org_id, entry_id) for key, entry_id in due]),
        loads_json,
    )


def _languages(db: sqlite3.Connection) -> dict[str, str | None]:
    """Every org and its declared language (None before migration 8 added the column)."""
    declared = any(column[1] == "language" for column in db.execute("PRAGMA table_info(orgs)"))
    return dict(db.execute(f"SELECT org_id, {'language' if declared else 'NULL'} FROM orgs ORDER BY org_id"))
