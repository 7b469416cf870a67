"""Org A's key never reads, changes or learns the existence of org B's data through any MCP tool.

The test walks the server's own tool list: every tool must have a case below, so a new tool without one fails.
"""

from __future__ import annotations

import json

import anyio

from grandbo.mcp.server import build
from tests import test_api_isolation as over_rest
from tests.serving import serving
from tests.test_mcp import http_client, session

bravo = over_rest.bravo  # org B with something behind every route (and so behind every tool)

# tool -> arguments naming org B's ids or content ("{b_alert}" is filled in), as an agent of org A could send them
CASES: dict[str, dict[str, object]] = {
    "query_org_memory": {"topic": "bravo zookeeper session expiry on the bravo controller", "k": 20},
    "record_finding": {"incident_id": "INC-B", "summary": "hijack", "status": "corroborated"},
    "report_outcome": {"runbook_id": "RB-B", "outcome": "failed", "incident_id": "INC-B"},
    "get_context_block": {"content_type": "status-update", "topic": "bravo zookeeper session expiry again"},
    "triage_alert": {"alert_id": "{b_alert}"},
    "record_edit": {"draft": "Users were affected by the outage.", "edited": "Customers were affected (alpha).",
                    "content_type": "status-update", "author": "alpha"},
    "list_incidents": {"status": None, "limit": 100},
    "get_incident": {"incident_id": "INC-B"},
    "close_incident": {"incident_id": "INC-B", "runbook_used": "RB-B", "succeeded": True, "time_to_mitigate_s": 60},
    "get_memory": {"memory_id": "B-SECRET"},
    "get_runbook": {"runbook_id": "RB-B"},
    "open_incident": {"title": "alpha's own incident", "incident_id": "INC-ALPHA"},
    "list_changes": {"service": "zk-quorum-bravo-only", "limit": 100},
}  # fmt: skip


FAKE = {**over_rest.FAKE, "INC-B": "INC-NOPE", "RB-B": "RB-NOPE", "B-SECRET": "B-NOPE"}


def _filled(arguments, ids):
    text = json.dumps(arguments)
    for name, value in ids.items():
        if isinstance(value, str):
            text = text.replace("{" + name + "}", value).replace(f'"{name}"', f'"{value}"')
    return json.loads(text)


def _ids_out(text, ids):
    for name in ("b_alert", "INC-B", "RB-B", "B-SECRET"):
        text = text.replace(str(ids.get(name, name)), "ID")
    return text


def test_every_tool_has_an_isolation_case():
    listed = anyio.run(build(lambda *_: None).list_tools)
    assert {tool.name for tool in listed} == set(CASES)


def test_org_a_never_reads_changes_or_learns_of_org_b_through_any_tool(grandbo, bravo):
    _, key = grandbo.org("alpha", create=True).keys.create("admin")
    before = over_rest.snapshot(bravo["memory"])

    async def every_tool(client, ids):
        return {name: await client.call_tool(name, _filled(arguments, ids)) for name, arguments in CASES.items()}

    with serving(grandbo) as served:
        answers = anyio.run(session, http_client(served.url, key), lambda client: every_tool(client, bravo))
        made_up = anyio.run(session, http_client(served.url, key), lambda client: every_tool(client, FAKE))
    for name, answer in answers.items():
        text = json.dumps([part.model_dump(mode="json") for part in answer.content])
        for content in over_rest.B_CONTENT:
            assert content not in text, (name, content, text[:300])
        if answer.is_error:  # refused as an id that exists nowhere is: B's existence does not show
            assert _ids_out(answer.content[0].text, bravo) == _ids_out(made_up[name].content[0].text, FAKE), name
    assert answers["query_org_memory"].is_error is False  # answered, for alpha: nothing of bravo's
    assert answers["record_finding"].is_error and answers["triage_alert"].is_error  # as ids that exist nowhere
    for name in ("get_incident", "close_incident", "get_memory", "get_runbook"):
        assert answers[name].is_error, name
    assert "INC-B" not in answers["list_incidents"].content[0].text
    assert json.loads(answers["list_changes"].content[0].text)["changes"] == []
    assert not answers["record_edit"].is_error  # alpha learns from its own edit, bravo's notes do not move
    assert over_rest.snapshot(bravo["memory"]) == before
