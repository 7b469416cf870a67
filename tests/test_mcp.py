"""A real MCP client session (the SDK's own client) over stdio and over streamable HTTP."""

from __future__ import annotations

import json
import os
import sys
from contextlib import asynccontextmanager

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from grandbo import __version__
from tests.serving import BOUND, serving
from tests.test_webhooks import REDIS

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)

TOOLS = {
    "query_org_memory", "record_finding", "report_outcome", "get_context_block", "triage_alert", "record_edit",
    "open_incident", "list_incidents", "get_incident", "close_incident", "get_memory", "get_runbook", "list_changes",
}  # fmt: skip
TOPIC = "redis connection resets while keys are evicted under memory pressure on auth-service"


def payload(result) -> dict:
    """A tool's answer: its structured content, or the JSON of its text."""
    if getattr(result, "structured_content", None):
        return result.structured_content
    return json.loads(result.content[0].text)


async def session(client_for, check):
    async with client_for() as client:
        return await check(client)


async def tour(client):
    assert client.server_info.name == "grandbo" and client.server_info.version == __version__
    listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    answer = await client.call_tool("query_org_memory", {"topic": TOPIC, "k": 3})
    return tools, answer


@pytest.fixture
def acme(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.remember(REDIS)
    memory.incidents.open("Logins slow", incident_id="INC-9", services=["auth-service"])
    return memory


def http_client(url, key=None):
    return lambda: Client(_over_http(url, {"Authorization": f"Bearer {key}"} if key else {}))


@asynccontextmanager
async def _over_http(url, headers):
    """The SDK's HTTP transport on a client of our own, closed with the session. Its timeout is BOUND, not
    httpx's default 5 s: the served app runs in this process, so a full collection of the test process's heap
    stops the client and the server alike, and on a loaded machine one took 2.3 s (load 13-16) where the calls
    took 10-50 ms: a session failed with a ReadTimeout once at load 10-11."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=BOUND) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as streams,
    ):
        yield streams


def test_an_mcp_session_over_http_lists_the_tools_and_gets_explained_memories(grandbo, acme):
    _, key = acme.keys.create("write")
    with serving(grandbo) as served:
        tools, answer = anyio.run(session, http_client(served.url, key), tour)
        recorded = anyio.run(
            session,
            http_client(served.url, key),
            lambda client: client.call_tool(
                "record_finding", {"incident_id": "INC-9", "summary": "keys evicted", "status": "corroborated"}
            ),
        )
    assert set(tools) == TOOLS
    assert tools["query_org_memory"].annotations.read_only_hint is True
    assert tools["record_finding"].annotations.read_only_hint is False
    assert "sentence" in tools["query_org_memory"].description
    found = payload(answer)
    assert found["memories"][0]["id"] == "INC-044-F1" and found["verdict"] in (
        "seen before",
        "no similar past incident",
    )
    assert found["detail"] == "compact" and "lexical #" not in found["memories"][0]["why"]  # the memory's words
    assert not recorded.is_error and acme.incidents.get("INC-9").findings[0].summary == "keys evicted"


def test_the_http_endpoint_refuses_a_missing_or_foreign_key(grandbo, acme):
    _, read_key = acme.keys.create("read")
    _, other_key = grandbo.org("other", create=True).keys.create("admin")
    with serving(grandbo) as served:
        bare = httpx.post(f"{served.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=BOUND)
        assert bare.status_code == 401 and bare.json()["error"]["type"] == "not_authorized"
        with pytest.raises(BaseExceptionGroup) as refused:  # the SDK client cannot even start a session
            anyio.run(session, http_client(served.url), tour)
        assert any("error response" in str(leaf) for leaf in _leaves(refused.value))  # the 401 above, as MCP says it
        _, foreign = anyio.run(session, http_client(served.url, other_key), tour)
        denied = anyio.run(
            session,
            http_client(served.url, read_key),
            lambda client: client.call_tool("report_outcome", {"runbook_id": "RB-X", "outcome": "succeeded"}),
        )
    assert payload(foreign)["memories"] == [] and "INC-044" not in json.dumps(payload(foreign))
    assert denied.is_error and "scope" in denied.content[0].text
    assert acme.ledger.effectiveness("RB-X").attempts == 0


def _leaves(error):
    """The innermost errors of an exception group (the SDK's task groups wrap the HTTP error)."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def test_an_mcp_request_s_log_line_names_the_org_of_its_key(grandbo, acme):
    """The request log's line for `/mcp` names the key's organization, as every `/v1` line does (it said
    `org: null`, so an operator could not tell whose agent made the call)."""
    import structlog

    from grandbo.logs import configure

    _, key = acme.keys.create("read")
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "query_org_memory",
            "arguments": {"topic": TOPIC, "k": 3}}}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    configure("INFO")  # what `grandbo serve` sets
    try:
        with structlog.testing.capture_logs() as logs, serving(grandbo) as served:
            answered = httpx.post(f"{served.url}/mcp", json=call, headers=headers, timeout=BOUND)
            refused = httpx.post(f"{served.url}/mcp", json=call, timeout=BOUND)
    finally:
        configure()
    assert answered.status_code == 200 and not answered.json()["result"]["isError"]
    assert refused.status_code == 401
    lines = [line for line in logs if line["event"] == "http.request" and line["route"].startswith("/mcp")]
    assert [(line["status"], line["org"]) for line in lines] == [(200, "acme"), (401, None)]


