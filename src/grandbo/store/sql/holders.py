"""Migration 29, written once for both backends: who holds a write-behind's lease.

A process killed while it held write-behinds (an acknowledged close's memory sync, a delivery's alert triages,
leased 8 at a time) left them to wait out the lease, GRANDBO_WRITE_BEHIND_LEASE_SECONDS (300 s), before any other
process redid them (probe 22a: closes without their memories, alerts untriaged for about 5 minutes). Every lease
now records its holder (`grandbo.processes`: host, boot, pid namespace, pid and start time, as the org's import lease
does), and a re-driver frees at once the leases of a holder proved gone (`redrive.Redriver`); one on another
machine or container is not proved gone, and its lease runs out as before."""

from __future__ import annotations

import json

from grandbo.processes import this_process

COLUMN = "ALTER TABLE pending_work ADD COLUMN claimed_by text"
DESCRIPTION = "a write-behind's lease records the process holding it, so that one proved gone is taken over at once"


def holder() -> str:
    """This process as a lease records it: JSON with its keys sorted (a holder's leases are found by equality)."""
    return json.dumps(this_process(), sort_keys=True)


# A lease that ran out (its holder killed on another machine, lost, or stuck past GRANDBO_WRITE_BEHIND_LEASE_SECONDS)
# is counted as a failed attempt by the claim that takes its work again (either backend's lease statement, whose
# SET reads the row as it was): a piece that ends or stalls every runner that takes it stops after
# GRANDBO_WRITE_BEHIND_MAX_ATTEMPTS, where it was leased again and again, never counted (one placeholder: LAPSED).
LAPSED = (
    "its runner's lease ran out while it held it (the runner was killed, lost or stuck past "
    "GRANDBO_WRITE_BEHIND_LEASE_SECONDS); counted as a failed attempt"
)
LAPSED_COUNTED = (
    "attempts = attempts + CASE WHEN claimed_until IS NULL THEN 0 ELSE 1 END, "
    "last_error = CASE WHEN claimed_until IS NULL THEN last_error ELSE {} END"
)
