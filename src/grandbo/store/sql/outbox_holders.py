"""Migration 31, written once for both backends: who holds an embed job's lease.

A worker killed mid-claim (a deploy, the OOM killer) left its embed jobs, one of every org with work, to wait out
their lease (30 s to GRANDBO_EMBED_LEASE_SECONDS, 300 s for a worker that had not timed its provider yet) before any
other worker took them. Every lease now records its holder (`store.sql.holders`: host, boot, pid namespace, pid
and start time, as a write-behind's does since migration 29), and a worker ends at once the leases of a holder
proved gone (`worker.EmbedWorker.take_over`): the next claim deals them as it deals a lease that ran out. One on
another machine or container is not proved gone, and its lease runs out as before. The partial index holds the
leased jobs only: the look for their holders never reads a backlog."""

from __future__ import annotations

from grandbo.embed_jobs import LOST, LOST_AGAIN, TIMED_OUT, TIMED_OUT_AGAIN

DESCRIPTION = "an embed job's lease records the worker holding it, so that one proved gone is taken over at once"
COLUMN = "ALTER TABLE embed_outbox ADD COLUMN claimed_by text"
INDEX = "CREATE INDEX embed_outbox_leased ON embed_outbox (org_id, claimed_by) WHERE claimed_until IS NOT NULL"

LOST_BEFORE = (
    "its worker's lease ran out while it held it (the worker was killed, crashed, or stuck past its lease); "
    "counted as a failed attempt, and embedded alone next"
)
"""`ports.LOST` as the releases before migration 31 wrote it (a job then embedded alone at once): a job an upgrade
finds marked so is still embedded alone (review 25: read as fresh, it was dealt in with other orgs' jobs)."""

_LOSSES_MARKED = ((LOST, 1), (LOST_AGAIN, 2), (LOST_BEFORE, 2), (TIMED_OUT, 1), (TIMED_OUT_AGAIN, 3))
"""Each mark a job's `last_error` can hold and the losses in a row it stands for: a batch timed out is dealt as a lease
lost (`embed_jobs.TIMED_OUT`)."""

LOSS_MARKS = tuple(mark for mark, _ in _LOSSES_MARKED)
"""The parameters of `LOSSES`, in its order."""

LOSSES = "CASE last_error " + " ".join(f"WHEN {{p}} THEN {n}" for _, n in _LOSSES_MARKED) + " ELSE 0 END"
"""A job's leases lost (or batches timed out) in a row, as a claim reads it (`queue.Candidate.lost`; parameters:
`LOSS_MARKS`, `p` the driver's placeholder): 0, 1 or 2 (two or more); 3 for batches timed out twice
(`queue.TIMED_OUT_TWICE`)."""
