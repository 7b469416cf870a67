"""The Postgres store's schema, as numbered migrations. A landed migration is never edited.

Every table holding memory is keyed by `org_id` first (so the tables can be distributed by it) and
protected by row-level security keyed by the per-transaction setting `grandbo.org_id`, FORCEd so
that the owning role is held to it too. The vector column is added when the store is initialized,
because its dimension is the provider's (see `PostgresStore.initialize`).
"""

from __future__ import annotations

from grandbo.store.base import REDERIVE_TERMS
from grandbo.store.postgres.later_migrations import LATER
from grandbo.store.postgres.policies import EMBEDDING_COLUMN_SET, VECTOR_INDEX_BUILT, VECTOR_INDEX_NAMED

# The four tables migration 1 created and put under row-level security (later migrations add the rest, each
# with its own policy). Not `store.base.ORG_TABLES`, every table holding an org's rows.
_MIGRATION_1_TABLES = ("memory_events", "memory_entries", "entry_vectors", "embed_outbox")

_RLS = [
    statement
    for table in _MIGRATION_1_TABLES
    for statement in (
        f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY",
        f"CREATE POLICY {table}_by_org ON {table} USING (org_id = current_setting('grandbo.org_id', true)) "
        f"WITH CHECK (org_id = current_setting('grandbo.org_id', true))",
    )
]

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "event log, projection, vectors, embed outbox, row-level security",
        [
            "CREATE EXTENSION IF NOT EXISTS vector",
            """CREATE TABLE store_meta (
                key   text PRIMARY KEY,
                value text NOT NULL
            )""",
            # Organization ids only, no memory: readable without an org setting so that workers can
            # visit every org.
            # epoch: a store-wide number given to an org when it is created, rebuilt, or its vectors
            # are dropped; in-memory indexes built under another epoch are thrown away.
            "CREATE SEQUENCE grandbo_epoch",
            """CREATE TABLE orgs (
                org_id     text PRIMARY KEY,
                created_at timestamptz NOT NULL DEFAULT now(),
                epoch      bigint NOT NULL DEFAULT nextval('grandbo_epoch')
            )""",
            # No foreign keys on the hot tables: every write holds its org's row lock (and checks it
            # exists) in the same transaction, and a per-row RI trigger would halve bulk throughput.
            # seq is per org, assigned under that lock, so an org's events are numbered in commit order.
            """CREATE TABLE memory_events (
                org_id   text NOT NULL,
                seq      bigint NOT NULL,
                entry_id text NOT NULL,
                type     text NOT NULL,
                payload  jsonb NOT NULL,
                actor    text NOT NULL,
                at       timestamptz NOT NULL,
                PRIMARY KEY (org_id, seq)
            )""",
            "CREATE INDEX memory_events_by_entry ON memory_events (org_id, entry_id, seq)",
            """CREATE FUNCTION grandbo_refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'memory_events is append-only'; END $$""",
            """CREATE TRIGGER memory_events_append_only BEFORE UPDATE ON memory_events
            FOR EACH ROW EXECUTE FUNCTION grandbo_refuse_update()""",
            """CREATE TABLE memory_entries (
                org_id        text NOT NULL,
                entry_id      text NOT NULL,
                title         text NOT NULL,
                body          text NOT NULL,
                kind          text NOT NULL,
                source        text NOT NULL,
                tags          jsonb NOT NULL,
                services      jsonb NOT NULL,
                severity      text,
                occurred_at   timestamptz NOT NULL,
                status        text NOT NULL,
                created_at    timestamptz NOT NULL,
                updated_at    timestamptz NOT NULL,
                supersedes    text,
                superseded_by text,
                meta          jsonb NOT NULL,
                seq           bigint NOT NULL,
                terms         text NOT NULL,
                content_hash  text NOT NULL,
                PRIMARY KEY (org_id, entry_id)
            )""",
            "CREATE INDEX memory_entries_by_seq ON memory_entries (org_id, seq)",
            """CREATE TABLE entry_vectors (
                org_id       text NOT NULL,
                entry_id     text NOT NULL,
                provider     text NOT NULL,
                model        text NOT NULL,
                dimension    integer NOT NULL CHECK (dimension > 0),
                content_hash text NOT NULL,
                embedded_at  timestamptz NOT NULL,
                PRIMARY KEY (org_id, entry_id)
            )""",
            """CREATE TABLE embed_outbox (
                org_id        text NOT NULL,
                job_id        bigint GENERATED ALWAYS AS IDENTITY,
                entry_id      text NOT NULL,
                content_hash  text NOT NULL,
                attempts      integer NOT NULL DEFAULT 0,
                last_error    text,
                available_at  timestamptz NOT NULL DEFAULT now(),
                claimed_until timestamptz,
                created_at    timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (org_id, job_id),
                UNIQUE (org_id, entry_id)
            )""",
            "CREATE INDEX embed_outbox_ready ON embed_outbox (org_id, available_at, job_id)",
            *_RLS,
        ],
    ),
    (
        2,
        "documents: incidents, services, outcomes, settings and profiles, with an append-only history",
        [
            """CREATE TABLE documents (
                org_id     text NOT NULL,
                collection text NOT NULL,
                doc_id     text NOT NULL,
                ref        text,
                data       jsonb NOT NULL,
                version    integer NOT NULL,
                updated_at timestamptz NOT NULL,
                PRIMARY KEY (org_id, collection, doc_id)
            )""",
            "CREATE INDEX documents_by_ref ON documents (org_id, collection, ref)",
            """CREATE TABLE document_events (
                org_id     text NOT NULL,
                seq        bigint GENERATED ALWAYS AS IDENTITY,
                collection text NOT NULL,
                doc_id     text NOT NULL,
                type       text NOT NULL,
                data       jsonb NOT NULL,
                actor      text NOT NULL,
                at         timestamptz NOT NULL,
                PRIMARY KEY (org_id, seq)
            )""",
            "CREATE INDEX document_events_by_doc ON document_events (org_id, collection, doc_id, seq)",
            """CREATE TRIGGER document_events_append_only BEFORE UPDATE ON document_events
            FOR EACH ROW EXECUTE FUNCTION grandbo_refuse_update()""",
            *[
                statement
                for table in ("documents", "document_events")
                for statement in (
                    f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
                    f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY",
                    f"CREATE POLICY {table}_by_org ON {table} USING (org_id = current_setting('grandbo.org_id', true)) "
                    f"WITH CHECK (org_id = current_setting('grandbo.org_id', true))",
                )
            ],
        ],
    ),
    (
        3,
        "the logs refuse DELETE as they refuse UPDATE, except inside an erasure (org deletion, purge)",
        [
            # An erasure is a transaction that set grandbo.erasing to the org it deletes or purges; the
            # store opens one only for `drop_org` and `purge`. A guard against accidents and careless SQL;
            # the runtime role's privileges are the wall against anything else.
            """CREATE OR REPLACE FUNCTION grandbo_refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF current_setting('grandbo.erasing', true) = OLD.org_id THEN
                    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
                    RETURN NEW;
                END IF;
                RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
            END $$""",
            """CREATE TRIGGER memory_events_no_delete BEFORE DELETE ON memory_events
            FOR EACH ROW EXECUTE FUNCTION grandbo_refuse_update()""",
            """CREATE TRIGGER document_events_no_delete BEFORE DELETE ON document_events
            FOR EACH ROW EXECUTE FUNCTION grandbo_refuse_update()""",
        ],
    ),
    (
        4,
        "idempotency keys: a client's key for a write and the entries it wrote, recorded with the write",
        [
            """CREATE TABLE idempotency_keys (
                org_id       text NOT NULL,
                key          text NOT NULL,
                request_hash text NOT NULL,
                entry_ids    jsonb NOT NULL,
                created_at   timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (org_id, key)
            )""",
            "ALTER TABLE idempotency_keys ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE idempotency_keys FORCE ROW LEVEL SECURITY",
            "CREATE POLICY idempotency_keys_by_org ON idempotency_keys "
            "USING (org_id = current_setting('grandbo.org_id', true)) "
            "WITH CHECK (org_id = current_setting('grandbo.org_id', true))",
        ],
    ),
    (
        5,
        "stored terms re-derived by the Unicode tokenizer (NFKC, every script, stemming by language)",
        [REDERIVE_TERMS],
    ),
    (
        7,
        "two roles: the runtime role's only DDL (the vector column, per-org HNSW indexes) as narrow functions",
        [
            # The runtime role owns nothing, so it cannot ALTER a table (nor switch row-level security off).
            # The little DDL a running Grandbo needs runs in these functions, with the owner's rights
            # (SECURITY DEFINER), their arguments checked and their text fixed. EXECUTE is withdrawn from
            # PUBLIC here and granted to the runtime role by `grandbo migrate` (PostgresStore.grant).
            """CREATE FUNCTION grandbo_embedding_column(dimension integer, replace boolean) RETURNS void
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
            DECLARE index_name text;
            BEGIN"""
            + EMBEDDING_COLUMN_SET,
            """CREATE FUNCTION grandbo_vector_index(
                org text, build boolean, m integer, ef_construction integer, build_memory text
            ) RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
            DECLARE index_name text :="""
            + VECTOR_INDEX_NAMED
            + VECTOR_INDEX_BUILT,
            "REVOKE ALL ON FUNCTION grandbo_embedding_column(integer, boolean) FROM PUBLIC",
            "REVOKE ALL ON FUNCTION grandbo_vector_index(text, boolean, integer, integer, text) FROM PUBLIC",
        ],
    ),
    (
        8,
        "an organization's declared language: its terms are derived in it (NULL: each entry's own, detected)",
        ["ALTER TABLE orgs ADD COLUMN language text"],
    ),
    (
        9,
        "document events by collection and sequence: one collection's newest write, and what changed in it since",
        ["CREATE INDEX document_events_by_collection ON document_events (org_id, collection, seq)"],
    ),
    (
        10,
        "documents by write time: a collection's oldest (what alert retention deletes), without reading the rest",
        ["CREATE INDEX documents_by_age ON documents (org_id, collection, updated_at, doc_id)"],
    ),
    *LATER,
]