def stdio(settings, *args, key=None):
    env = {**os.environ, "GRANDBO_HOME": str(settings.home)}
    if settings.database_url:
        env["GRANDBO_DATABASE_URL"] = settings.database_url
    if key:
        env["GRANDBO_API_KEY"] = key
    params = StdioServerParameters(command=sys.executable, args=["-m", "grandbo", "mcp", *args], env=env)
    return lambda: Client(params)


def test_an_mcp_session_over_stdio_answers_for_its_org(grandbo, acme, settings):
    _, key = acme.keys.create("read")
    tools, answer = anyio.run(session, stdio(settings, key=key), tour)
    assert set(tools) == TOOLS and payload(answer)["memories"][0]["id"] == "INC-044-F1"
    _, other_key = grandbo.org("other", create=True).keys.create("read")
    _, foreign = anyio.run(session, stdio(settings, key=other_key), tour)
    assert payload(foreign)["memories"] == []


@pytest.mark.parametrize("ended_by", ["revoking the key", "deleting the organization"])
def test_an_mcp_session_over_stdio_ends_with_its_key(grandbo, acme, settings, monkeypatch, ended_by, backend):
    """`grandbo mcp` checked GRANDBO_API_KEY once, at start: an agent's session went on answering for a key
    revoked, or an organization deleted, while it lasted. (The check is the same on both backends, whose
    revocation and deletion are tested on their own: one way to end a session per backend.)"""
    if (backend, ended_by) in {("sqlite", "deleting the organization"), ("postgres", "revoking the key")}:
        pytest.skip("the other backend ends its session this way")
    record, key = acme.keys.create("read")
    monkeypatch.setenv("GRANDBO_KEY_CACHE_SECONDS", "0")  # the served process's key cache: none (it is 2 s)

    async def before_and_after(client):
        before = await client.call_tool("query_org_memory", {"topic": TOPIC, "k": 3})
        if ended_by == "revoking the key":
            acme.keys.revoke(record.id)
        else:
            grandbo.drop_org("acme")
        return before, await client.call_tool("query_org_memory", {"topic": TOPIC, "k": 3})

    before, after = anyio.run(session, stdio(settings, key=key), before_and_after)
    assert payload(before)["memories"][0]["id"] == "INC-044-F1"
    said = {"revoking the key": "GRANDBO_API_KEY is not an active key",  # the org's gone: said so, with what to do
            "deleting the organization": "was deleted after this MCP session (`grandbo mcp`) started"}  # fmt: skip
    assert after.is_error and said[ended_by] in after.content[0].text
    assert "INC-044" not in after.content[0].text


def test_triage_alert_over_mcp_cites_the_key_s_own_org_only(grandbo, acme):
    _, key = acme.keys.create("read")
    _, other_key = grandbo.org("other", create=True).keys.create("read")

    async def triage(client):
        return await client.call_tool("triage_alert", {"summary": TOPIC, "service": "auth-service"})

    with serving(grandbo) as served:
        mine = payload(anyio.run(session, http_client(served.url, key), triage))
        theirs = payload(anyio.run(session, http_client(served.url, other_key), triage))
    assert mine["citations"][0]["id"] == "INC-044-F1" and mine["path"] == "deterministic"
    assert theirs["citations"] == [] and theirs["no_precedent"] is not None


def test_a_tool_refusing_its_input_says_why(grandbo, acme):
    _, key = acme.keys.create("write")
    with serving(grandbo) as served:
        refused = anyio.run(
            session,
            http_client(served.url, key),
            lambda client: client.call_tool(
                "report_outcome", {"runbook_id": "RB-X", "outcome": "succeeded", "time_to_mitigate_s": 5}
            ),
        )
    assert refused.is_error and "No runbook 'RB-X'" in refused.content[0].text
    assert "] Remedy: " in refused.content[0].text  # the remedy REST's error body carries too
    assert acme.ledger.effectiveness("RB-X").attempts == 0


def test_grandbo_mcp_keeps_stderr_quiet_when_a_tool_call_is_refused(acme, settings, tmp_path):
    from mcp.client.stdio import stdio_client

    _, key = acme.keys.create("read")
    env = {**os.environ, "GRANDBO_HOME": str(settings.home), "GRANDBO_API_KEY": key}
    if settings.database_url:
        env["GRANDBO_DATABASE_URL"] = settings.database_url
    server = StdioServerParameters(command=sys.executable, args=["-m", "grandbo", "mcp"], env=env)
    errlog = tmp_path / "stderr.txt"

    async def refused():
        with errlog.open("w") as sink:
            async with Client(stdio_client(server, errlog=sink)) as client:
                return await client.call_tool("query_org_memory", {"topic": "redis-timeout"})

    result = anyio.run(refused)
    assert result.is_error and "Describe the problem in a sentence" in result.content[0].text
    assert errlog.read_text() == ""  # the SDK's "Tool ... failed" INFO line is not the user's console's business


