"""Migration 20, written once for both backends: an alert's service and fingerprint each in a column of its own,
derived from its document by the database (`dialect.KEPT_APART`), and an index of each, the most recently written
first.

A triage in an org of more alerts than a process keeps (`triage.run.KEPT_ALERTS`) reads from the store the alerts of
its service and of its fingerprint written since a window began (`triage.past_alerts`), and the alert listing reads
those of one service; without these indexes each read walked every alert of the window by write time, matching each
one's JSON (0.2-1 s a triage in a storm of 50,000 alerts). The columns are the reads' own (`Dialect.text_of`), so
the database seeks the indexes, under Postgres's row-level security too. An index holds every document, NULL but
for alerts, so that the alerts that name no service are sought too (`IS NULL`); a write pays one JSON look-up a
column. Postgres keeps the columns stored (it indexes no virtual column), SQLite virtual (it adds no stored one to a
table).
"""

from __future__ import annotations

from grandbo.store.sql.dialect import KEPT_APART, Dialect


def alert_indexes(dialect: Dialect, stored: bool) -> list[str]:
    """The statements of migration 20 in `dialect`: each column added, then its index."""
    statements = []
    for path, column in KEPT_APART.items():
        statements += [
            f"ALTER TABLE documents ADD COLUMN {column} text GENERATED ALWAYS AS ({dialect.json_at(path)}) "
            f"{'STORED' if stored else 'VIRTUAL'}",
            f"CREATE INDEX documents_by_{column} ON documents "
            f"(org_id, collection, {column}, {dialect.written}, doc_id)",
        ]
    return statements
