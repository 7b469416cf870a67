"""The embedded store's schema, as numbered migrations. A landed migration is never edited;
change the schema by appending a new one."""

from __future__ import annotations

from grandbo.store.base import REDERIVE_TERMS
from grandbo.store.sql import (
    alert_indexes,
    corpus_counts,
    erasing,
    holders,
    note_refs,
    odd_outcomes,
    outbox_holders,
    service_names,
    services,
    storage,
    unembeddable,
)
from grandbo.store.sql.entries import INCIDENT_KEYS, cited_runbooks
from grandbo.store.sqlite.dialect import DOCUMENTS

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "event log, projection, vectors, embed outbox",
        [
            """CREATE TABLE store_meta (
                key   TEXT PRIMARY KEY,
                value TEXT NOT NULL
            )""",
            # epoch: a store-wide number given to an org when it is created, rebuilt, or its vectors
            # are dropped; in-memory indexes built under another epoch are thrown away.
            """CREATE TABLE orgs (
                org_id     TEXT PRIMARY KEY,
                created_at TEXT NOT NULL,
                epoch      INTEGER NOT NULL DEFAULT 0
            )""",
            """CREATE TABLE memory_events (
                seq      INTEGER PRIMARY KEY AUTOINCREMENT,
                org_id   TEXT NOT NULL REFERENCES orgs (org_id),
                entry_id TEXT NOT NULL,
                type     TEXT NOT NULL,
                payload  TEXT NOT NULL,
                actor    TEXT NOT NULL,
                at       TEXT NOT NULL
            )""",
            "CREATE INDEX memory_events_by_org ON memory_events (org_id, seq)",
            "CREATE INDEX memory_events_by_entry ON memory_events (org_id, entry_id, seq)",
            """CREATE TRIGGER memory_events_append_only BEFORE UPDATE ON memory_events
            BEGIN SELECT RAISE(ABORT, 'memory_events is append-only'); END""",
            """CREATE TABLE memory_entries (
                org_id        TEXT NOT NULL REFERENCES orgs (org_id),
                entry_id      TEXT NOT NULL,
                title         TEXT NOT NULL,
                body          TEXT NOT NULL,
                kind          TEXT NOT NULL,
                source        TEXT NOT NULL,
                tags          TEXT NOT NULL,
                services      TEXT NOT NULL,
                severity      TEXT,
                occurred_at   TEXT NOT NULL,
                status        TEXT NOT NULL,
                created_at    TEXT NOT NULL,
                updated_at    TEXT NOT NULL,
                supersedes    TEXT,
                superseded_by TEXT,
                meta          TEXT NOT NULL,
                seq           INTEGER NOT NULL,
                terms         TEXT NOT NULL,
                content_hash  TEXT NOT NULL,
                PRIMARY KEY (org_id, entry_id)
            )""",
            "CREATE INDEX memory_entries_by_seq ON memory_entries (org_id, seq)",
            "CREATE INDEX memory_entries_by_status ON memory_entries (org_id, status)",
            """CREATE TABLE entry_vectors (
                org_id       TEXT NOT NULL,
                entry_id     TEXT NOT NULL,
                provider     TEXT NOT NULL,
                model        TEXT NOT NULL,
                dimension    INTEGER NOT NULL CHECK (dimension > 0),
                vector       BLOB NOT NULL,
                content_hash TEXT NOT NULL,
                vseq         INTEGER NOT NULL,
                embedded_at  TEXT NOT NULL,
                PRIMARY KEY (org_id, entry_id),
                CHECK (length(vector) = 4 * dimension)
            )""",
            "CREATE INDEX entry_vectors_by_vseq ON entry_vectors (org_id, vseq)",
            """CREATE TABLE embed_outbox (
                job_id        INTEGER PRIMARY KEY AUTOINCREMENT,
                org_id        TEXT NOT NULL,
                entry_id      TEXT NOT NULL,
                content_hash  TEXT NOT NULL,
                attempts      INTEGER NOT NULL DEFAULT 0,
                last_error    TEXT,
                available_at  TEXT NOT NULL,
                claimed_until TEXT,
                created_at    TEXT NOT NULL,
                UNIQUE (org_id, entry_id)
            )""",
            "CREATE INDEX embed_outbox_ready ON embed_outbox (available_at, job_id)",
            """CREATE TABLE counters (
                name  TEXT PRIMARY KEY,
                value INTEGER NOT NULL
            )""",
            "INSERT INTO counters (name, value) VALUES ('vseq', 0)",
            "INSERT INTO counters (name, value) VALUES ('epoch', 0)",
        ],
    ),
    (
        2,
        "documents: incidents, services, outcomes, settings and profiles, with an append-only history",
        [
            """CREATE TABLE documents (
                org_id     TEXT NOT NULL REFERENCES orgs (org_id),
                collection TEXT NOT NULL,
                doc_id     TEXT NOT NULL,
                ref        TEXT,
                data       TEXT NOT NULL,
                version    INTEGER NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (org_id, collection, doc_id)
            )""",
            "CREATE INDEX documents_by_ref ON documents (org_id, collection, ref)",
            """CREATE TABLE document_events (
                seq        INTEGER PRIMARY KEY AUTOINCREMENT,
                org_id     TEXT NOT NULL,
                collection TEXT NOT NULL,
                doc_id     TEXT NOT NULL,
                type       TEXT NOT NULL,
                data       TEXT NOT NULL,
                actor      TEXT NOT NULL,
                at         TEXT NOT NULL
            )""",
            "CREATE INDEX document_events_by_doc ON document_events (org_id, collection, doc_id, seq)",
            "CREATE INDEX document_events_by_org ON document_events (org_id, seq)",
            """CREATE TRIGGER document_events_append_only BEFORE UPDATE ON document_events
            BEGIN SELECT RAISE(ABORT, 'document_events is append-only'); END""",
        ],
    ),
    (
        3,
        "the logs refuse DELETE as they refuse UPDATE, except inside an erasure (org deletion, purge)",
        [
            """CREATE TABLE log_erasures (
                org_id TEXT PRIMARY KEY,
                reason TEXT NOT NULL,
                at     TEXT NOT NULL
            )""",
            "DROP TRIGGER memory_events_append_only",
            "DROP TRIGGER document_events_append_only",
            *[
                f"""CREATE TRIGGER {table}_append_only_{op.lower()} BEFORE {op} ON {table}
                WHEN NOT EXISTS (SELECT 1 FROM log_erasures WHERE org_id = OLD.org_id)
                BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"""
                for table in ("memory_events", "document_events")
                for op in ("UPDATE", "DELETE")
            ],
        ],
    ),
    (
        4,
        "idempotency keys: a client's key for a write and the entries it wrote, recorded with the write",
        [
            """CREATE TABLE idempotency_keys (
                org_id       TEXT NOT NULL REFERENCES orgs (org_id),
                key          TEXT NOT NULL,
                request_hash TEXT NOT NULL,
                entry_ids    TEXT NOT NULL,
                created_at   TEXT NOT NULL,
                PRIMARY KEY (org_id, key)
            )""",
        ],
    ),
    (
        5,
        "stored terms re-derived by the Unicode tokenizer (NFKC, every script, stemming by language)",
        [REDERIVE_TERMS],
    ),
    (
        8,
        "an organization's declared language: its terms are derived in it (NULL: each entry's own, detected)",
        ["ALTER TABLE orgs ADD COLUMN language TEXT"],
    ),
    (
        9,
        "document events by collection and sequence: one collection's newest write, and what changed in it since",
        ["CREATE INDEX document_events_by_collection ON document_events (org_id, collection, seq)"],
    ),
    (
        10,
        "documents by write time: a collection's oldest (what alert retention deletes), without reading the rest",
        ["CREATE INDEX documents_by_age ON documents (org_id, collection, julianday(updated_at), doc_id)"],
    ),
    (
        12,
        "the embed outbox by organization: a fair claim reads each org's ready jobs in order, not one global queue",
        [
            "CREATE INDEX embed_outbox_by_org ON embed_outbox (org_id, available_at, job_id)",
            "DROP INDEX embed_outbox_ready",
        ],
    ),
    (
        13,
        "an image of each organization's search index, loaded in one read by a process that does not keep it",
        [
            """CREATE TABLE index_images (
                org_id     TEXT PRIMARY KEY REFERENCES orgs (org_id),
                epoch      INTEGER,
                language   TEXT,
                provider   TEXT,
                model      TEXT,
                dimension  INTEGER,
                entry_seq  INTEGER NOT NULL,
                vector_seq INTEGER NOT NULL,
                data       BLOB NOT NULL,
                saved_at   TEXT NOT NULL
            )""",
        ],
    ),
    (
        14,
        "durable write-behinds: work a request acknowledged and left for later, recorded with its write",
        [
            """CREATE TABLE pending_work (
                work_id       INTEGER PRIMARY KEY AUTOINCREMENT,
                org_id        TEXT NOT NULL REFERENCES orgs (org_id),
                kind          TEXT NOT NULL,
                subject       TEXT NOT NULL,
                payload       TEXT NOT NULL,
                attempts      INTEGER NOT NULL DEFAULT 0,
                available_at  TEXT NOT NULL,
                claimed_until TEXT,
                last_error    TEXT,
                created_at    TEXT NOT NULL
            )""",
            "CREATE INDEX pending_work_by_org ON pending_work (org_id, available_at, work_id)",
            "CREATE INDEX pending_work_by_subject ON pending_work (org_id, kind, subject)",
        ],
    ),
    (
        15,
        "webhook signing secrets out of the document history: each past event keeps how many secrets it held",
        [
            # The append-only triggers let an erasure through (migration 3): this is one, of every org's history.
            "INSERT OR REPLACE INTO log_erasures (org_id, reason, at) SELECT DISTINCT org_id, "
            "'migration 15: webhook secrets out of the history', strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') "
            "FROM document_events WHERE collection = 'webhook_secret'",
            "UPDATE document_events SET data = json_object('held', json_array_length(data, '$.secrets')) "
            "WHERE collection = 'webhook_secret' AND json_type(data, '$.secrets') = 'array'",
            "DELETE FROM log_erasures WHERE reason = 'migration 15: webhook secrets out of the history'",
        ],
    ),
    (
        16,
        "entry times in UTC: a page of entries is selected by its time as text, which sorts as times in one zone only",
        [
            # An event log replayed before imported times were kept in UTC left its zone's offset (+02:00) in the
            # projection: such an entry sorted hours from its place, and a cursor past it hid the entries between.
            # strftime reads the offset and writes UTC, given the time without its fraction of a second (it rounds
            # that to milliseconds: .999999 became the next second), which is put back as it was.
            f"UPDATE memory_entries SET {column} = {utc_seconds} || substr({column}, 20, length({column}) - 25) || "
            f"'+00:00' WHERE {column} NOT LIKE '%+00:00' AND {utc_seconds} IS NOT NULL"
            for column in ("created_at", "updated_at")
            for utc_seconds in [f"strftime('%Y-%m-%dT%H:%M:%S', substr({column}, 1, 19) || substr({column}, -6))"]
        ],
    ),
    (
        17,
        "entries by creation: a page of an org's entries (newest first) read from an index, not sorted whole",
        ["CREATE INDEX memory_entries_by_created ON memory_entries (org_id, created_at, entry_id)"],
    ),
    # 18 is Postgres's alone (an index image's vectors apart): the numbers name the same migration on both.
    services.MIGRATION,
    alert_indexes.migration(DOCUMENTS, stored=False),
    storage.migration(DOCUMENTS, "INTEGER", org_by_org=False),
    (
        22,
        "an org's purges by sequence: whether an index image was made before a purge, asked when one is loaded",
        # `projection.NONE_PURGED_SINCE` on every image load and every open (`images.ORGS_WITH_ONE`) walked every
        # event the org logged since its image; this reads only its purges. Postgres asks it only as it saves an
        # image, under the org's writer lock, and has no such index.
        ["CREATE INDEX memory_events_purged ON memory_events (org_id, seq) WHERE type = 'purged'"],
    ),
    cited_runbooks(
        "CASE WHEN json_type(meta, '$.runbook_id') = 'text' THEN json_extract(meta, '$.runbook_id') END", stored=False
    ),
    INCIDENT_KEYS,
    note_refs.migration(
        "CASE WHEN json_type(data, '$.status') = 'text' THEN json_extract(data, '$.status') END", org_by_org=False
    ),
    (
        26,
        "each organization's incarnation: what a handle's writes are checked against (`grandbo.incarnation`)",
        [
            # Given from the epochs' counter when the org is created (`ensure_org`), never changed: a same-named
            # org created after a drop gets a higher one. An org that exists now keeps its epoch's number.
            "ALTER TABLE orgs ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0",
            "UPDATE orgs SET incarnation = epoch",
        ],
    ),
    erasing.migration("INTEGER"),
    unembeddable.MIGRATION,
    (29, holders.DESCRIPTION, [holders.COLUMN]),
    service_names.MIGRATION,
    (31, outbox_holders.DESCRIPTION, [outbox_holders.COLUMN, outbox_holders.INDEX]),
    (
        32,
        "memory events numbered per organization, as on Postgres: an org's numbers do not count another org's writes",
        [
            # seq was the store's AUTOINCREMENT key: the numbers an org saw (entries, recall hits, the console) went
            # up by every other org's events too, which told it their write volume. Each org's events are numbered
            # again from 1 in the order they were written, and the marks kept of them (each entry's last event, each
            # index image's) move to the same numbers; an image stays usable. The rows of an org whose drop a crash
            # cut short are not copied: the drop, finished at this open, deletes the rest of them.
            "CREATE TABLE renumbered_events (org_id TEXT NOT NULL, old INTEGER NOT NULL, new INTEGER NOT NULL, "
            "PRIMARY KEY (org_id, old)) WITHOUT ROWID",
            "INSERT INTO renumbered_events (org_id, old, new) "
            "SELECT org_id, seq, row_number() OVER (PARTITION BY org_id ORDER BY seq) FROM memory_events",
            # The table's rowid (never read as a number) keeps the write order; the drop deletes by it.
            """CREATE TABLE memory_events_per_org (
                seq      INTEGER NOT NULL,
                org_id   TEXT NOT NULL REFERENCES orgs (org_id),
                entry_id TEXT NOT NULL,
                type     TEXT NOT NULL,
                payload  TEXT NOT NULL,
                actor    TEXT NOT NULL,
                at       TEXT NOT NULL,
                PRIMARY KEY (org_id, seq)
            )""",
            "INSERT INTO memory_events_per_org (seq, org_id, entry_id, type, payload, actor, at) "
            "SELECT r.new, e.org_id, e.entry_id, e.type, e.payload, e.actor, e.at FROM memory_events e "
            "JOIN renumbered_events r ON r.org_id = e.org_id AND r.old = e.seq "
            "WHERE e.org_id IN (SELECT org_id FROM orgs) ORDER BY e.seq",
            *[
                f"UPDATE {table} SET {column} = coalesce((SELECT r.new FROM renumbered_events r "
                f"WHERE r.org_id = {table}.org_id AND r.old <= {table}.{column} ORDER BY r.old DESC LIMIT 1), 0)"
                for table, column in (("memory_entries", "seq"), ("index_images", "entry_seq"))
            ],
            "DROP TABLE renumbered_events",
            "DROP TRIGGER memory_events_append_only_update",
            "DROP TRIGGER memory_events_append_only_delete",
            "DROP TABLE memory_events",
            "ALTER TABLE memory_events_per_org RENAME TO memory_events",
            "CREATE INDEX memory_events_by_entry ON memory_events (org_id, entry_id, seq)",
            "CREATE INDEX memory_events_purged ON memory_events (org_id, seq) WHERE type = 'purged'",
            *[
                f"""CREATE TRIGGER memory_events_append_only_{op.lower()} BEFORE {op} ON memory_events
                WHEN NOT EXISTS (SELECT 1 FROM log_erasures WHERE org_id = OLD.org_id)
                BEGIN SELECT RAISE(ABORT, 'memory_events is append-only'); END"""
                for op in ("UPDATE", "DELETE")
            ],
        ],
    ),
    odd_outcomes.migration(odd_outcomes.SQLITE, stored=False),
    corpus_counts.SQLITE,
]
