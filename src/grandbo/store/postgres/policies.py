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
