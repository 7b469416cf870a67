"""The row-level security expressions and policies the Postgres migrations (`migrations.py`,
`later_migrations.py`) and the stores' counting functions share."""

from __future__ import annotations

# A transaction that set no organization (grandbo.org_id unset or empty) acts for the whole store: it lists
# the organizations, records the embedding space, renumbers epochs. One that set an organization acts for it
# alone: it sees and changes only that organization's rows, and the store-wide tables not at all.
STORE_WIDE = "coalesce(current_setting('grandbo.org_id', true), '') = ''"
OWN_OR_STORE_WIDE = "coalesce(current_setting('grandbo.org_id', true), '') IN ('', org_id)"
OWN = "org_id = current_setting('grandbo.org_id', true)"
# Who may read the whole outbox, and when: the owner role (the one creating the policy), while
# `grandbo_outbox_depth()` counts.
OUTBOX_DEPTH_POLICY = (
    "CREATE POLICY embed_outbox_depth ON embed_outbox FOR SELECT TO CURRENT_USER "
    "USING (current_setting('grandbo.outbox_depth', true) = 'counting')"
)

PENDING_COUNT_POLICY = (  # the same for the pending work, while `grandbo_pending_work()` counts (migration 14)
    "CREATE POLICY pending_work_count ON pending_work FOR SELECT TO CURRENT_USER "
    "USING (current_setting('grandbo.pending_count', true) = 'counting')"
)


# The bodies the DDL functions' first versions (migration 7) and their walled versions (migration 11) share, so
# the two cannot drift: the vector column set (or replaced, dropping every org's HNSW index), an org's index
# named and its id checked, the index built or dropped.
EMBEDDING_COLUMN_SET = """
                IF dimension IS NULL OR dimension < 1 OR dimension > 16000 THEN
                    RAISE EXCEPTION 'invalid embedding dimension %', dimension;
                END IF;
                IF replace THEN
                    FOR index_name IN SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()
                        AND tablename = 'entry_vectors' AND indexname LIKE 'entry\\_vectors\\_hnsw\\_%' LOOP
                        EXECUTE format('DROP INDEX IF EXISTS %I', index_name);
                    END LOOP;
                    ALTER TABLE entry_vectors DROP COLUMN IF EXISTS embedding;
                END IF;
                EXECUTE format('ALTER TABLE entry_vectors ADD COLUMN IF NOT EXISTS embedding vector(%s)', dimension);
            END $$"""
VECTOR_INDEX_NAMED = """
                'entry_vectors_hnsw_' || left(encode(sha256(convert_to(org, 'UTF8')), 'hex'), 16);
            BEGIN
                IF org IS NULL OR org !~ '^[a-z0-9][a-z0-9_-]{0,62}$' THEN
                    RAISE EXCEPTION 'invalid organization id %', org;
                END IF;"""
VECTOR_INDEX_BUILT = """
                IF NOT build THEN
                    EXECUTE format('DROP INDEX IF EXISTS %I', index_name);
                    RETURN;
                END IF;
                IF m NOT BETWEEN 4 AND 100 OR ef_construction NOT BETWEEN 16 AND 1000 THEN
                    RAISE EXCEPTION 'invalid HNSW parameters m=% ef_construction=%', m, ef_construction;
                END IF;
                PERFORM set_config('maintenance_work_mem', build_memory, true);
                EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON entry_vectors '
                    'USING hnsw (embedding vector_cosine_ops) WITH (m = %s, ef_construction = %s) '
                    'WHERE org_id = %L', index_name, m, ef_construction, org);
                ANALYZE entry_vectors;
            END $$"""
