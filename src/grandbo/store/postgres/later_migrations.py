"""The Postgres store's migrations from 11 on (the walls between organizations, the index claim, index
images, write-behinds, secrets out of the history, numbered vector writes, images' vectors apart, changes'
services in lower case, alerts by service and fingerprint):
`migrations.MIGRATIONS` ends with them. A landed migration is never edited."""

from __future__ import annotations

from grandbo.ports import UNEMBEDDABLE
from grandbo.store.postgres.dialect import DOCUMENTS
from grandbo.store.postgres.policies import (
    EMBEDDING_COLUMN_SET,
    OUTBOX_DEPTH_POLICY,
    OWN,
    OWN_OR_STORE_WIDE,
    PENDING_COUNT_POLICY,
    STORE_WIDE,
    VECTOR_INDEX_BUILT,
    VECTOR_INDEX_NAMED,
)
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

LATER: list[tuple[int, str, list[str]]] = [
    (
        11,
        "walls for every table and function: the orgs registry and store_meta under row-level security, the DDL "
        "functions refuse another organization, the outbox counted in one statement",
        [
            # orgs: an org-scoped transaction sees and changes its own row only (its writers lock it, its
            # epoch and language change with it, its deletion ends it); a store-wide one lists every org and
            # renumbers their epochs. An org is created by its own transaction (`ensure_org`) and by no other.
            "ALTER TABLE orgs ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE orgs FORCE ROW LEVEL SECURITY",
            f"CREATE POLICY orgs_read ON orgs FOR SELECT USING ({OWN_OR_STORE_WIDE})",
            f"CREATE POLICY orgs_create ON orgs FOR INSERT WITH CHECK ({OWN})",
            f"CREATE POLICY orgs_change ON orgs FOR UPDATE USING ({OWN_OR_STORE_WIDE}) "
            f"WITH CHECK ({OWN_OR_STORE_WIDE})",
            f"CREATE POLICY orgs_delete ON orgs FOR DELETE USING ({OWN})",
            # store_meta (the embedding space) belongs to no org: everyone reads it, only a store-wide
            # transaction changes it.
            "ALTER TABLE store_meta ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE store_meta FORCE ROW LEVEL SECURITY",
            "CREATE POLICY store_meta_read ON store_meta FOR SELECT USING (true)",
            f"CREATE POLICY store_meta_create ON store_meta FOR INSERT WITH CHECK ({STORE_WIDE})",
            f"CREATE POLICY store_meta_change ON store_meta FOR UPDATE USING ({STORE_WIDE}) WITH CHECK ({STORE_WIDE})",
            f"CREATE POLICY store_meta_delete ON store_meta FOR DELETE USING ({STORE_WIDE})",
            # The vector column is every org's: it is replaced only by a store-wide transaction.
            f"""CREATE OR REPLACE FUNCTION grandbo_embedding_column(dimension integer, replace boolean) RETURNS void
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
            DECLARE index_name text;
            BEGIN
                IF NOT ({STORE_WIDE}) THEN
                    RAISE EXCEPTION 'grandbo_embedding_column acts on every organization: call it outside an '
                        'organization''s transaction (grandbo.org_id is %)', current_setting('grandbo.org_id', true)
                        USING ERRCODE = 'insufficient_privilege';
                END IF;"""
            + EMBEDDING_COLUMN_SET,
            # An org's HNSW index is built or dropped by that org's own transaction only.
            """CREATE OR REPLACE FUNCTION grandbo_vector_index(
                org text, build boolean, m integer, ef_construction integer, build_memory text
            ) RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
            DECLARE index_name text :="""
            + VECTOR_INDEX_NAMED
            + """
                IF current_setting('grandbo.org_id', true) IS DISTINCT FROM org THEN
                    RAISE EXCEPTION 'grandbo_vector_index of organization % runs only in its own transaction '
                        '(grandbo.org_id is %)', org, coalesce(current_setting('grandbo.org_id', true), 'unset')
                        USING ERRCODE = 'insufficient_privilege';
                END IF;"""
            + VECTOR_INDEX_BUILT,
            # How many embed jobs wait in the whole store, in one statement (`/readyz` asks without a key, so
            # it must not cost a query per organization), and nothing more than that number. It reads the
            # outbox as the owner, through a policy that holds for the owner role alone and only while this
            # function counts (the setting it raises and lowers around the count; the runtime role may set it
            # too, but the policy is not the runtime role's); a store-wide transaction may call it, an org's
            # may not.
            # (`grant` points the policy at the owner again when the schema changed hands.)
            OUTBOX_DEPTH_POLICY,
            f"""CREATE FUNCTION grandbo_outbox_depth() RETURNS bigint
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
            DECLARE depth bigint;
            BEGIN
                IF NOT ({STORE_WIDE}) THEN
                    RAISE EXCEPTION 'grandbo_outbox_depth counts every organization''s jobs: call it outside an '
                        'organization''s transaction (grandbo.org_id is %)', current_setting('grandbo.org_id', true)
                        USING ERRCODE = 'insufficient_privilege';
                END IF;
                PERFORM set_config('grandbo.outbox_depth', 'counting', true);
                SELECT count(*) INTO depth FROM embed_outbox;
                PERFORM set_config('grandbo.outbox_depth', '', true);
                RETURN depth;
            END $$""",
            "REVOKE ALL ON FUNCTION grandbo_outbox_depth() FROM PUBLIC",
        ],
    ),
    (
        12,
        "an org's HNSW index is asked for by the write path and built by the worker, off every write transaction",
        [
            # Set by a write that finds the org past the HNSW threshold without an index; the worker's
            # maintenance builds the index (CREATE INDEX CONCURRENTLY, as the owner) and clears it.
            "ALTER TABLE orgs ADD COLUMN vector_index_wanted_at timestamptz",
        ],
    ),
    (
        13,
        "an image of each organization's search index, loaded in one read by a process that does not keep it",
        [
            """CREATE TABLE index_images (
                org_id     text PRIMARY KEY REFERENCES orgs (org_id),
                epoch      bigint,
                language   text,
                provider   text,
                model      text,
                dimension  integer,
                entry_seq  bigint NOT NULL,
                vector_seq bigint NOT NULL,
                data       bytea NOT NULL,
                saved_at   timestamptz NOT NULL
            )""",
            "ALTER TABLE index_images ALTER COLUMN data SET STORAGE EXTERNAL",  # read whole: no decompression
            "ALTER TABLE index_images ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE index_images FORCE ROW LEVEL SECURITY",
            "CREATE POLICY index_images_by_org ON index_images "
            "USING (org_id = current_setting('grandbo.org_id', true)) "
            "WITH CHECK (org_id = current_setting('grandbo.org_id', true))",
        ],
    ),
    (
        14,
        "durable write-behinds: work a request acknowledged and left for later, recorded with its write",
        [
            """CREATE TABLE pending_work (
                org_id text NOT NULL REFERENCES orgs (org_id), work_id bigint GENERATED ALWAYS AS IDENTITY,
                kind text NOT NULL, subject text NOT NULL, payload jsonb NOT NULL, attempts integer NOT NULL DEFAULT 0,
                available_at timestamptz NOT NULL DEFAULT now(), claimed_until timestamptz, last_error text,
                created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (org_id, work_id)
            )""",
            "CREATE INDEX pending_work_by_org ON pending_work (org_id, available_at, work_id)",
            "CREATE INDEX pending_work_by_subject ON pending_work (org_id, kind, subject)",
            "ALTER TABLE pending_work ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE pending_work FORCE ROW LEVEL SECURITY",
            f"CREATE POLICY pending_work_by_org ON pending_work USING ({OWN}) WITH CHECK ({OWN})",
            # What waits per org, in one statement (the fair claim's orgs; `/readyz`), as `grandbo_outbox_depth`.
            PENDING_COUNT_POLICY,
            f"""CREATE FUNCTION grandbo_pending_work(max_attempts integer)
            RETURNS TABLE (org_id text, ready bigint, waiting bigint, failed bigint)
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
            BEGIN
                IF NOT ({STORE_WIDE}) THEN
                    RAISE EXCEPTION 'grandbo_pending_work counts every organization''s work: call it outside an '
                        'organization''s transaction' USING ERRCODE = 'insufficient_privilege';
                END IF;
                PERFORM set_config('grandbo.pending_count', 'counting', true);
                RETURN QUERY SELECT w.org_id, count(*) FILTER (WHERE w.attempts < max_attempts AND w.available_at
                    <= now() AND (w.claimed_until IS NULL OR w.claimed_until <= now())), count(*) FILTER (WHERE
                    w.attempts < max_attempts), count(*) FILTER (WHERE w.attempts >= max_attempts)
                    FROM pending_work w GROUP BY w.org_id;
                PERFORM set_config('grandbo.pending_count', '', true);
            END $$""",
            "REVOKE ALL ON FUNCTION grandbo_pending_work(integer) FROM PUBLIC",
        ],
    ),
    (
        15,
        "webhook signing secrets out of the document history: each past event keeps how many secrets it held",
        [
            # Org by org (row-level security holds the migrator too), as an erasure (grandbo.erasing: the
            # append-only trigger lets it through, migration 3).
            """DO $$
            DECLARE
                org text;
            BEGIN
                FOREACH org IN ARRAY coalesce((SELECT array_agg(org_id) FROM orgs), '{}') LOOP
                    PERFORM set_config('grandbo.org_id', org, true);
                    PERFORM set_config('grandbo.erasing', org, true);
                    UPDATE document_events
                    SET data = jsonb_build_object('held', jsonb_array_length(data -> 'secrets'))
                    WHERE org_id = org AND collection = 'webhook_secret' AND jsonb_typeof(data -> 'secrets') = 'array';
                END LOOP;
                PERFORM set_config('grandbo.org_id', '', true);
                PERFORM set_config('grandbo.erasing', '', true);
            END $$""",
        ],
    ),
    (
        16,
        "each organization's vector writes numbered in commit order, for the in-process vector arm's change feed",
        [
            # The org's last vector write: taken and raised under its writer lock (`FOR NO KEY UPDATE` on its
            # row), so an org's numbers commit in order and the highest is a safe watermark (a store-wide sequence
            # is not: a lower number can commit after a higher one). It never goes back: a deleted vector
            # leaves no number to be given twice. Existing orgs and vectors start at 1, so that a first build
            # reads them; a new org at 0.
            "ALTER TABLE orgs ADD COLUMN vector_seq bigint NOT NULL DEFAULT 1",
            "ALTER TABLE orgs ALTER COLUMN vector_seq SET DEFAULT 0",
            "ALTER TABLE entry_vectors ADD COLUMN vseq bigint NOT NULL DEFAULT 1",
            "ALTER TABLE entry_vectors ALTER COLUMN vseq DROP DEFAULT",  # every write states it
            "CREATE INDEX entry_vectors_by_vseq ON entry_vectors (org_id, vseq)",
        ],
    ),
    (
        17,
        "entries by creation: a page of an org's entries (newest first) read from an index, not sorted whole",
        ['CREATE INDEX memory_entries_by_created ON memory_entries (org_id, created_at, entry_id COLLATE "C")'],
    ),
    (
        18,
        "an index image's vectors in a column of their own, so that a first recall reads the image without them",
        [
            # `data` then holds the image up to its vectors, `vectors` the rest (NULL: none, or saved before).
            "ALTER TABLE index_images ADD COLUMN vectors bytea",
            "ALTER TABLE index_images ALTER COLUMN vectors SET STORAGE EXTERNAL",  # read whole: no decompression
        ],
    ),
    services.MIGRATION,
    alert_indexes.migration(DOCUMENTS, stored=True),
    storage.migration(DOCUMENTS, "bigint", org_by_org=True),
    # 22 is SQLite's alone (an index of each org's purges).
    cited_runbooks(
        "CASE WHEN jsonb_typeof(meta -> 'runbook_id') = 'string' THEN meta ->> 'runbook_id' END", stored=True
    ),
    INCIDENT_KEYS,
    note_refs.migration(
        "CASE WHEN jsonb_typeof(data -> 'status') = 'string' THEN data ->> 'status' END", org_by_org=True
    ),
    (
        26,
        "each organization's incarnation: what a handle's writes are checked against (`grandbo.incarnation`)",
        [
            # Given from the epochs' sequence when the org is created (`ensure_org`), never changed: a same-named
            # org created after a drop gets a higher one. An org that exists now keeps its epoch's number (this
            # migration's transaction sets no org: it updates every org's row).
            "ALTER TABLE orgs ADD COLUMN incarnation bigint",
            "UPDATE orgs SET incarnation = epoch",
            "ALTER TABLE orgs ALTER COLUMN incarnation SET DEFAULT nextval('grandbo_epoch')",
            "ALTER TABLE orgs ALTER COLUMN incarnation SET NOT NULL",
        ],
    ),
    erasing.migration("bigint"),
    unembeddable.MIGRATION,
    (
        29,
        holders.DESCRIPTION,
        [
            holders.COLUMN,
            # The holders of leases not run out, every org's, in one statement (`redrive.Redriver`), as
            # `grandbo_pending_work` counts (through its policy); nothing more of the work.
            f"""CREATE FUNCTION grandbo_pending_holders() RETURNS TABLE (org_id text, claimed_by text)
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
            BEGIN
                IF NOT ({STORE_WIDE}) THEN
                    RAISE EXCEPTION 'grandbo_pending_holders reads every organization''s work: call it outside an '
                        'organization''s transaction' USING ERRCODE = 'insufficient_privilege';
                END IF;
                PERFORM set_config('grandbo.pending_count', 'counting', true);
                RETURN QUERY SELECT DISTINCT w.org_id, w.claimed_by FROM pending_work w
                    WHERE w.claimed_until > now() AND w.claimed_by IS NOT NULL;
                PERFORM set_config('grandbo.pending_count', '', true);
            END $$""",
            "REVOKE ALL ON FUNCTION grandbo_pending_holders() FROM PUBLIC",
        ],
    ),
    service_names.MIGRATION,
    (
        31,
        outbox_holders.DESCRIPTION,
        [
            outbox_holders.COLUMN,
            outbox_holders.INDEX,
            # The holders of embed job leases not run out, every org's, in one statement (`EmbedWorker.take_over`),
            # read as `grandbo_outbox_depth` reads (its policy, migration 11); nothing more of the jobs.
            f"""CREATE FUNCTION grandbo_outbox_holders() RETURNS TABLE (org_id text, claimed_by text)
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
            BEGIN
                IF NOT ({STORE_WIDE}) THEN
                    RAISE EXCEPTION 'grandbo_outbox_holders reads every organization''s jobs: call it outside an '
                        'organization''s transaction' USING ERRCODE = 'insufficient_privilege';
                END IF;
                PERFORM set_config('grandbo.outbox_depth', 'counting', true);
                RETURN QUERY SELECT DISTINCT o.org_id, o.claimed_by FROM embed_outbox o
                    WHERE o.claimed_until IS NOT NULL AND o.claimed_until > now() AND o.claimed_by IS NOT NULL;
                PERFORM set_config('grandbo.outbox_depth', '', true);
            END $$""",
            "REVOKE ALL ON FUNCTION grandbo_outbox_holders() FROM PUBLIC",
            # `/readyz`'s counts (GRANDBO_READYZ_COUNTS): the jobs waiting and those that used their attempts, every
            # org's together, in one statement and two numbers (`grandbo_outbox_depth` counted every row as one).
            f"""CREATE FUNCTION grandbo_outbox_counts(max_attempts integer)
            RETURNS TABLE (waiting bigint, failed bigint)
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
            BEGIN
                IF NOT ({STORE_WIDE}) THEN
                    RAISE EXCEPTION 'grandbo_outbox_counts counts every organization''s jobs: call it outside an '
                        'organization''s transaction' USING ERRCODE = 'insufficient_privilege';
                END IF;
                PERFORM set_config('grandbo.outbox_depth', 'counting', true);
                RETURN QUERY SELECT count(*) FILTER (WHERE o.attempts < max_attempts),
                    count(*) FILTER (WHERE o.attempts >= max_attempts AND o.attempts <> {UNEMBEDDABLE})
                    FROM embed_outbox o;
                PERFORM set_config('grandbo.outbox_depth', '', true);
            END $$""",
            "REVOKE ALL ON FUNCTION grandbo_outbox_counts(integer) FROM PUBLIC",
        ],
    ),
    # 32 is SQLite's alone (memory events numbered per organization, as they always were here).
    odd_outcomes.migration(odd_outcomes.POSTGRES, stored=True),
    corpus_counts.POSTGRES,
]
