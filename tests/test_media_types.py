"""Words a client types are matched as their standards say: HTTP media types and Grandbo's own vocabularies
(kinds, outcomes, content types) whatever their case, on a real server, over MCP and on the CLI."""

from __future__ import annotations

import json

import httpx

from grandbo.tiers.learning import Category
from tests.serving import serving
from tests.test_learning import EDITS
from tests.test_webhooks import ALERTMANAGER

SHOUTED = {"Content-Type": "Application/JSON; charset=UTF-8"}


def test_rest_bodies_and_webhooks_sent_as_Application_JSON_are_read_and_kinds_match_in_any_case(grandbo):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("admin")
    with serving(grandbo) as served, served.client(key) as client:
        made = client.post("/v1/memories", content=json.dumps({"title": "restart the pool", "kind": "Runbook",
                                                              "id": "RB-POOL"}), headers=SHOUTED)  # fmt: skip
        assert made.status_code == 201 and made.json()["kind"] == "runbook", made.text
        outcome = client.post("/v1/runbooks/RB-POOL/outcomes", json={"kind": " Succeeded "})
        assert outcome.status_code == 201 and outcome.json()["kind"] == "succeeded", outcome.text
        delivered = client.post("/v1/webhooks/alertmanager", content=json.dumps(ALERTMANAGER), headers=SHOUTED)
        assert delivered.status_code == 202 and delivered.json()["new"] == 3, delivered.text
    assert memory.ledger.effectiveness("RB-POOL").successes == 1


def test_the_mcp_endpoint_reads_a_request_sent_as_Application_JSON(grandbo):
    _, key = grandbo.org("acme", create=True).keys.create("read")
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = SHOUTED | {"Authorization": f"Bearer {key}", "Accept": "Application/JSON, Text/Event-Stream"}
    with serving(grandbo) as served:
        answer = httpx.post(f"{served.url}/mcp", content=json.dumps(request), headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert "query_org_memory" in {tool["name"] for tool in answer.json()["result"]["tools"]}


def test_content_types_of_edits_context_and_examples_are_one_type_whatever_their_case(grandbo):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("admin")
    spellings = ["Status-Update", "status-update", " STATUS-UPDATE"]
    with serving(grandbo) as served, served.client(key) as client:
        for (draft, edited), content_type in zip(EDITS[Category.VOCABULARY], spellings, strict=True):
            sent = {"draft": draft, "edited": edited, "content_type": content_type, "author": "alice"}
            learned = client.post("/v1/signals", json=sent)
            assert learned.status_code == 201, learned.text
        note = learned.json()["note"]
        assert note is not None and note["content_type"] == "status-update"  # one type: the three folded
        client.post(f"/v1/notes/{note['id']}/approve")
        block = client.get("/v1/context", params={"content_type": "Status-Update"}).json()
    assert note["text"] in block["profile"]
    memory.remember({"title": "Checkout is back", "kind": "example", "meta": {"content_type": "Status-Update"}})
    assert [e.title for e in memory.examples("status-update")] == ["Checkout is back"]
    assert [e.title for e in memory.examples("STATUS-UPDATE ")] == ["Checkout is back"]


def test_the_cli_takes_kinds_and_outcomes_in_any_case(cli):
    made = cli("remember", "--id", "RB-POOL", "--title", "restart the pool", "--kind", "Runbook", "--json")
    assert json.loads(made.stdout)["kind"] == "runbook"
    cli("outcome", "RB-POOL", "--kind", "SUCCEEDED")
