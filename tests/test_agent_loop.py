"""An agent runs a whole incident over MCP, with the SDK's own client against a real server on loopback: it
triages an alert, opens the incident, records a corroborated finding, closes it with an outcome; the next recall
cites the new memory and the runbook's record moved once."""

from __future__ import annotations

import anyio

from grandbo.eval import beir
from grandbo.eval.runner import load_corpus, shipped_set
from tests.serving import serving
from tests.test_mcp import http_client, payload

ALERT = {
    "summary": "Redis connection reset during key eviction spike; auth-service latency above 1200ms",
    "service": "auth-service",
    "severity": "sev2",
}
FINDING = {
    "summary": "A sidecar's session fingerprint blobs filled redis-sessions after the zephyr-7 rollout",
    "status": "corroborated",
    "mechanism": "zephyr-7 sidecar wrote 40KB fingerprint blobs per session until maxmemory evicted live keys",
    "component": "redis-sessions",
    "root_cause": "the zephyr-7 sidecar rollout shipped without a capacity check",
}
RECALL = "zephyr-7 sidecar fingerprint blobs filling redis-sessions until keys are evicted"


async def _incident(client) -> dict:
    async def call(name: str, arguments: dict) -> dict:
        answer = await client.call_tool(name, arguments)
        assert not answer.is_error, (name, answer.content[0].text)
        return payload(answer)

    plan = await call("triage_alert", ALERT)
    runbook = plan["runbooks"][0]
    before = (await call("get_runbook", {"runbook_id": runbook["id"]}))["effectiveness"]
    # A summary triaged is no received alert: the plan names none (`alert_id` null), so the incident links none.
    opened = await call("open_incident", {"title": "Logins slow: redis evictions", "services": ["auth-service"],
                                          "severity": "sev2", "alerts": [a for a in [plan["alert_id"]] if a]})  # fmt: skip
    listed = await call("list_incidents", {})
    await call("record_finding", {"incident_id": opened["id"], "runbook_id": runbook["id"], **FINDING})
    await call("report_outcome", {"runbook_id": runbook["id"], "outcome": "succeeded", "incident_id": opened["id"],
                                  "time_to_mitigate_s": 540})  # fmt: skip
    closed = await call("close_incident", {"incident_id": opened["id"], "resolution": "rolled back zephyr-7",
                                           "runbook_used": runbook["id"], "succeeded": True,
                                           "time_to_mitigate_s": 540})  # fmt: skip
    recalled = await call("query_org_memory", {"topic": RECALL, "k": 3})
    cited = await call("get_memory", {"memory_id": recalled["memories"][0]["id"]})
    after = await call("get_runbook", {"runbook_id": runbook["id"]})
    return {"plan": plan, "opened": opened, "listed": listed, "closed": closed, "recalled": recalled,
            "cited": cited, "before": before, "after": after}  # fmt: skip


def test_an_agent_runs_an_incident_end_to_end_over_mcp(grandbo):
    memory = grandbo.org("acme", create=True)
    load_corpus(memory, beir.load(shipped_set(), "dev+test"), lambda _: None)
    _, key = memory.keys.create("write")
    with serving(grandbo) as served:
        seen = anyio.run(lambda: _loop(http_client(served.url, key)))
    incident = seen["opened"]["id"]
    assert seen["plan"]["runbooks"][0]["steps"]  # what to do, not []
    assert incident in {i["id"] for i in seen["listed"]["incidents"]}
    assert seen["closed"]["status"] == "closed" and seen["closed"]["time_to_mitigate_s"] == 540
    written = f"{incident}-f1"
    assert seen["recalled"]["memories"][0]["id"] == written  # the next recall cites the new memory
    assert "zephyr-7" in seen["recalled"]["memories"][0]["why"]
    assert seen["cited"]["entry"]["id"] == written and seen["cited"]["history"][0]["type"] == "remembered"
    before, after = seen["before"], seen["after"]["effectiveness"]
    assert (after["attempts"], after["successes"]) == (before["attempts"] + 1, before["successes"] + 1)  # once
    assert seen["after"]["steps"] == seen["plan"]["runbooks"][0]["steps"]


async def _loop(client_for) -> dict:
    async with client_for() as client:
        return await _incident(client)