def _mcp_cli(settings, monkeypatch, key: str, *args: str):  # type: ignore[no-untyped-def]
    """`grandbo mcp ARGS` with GRANDBO_API_KEY `key`, run in this process through the CLI app as `python -m grandbo`
    runs it, stdin empty: a refusal comes before the session would read it."""
    from typer.testing import CliRunner

    from grandbo.cli import app

    monkeypatch.setenv("GRANDBO_HOME", str(settings.home))
    monkeypatch.setenv("GRANDBO_API_KEY", key)
    if settings.database_url:
        monkeypatch.setenv("GRANDBO_DATABASE_URL", settings.database_url)
    return CliRunner().invoke(app, ["mcp", *args], input="")


def test_grandbo_mcp_refuses_an_org_that_is_not_the_key_s(grandbo, acme, settings, monkeypatch):
    _, key = acme.keys.create("read")
    grandbo.org("other", create=True)
    done = _mcp_cli(settings, monkeypatch, key, "--org", "other")
    assert done.exit_code == 2 and "a key of organization 'acme', but --org names 'other'" in done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr


def test_grandbo_mcp_with_a_bad_key_names_the_variable_not_a_header(acme, settings, monkeypatch):
    done = _mcp_cli(settings, monkeypatch, "gbk.acme.0123456789ab.not-it")
    assert done.exit_code == 2 and "GRANDBO_API_KEY is not an active key" in done.stderr
    assert "Authorization" not in done.stderr and "Traceback" not in done.stderr


def test_the_context_budget_is_asked_over_rest_and_mcp_as_on_the_cli(grandbo, acme):
    """`grandbo context --budget N` was the only way to size the block an agent puts in its prompt."""
    acme.profile.update(
        {"facts": {f"fact {n}": f"a fact of the organization worth knowing, number {n}" for n in range(20)}}
    )
    _, key = acme.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        whole = client.get("/v1/context").json()
        small = client.get("/v1/context", params={"budget": 200}).json()
        refused = client.get("/v1/context", params={"budget": 0})
        over_mcp = anyio.run(
            session,
            http_client(served.url, key),
            lambda mcp: mcp.call_tool("get_context_block", {"budget": 200}),
        )
        too_big = anyio.run(
            session, http_client(served.url, key), lambda mcp: mcp.call_tool("get_context_block", {"budget": 10**9})
        )
    assert not whole["truncated"] and len(whole["profile"]) > 1000
    assert small["truncated"] and 0 < len(small["profile"]) <= 200
    assert refused.status_code == 422 and "budget" in refused.text
    block = payload(over_mcp)
    assert block["truncated"] and len(block["context"]) < len(whole["profile"])
    assert too_big.is_error and "budget" in too_big.content[0].text


def test_a_writing_agent_records_how_its_draft_was_edited_over_mcp(grandbo, acme):
    """REST had POST /v1/signals and the CLI `grandbo edit`; an agent on MCP could read the context block but
    not say how a person edited its draft."""
    _, write_key = acme.keys.create("write")
    _, read_key = acme.keys.create("read")
    edits = [
        {"draft": f"Users were unable to log in for {n} minutes.", "edited": f"Customers were unable to log in for "
         f"{n} minutes.", "content_type": "Status-Update", "author": "alice"}
        for n in (10, 20, 30)
    ]  # fmt: skip

    async def three_edits(client):
        return [await client.call_tool("record_edit", edit) for edit in edits]

    with serving(grandbo) as served:
        answers = anyio.run(session, http_client(served.url, write_key), three_edits)
        denied = anyio.run(
            session, http_client(served.url, read_key), lambda client: client.call_tool("record_edit", edits[0])
        )
        nobody = anyio.run(
            session,
            http_client(served.url, write_key),
            lambda client: client.call_tool("record_edit", {**edits[0], "author": "   "}),
        )
    first, _, third = (payload(answer) for answer in answers)
    assert not any(answer.is_error for answer in answers)
    assert first["signal"]["category"] == "vocabulary" and first["signal"]["author"] == "alice"
    assert first["signal"]["content_type"] == "status-update" and "draft" not in first["signal"]
    assert first["note"] is None and third["note"]["status"] == "pending"
    assert "'customers' instead of 'users'" in third["note"]["text"].lower()
    assert [s.author for s in acme.learning.signals()] == ["alice"] * 3  # the read key's call stored nothing
    assert denied.is_error and "this tool needs write" in denied.content[0].text
    assert nobody.is_error and "`author` over the API and MCP" in nobody.content[0].text
