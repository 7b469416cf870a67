"""Bad tool arguments get one sentence naming the argument and what to send, for every tool, through the
SDK's own client on a real server."""

from __future__ import annotations

import anyio
import pytest

from tests.serving import serving
from tests.test_mcp import http_client

BAD = [
    ("query_org_memory", {"topic": "redis evicted keys under memory pressure", "k": "lots"},
     "query_org_memory was not called: `k` got 'lots': send an integer from 1 to 100 (How many memories (1-100))."),
    ("query_org_memory", {}, "`topic` is missing: send a string of 1-4000 characters"),
    # probe 19: taken as k=1 and k=5 before, where REST refused both
    ("query_org_memory", {"topic": "redis evicted keys", "k": True}, "`k` got True: send an integer from 1 to 100"),
    ("query_org_memory", {"topic": "redis evicted keys", "k": "5"}, "`k` got '5': send an integer from 1 to 100"),
    # probe 19: "send a string" for a string it got, not a time
    ("list_changes", {"since": "2020-13-45"}, "`since` got '2020-13-45': send an ISO 8601 time (2026-12-06T08:00:00Z)"),
    ("record_finding", {"incident_id": 5, "summary": "keys evicted"}, "`incident_id` got 5: send a string of 1-128 characters (The open incident's id (open_incident gives it))."),
    ("report_outcome", {"runbook_id": "RB-1", "outcome": "worked"},
     "`outcome` got 'worked': send one of 'recommended', 'executed', 'succeeded', 'failed' (What the runbook did"),
    ("get_context_block", {"topic": ["a", "list"]}, "`topic` got ['a', 'list']: send a string of 1-4000 characters (or leave it out) (A sentence"),
    ("triage_alert", {"summary": "x" * 3000}, "`summary` got str of 3002 characters: send a string of 1-2000"),
    ("record_edit", {"draft": "Users were affected.", "edited": "", "content_type": "status-update", "author": "al"},
     "`edited` got '': send a string of 1-100000 characters (The text as the person sent it)."),
    ("query_org_memory", {"topic": "redis evicted keys under memory pressure", "top_k": 3},
     "query_org_memory was not called: it takes no argument `top_k`; send only `topic` (required), `k`, `detail`."),
]  # fmt: skip


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the SDK's argument handling: one backend is enough
def test_every_tool_refuses_bad_arguments_in_one_sentence_naming_the_argument(grandbo):
    _, key = grandbo.org("acme", create=True).keys.create("write")

    async def calls(client):
        return [await client.call_tool(name, arguments) for name, arguments, _ in BAD]

    with serving(grandbo) as served:
        answers = anyio.run(lambda: _session(http_client(served.url, key), calls))
    for (name, _, said), answer in zip(BAD, answers, strict=True):
        text = answer.content[0].text
        assert answer.is_error and said in text, (name, text)
        assert "validation error" not in text and "errors.pydantic.dev" not in text and "\n" not in text


async def _session(client_for, check):
    async with client_for() as client:
        return await check(client)
