"""Migration 25, written once for both backends: a learned note's ref is its status and category (`active/tone`),
no longer its category alone (`tiers.learning_model.note_ref`).

The context block, the review queue and an approval each read the notes of a status or two, and read them by
scanning every note the org ever learned, archived and rejected ones included: 20,000 notes took 2.3 s of the
shared process a context block. With the status in the ref they are read through the index on ref (migration 2).
A note whose status cannot be read as text keeps a ref that names no status and is read with every note only.
"""

from __future__ import annotations

from grandbo.store.sql.dialect import for_each_org


def migration(status: str, *, org_by_org: bool) -> tuple[int, str, list[str]]:
    """Migration 25 as each backend's list holds it; `status`: the backend's expression of data.status when it is a
    string, else NULL (an old note without one is active, as `Note` reads it); `org_by_org` where row-level security
    holds the migrator too (Postgres: each org's notes in a transaction set to that org, as migration 21 does)."""
    moved = (
        f"UPDATE documents SET ref = COALESCE({status}, 'active') || '/' || ref "
        "WHERE collection = 'learned_note' AND ref IS NOT NULL AND ref NOT LIKE '%/%'"
    )
    if org_by_org:
        moved = for_each_org(f"{moved} AND org_id = org")
    what = "a learned note's status in its ref: the notes in force or waiting for review read by the index, not scanned"
    return 25, what, [moved]
