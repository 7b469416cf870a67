"""Chaos, bounded (issue 26, items 1 and 6): `kill -9` a real `grandbo serve` while incidents are being closed
over REST, after some closes were answered 200, then start it again. Every acknowledged close is whole: its
corroborated findings are memory and its runbook's outcome is in the ledger, once.

Before, the write-behind of a close lived only in the killed process's queue: after the restart the closes
stayed `memory_sync: "pending"` with `memory: {}` for good, and their outcomes never reached the ledger."""

from __future__ import annotations

import os

import httpx
import pytest

from grandbo.model import Status
from grandbo.service import Grandbo
from grandbo.tiers.incident_model import IncidentStatus
from tests.serving import acked_until_killed, serve_process, until

pytestmark = pytest.mark.timeout(180)

INCIDENTS, FINDINGS, ACKED_BEFORE_KILL, CLIENTS = 30, 3, 8, 8


def _env(settings) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = {
        **os.environ,
        "GRANDBO_HOME": str(settings.home),
        "GRANDBO_RATE_LIMIT_PER_KEY": "0",
        "GRANDBO_READYZ_COUNTS": "true",  # the write-behinds waiting, read below
        # A killed process's lease runs out soon, and a restarted one does not wait out the writer's grace.
        "GRANDBO_WRITE_BEHIND_LEASE_SECONDS": "2",
        "GRANDBO_WRITE_BEHIND_GRACE_SECONDS": "1",
        "GRANDBO_WRITE_BEHIND_POLL_SECONDS": "0.2",
    }
    if settings.database_url:
        env["GRANDBO_DATABASE_URL"] = settings.database_url
    return env


def _prepare(settings) -> str:  # type: ignore[no-untyped-def]
    """INCIDENTS open incidents of FINDINGS corroborated findings each; a write key."""
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        for n in range(INCIDENTS):
            incident = memory.incidents.open(f"Checkout errors after deploy {n}", services=["checkout"],
                                             severity="sev2", incident_id=f"INC-{n}")  # fmt: skip
            for f in range(FINDINGS):
                memory.incidents.add_finding(incident.id, f"cause {f} of outage {n}", status="corroborated",
                                             mechanism=f"pool exhaustion {f}", component=f"db-pool-{n}-{f}")  # fmt: skip
        return memory.keys.create("write", name="chaos")[1]


def test_every_close_acknowledged_before_a_kill_9_is_whole_after_the_restart(settings):
    key = _prepare(settings)
    env = _env(settings)
    headers = {"Authorization": f"Bearer {key}"}
    close = {"runbook_used": "RB-POOL", "succeeded": True, "resolution": "pool size raised"}
    process, client = serve_process(env)

    def closing(n: int) -> str | None:
        try:
            response = client.post(f"/v1/incidents/INC-{n}/close", headers=headers, json=close)
        except httpx.TransportError:  # the server died under it: not acknowledged
            return None
        return f"INC-{n}" if response.status_code == 200 else None

    acked = acked_until_killed(process, client, closing, INCIDENTS, clients=CLIENTS, kill_after=ACKED_BEFORE_KILL)
    assert len(acked) >= ACKED_BEFORE_KILL

    with Grandbo.open(settings) as grandbo:  # what the kill left: acknowledged closes whose memory is not written
        incidents = grandbo.org("acme").incidents
        left = [i for i in acked if incidents.get(i).memory_sync == "pending"]
    assert left, "every acknowledged close was synced before the kill: the run proves nothing"

    process, client = serve_process(env)  # the restart
    try:

        def synced(incident: str) -> bool:
            return client.get(f"/v1/incidents/{incident}", headers=headers).json()["memory_sync"] == "done"

        until(lambda: all(synced(incident) for incident in acked), "every acknowledged close was synced")
        until(lambda: client.get("/readyz").json()["store"]["write_behinds"] == 0, "no write-behind waits")
    finally:
        process.terminate()
        process.wait(30)
        client.close()

    with Grandbo.open(settings) as grandbo:
        memory = grandbo.org("acme")
        closed = memory.incidents.find(IncidentStatus.CLOSED)
        assert {i.id for i in closed} >= set(acked)
        for incident in closed:  # every close that committed, acknowledged or not, is whole
            assert incident.memory_sync == "done" and set(incident.memory) == {"f1", "f2", "f3"}, incident.id
            assert all(memory.get(entry).status is Status.ACTIVE for entry in incident.memory.values())
        outcomes = memory.ledger.outcomes(["RB-POOL"])
        assert sorted(o.incident_id or "" for o in outcomes) == sorted(i.id for i in closed)  # once each
        assert len(memory.entries()) == FINDINGS * len(closed)  # no finding written twice
