"""Migration 28, written once for both backends, and the count it serves: how many of an org's embed jobs are
settled unembeddable (`ports.UNEMBEDDABLE`).

An empty recall's note says how many entries wait for a vector: the index's entries less its vectors, less the
entries that never get one. That last count filtered every embed job of the org by `attempts`, which no index
holds: a read of each queued job's row, 10-24 ms of the shared database an empty answer at a backlog of 50,000
jobs on SQLite, 12-26 ms on Postgres (a worker behind or down), which any read key's nonsense topics asked for
again and again. The partial index
holds the settled jobs alone (none in steady state, and no write of a job still waiting touches it).
"""

from __future__ import annotations

from grandbo.ports import UNEMBEDDABLE

MIGRATION = (
    28,
    "the org's unembeddable embed jobs counted from an index of them alone, not from every queued job's row",
    [f"CREATE INDEX embed_outbox_unembeddable ON embed_outbox (org_id) WHERE attempts = {UNEMBEDDABLE}"],
)
"""Migration 28 as each backend's list holds it."""

COUNT = "SELECT count(*) FROM embed_outbox WHERE org_id = {p} AND attempts = " + str(UNEMBEDDABLE)
"""The org's unembeddable jobs (parameter: the org), the index's condition spelled as it is (a planner matches a
partial index's condition by its text: a parameter in its place would not seek it)."""
