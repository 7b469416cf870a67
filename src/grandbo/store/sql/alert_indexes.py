"""Migration 20, written once for both backends: an alert's service and fingerprint each in a column of its own,
derived from its document by the database, and an index of each, the most recently written first.

A triage in an org of more alerts than a process keeps (`triage.run.KEPT_ALERTS`) reads from the store the alerts of
its service and of its fingerprint written since a window began (`triage.past_alerts`), and the alert listing reads
those of one service; without these indexes each read walked every alert of the window by write time, matching each
one's JSON (0.2-1 s a triage in a storm of 50,000 alerts). The columns are the reads' own (`dialect.KEPT_APART`,
`Dialect.text_of`), so the database seeks the indexes, under Postgres's row-level security too. An index holds every
document, NULL but for alerts, so that the alerts that name no service are sought too (`IS NULL`); a write pays one
JSON look-up a column. Postgres keeps the columns stored (it indexes no virtual column) and adds both in one
statement, so `documents` is rewritten once (under a lock every org's writes wait for, as long as the rewrite and
the two index builds take: run `grandbo migrate` when that wait is acceptable); SQLite keeps them virtual (it adds no
stored one to a table) and adds one a statement (its only way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grandbo.store.sql.dialect import Dialect

COLUMNS = (("alert_service", ("alert", "service")), ("alert_fingerprint", ("alert", "fingerprint")))
"""What migration 20 adds, as landed: a column and the path inside `data` it is derived from. A later value kept
apart is a migration of its own, never a line here."""


def migration(dialect: Dialect, stored: bool) -> tuple[int, str, list[str]]:
    """Migration 20 as each backend's list holds it: its number, what it does and its statements in `dialect`."""
    what = "an alert's service and fingerprint in columns, each indexed newest first: a triage's past alerts sought"
    return 20, f"{what}, not scanned", alert_indexes(dialect, stored)


def alert_indexes(dialect: Dialect, stored: bool) -> list[str]:
    """The statements of migration 20 in `dialect`: the columns added, then their indexes."""
    added = [f"ADD COLUMN {column} text GENERATED ALWAYS AS ({dialect.json_at(path)}) "
             f"{'STORED' if stored else 'VIRTUAL'}" for column, path in COLUMNS]  # fmt: skip
    altered = [f"ALTER TABLE documents {', '.join(added)}"] if stored else [f"ALTER TABLE documents {a}" for a in added]
    return altered + [
        f"CREATE INDEX documents_by_{column} ON documents (org_id, collection, {column}, {dialect.written}, doc_id)"
        for column, _ in COLUMNS
    ]
