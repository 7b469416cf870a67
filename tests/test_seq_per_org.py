"""An organization's sequence numbers count its own writes, on both backends: another org's writes never move them.

The embedded store numbered every org's events in one store-wide sequence, so the numbers an org was shown (an
entry's `seq`, a recall hit's, the history of `get_memory`) went up by the events other orgs wrote: their write volume
showed (a hostile probe's finding). Postgres numbers them per org under the org's writer lock; migration 32 made the
embedded store do the same.
"""

from __future__ import annotations

import anyio

from tests.serving import serving
from tests.test_mcp import http_client, payload, session

TOPIC = "alpha payments gateway timeouts after the certificate rotation"


def _shown(client, url: str, key: str) -> dict[str, object]:
    """Every sequence number alpha is shown of A-1: REST's entry and history, a recall hit, MCP's get_memory."""
    read = client.get("/v1/memories/A-1", params={"history": "true"}).json()
    hits = client.post("/v1/recall", json={"topic": TOPIC, "arm": "lexical", "k": 5}).json()["hits"]
    tool = anyio.run(session, http_client(url, key), lambda mcp: mcp.call_tool("get_memory", {"memory_id": "A-1"}))
    over_mcp = payload(tool)
    return {
        "entry": read["entry"]["seq"],
        "history": [event["seq"] for event in read["history"]],
        "hit": [hit["entry"]["seq"] for hit in hits if hit["entry"]["id"] == "A-1"],
        "mcp": (over_mcp["entry"]["seq"], [event["seq"] for event in over_mcp["history"]]),
    }


def test_an_orgs_sequence_numbers_do_not_move_when_another_org_writes(grandbo):
    beta = grandbo.org("beta", create=True)
    beta.remember_many([{"id": f"B-{n}", "title": f"beta queue backlog {n}", "body": "Consumers lagged."}
                        for n in range(5)])  # fmt: skip
    alpha = grandbo.org("alpha", create=True)
    _, key = alpha.keys.create("admin")
    alpha.remember({"id": "A-0", "title": "Alpha runbook for the ledger", "body": "Fail over to the replica."})
    alpha.remember({"id": "A-1", "title": "Alpha payments gateway timeouts", "body": "After the certificate rotation."})
    with serving(grandbo) as served, served.client(key) as client:
        before = _shown(client, served.url, key)
        beta.remember_many([{"id": f"B-{n}", "title": f"beta disk pressure {n}", "body": "Volumes filled."}
                            for n in range(5, 12)])  # fmt: skip
        beta.retire("B-0", reason="resolved")
        after = _shown(client, served.url, key)
        written = client.post("/v1/memories", json={"id": "A-2", "title": "Alpha ledger replica lag"}).json()
    # Alpha's two events are its first and second, whatever beta wrote before, between and after them.
    assert before == {"entry": 2, "history": [2], "hit": [2], "mcp": (2, [2])}
    assert after == before
    assert written["seq"] == 3


def test_a_purge_redacts_its_own_orgs_events_only(grandbo):
    """Two orgs now hold events of the same numbers: a purge rewrites the events of its org's entry, never another
    org's event that has the same number."""
    alpha, beta = grandbo.org("alpha", create=True), grandbo.org("beta", create=True)
    alpha.remember({"id": "A-1", "title": "Alpha secret rotation", "body": "alpha-token-1 was leaked."})
    beta.remember({"id": "B-1", "title": "Beta cache stampede", "body": "The cache expired at once."})
    assert alpha.get("A-1").seq == beta.get("B-1").seq == 1
    alpha.purge("A-1", reason="leaked secret", actor="admin")
    assert "alpha-token-1" not in str([event.payload for event in alpha.history("A-1")])
    assert [event.payload["body"] for event in beta.history("B-1")] == ["The cache expired at once."]
    assert beta.get("B-1").body == "The cache expired at once."
