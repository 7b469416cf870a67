"""A large MCP message costs the event loop every organization's requests share nothing it need not (probe 27).

The SDK parses a message and checks a tool call's arguments on the event loop, and parsing holds the GIL even on a
worker thread: a 1 MiB list or object (within the body's bound, sent with a read or write key) held the loop
200-480 ms, and another organization's pings waited as long, once for each such message. A message of more values
than any request takes is now refused before anything parses it; a call's arguments are checked on a worker thread
before the SDK runs the call; a string the SDK would parse as JSON is refused unparsed when it holds that many."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

from grandbo.mcp.envelope import MAX_DEPTH, MAX_VALUES, values_at_least
from tests.serving import BOUND, serving

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def key(grandbo):
    return grandbo.org("alpha", create=True).keys.create("write")[1]


@pytest.fixture
def checks(monkeypatch):
    """For each check of a tool call's arguments by the SDK's own validation, whether it ran on an event loop."""
    seen: list[bool] = []
    validate = FuncMetadata.validate_arguments

    def validate_arguments(self, arguments):  # type: ignore[no-untyped-def]
        seen.append(asyncio._get_running_loop() is not None)
        return validate(self, arguments)

    monkeypatch.setattr(FuncMetadata, "validate_arguments", validate_arguments)
    return seen


def _call(name: str, arguments: object) -> str:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    )


def test_a_message_of_more_values_than_any_request_takes_is_refused_unparsed(grandbo, key, checks):
    """Failed before: the SDK parsed the 1 MiB list on the event loop, checked it there, and answered with the tool's
    refusal (`topic` got list of 990000 characters)."""
    with serving(grandbo) as served:
        post = lambda body: httpx.post(f"{served.url}/mcp", content=body, timeout=BOUND,  # noqa: E731
                                       headers={**HEADERS, "Authorization": f"Bearer {key}"})  # fmt: skip
        listed = post(_call("query_org_memory", {"topic": [0] * 330_000}))
        members = post(_call("query_org_memory", {"topic": "a", "meta": {f"k{n}": 0 for n in range(80_000)}}))
        deep = post(_call("query_org_memory", {"topic": json.loads("[" * 100 + "]" * 100)}))
        fine = post(_call("query_org_memory", {"topic": "redis evicts keys under memory pressure", "k": 3}))
    for refused in (listed, members, deep):
        assert refused.status_code == 400 and refused.json()["error"]["code"] == -32600, refused.text[:300]
        assert f"at most {MAX_VALUES:,} values, nested {MAX_DEPTH} deep" in refused.json()["error"]["message"]
    assert "holds more than 10,000 values" in listed.text and "holds more than 10,000 values" in members.text
    assert f"nests values more than {MAX_DEPTH} deep" in deep.text and deep.json()["id"] == 7
    assert fine.status_code == 200 and not fine.json()["result"]["isError"], fine.text[:300]
    assert checks[0] is False  # only the call that was fine was checked, first off the loop (then by the SDK)


def test_a_call_s_arguments_are_checked_off_the_event_loop_and_said_by_their_size(grandbo, key, checks):
    """Failed before: the SDK checked them on the event loop, and the refusal made the whole list's repr to say it
    was a `list of 150 characters`."""
    with serving(grandbo) as served:
        answer = httpx.post(f"{served.url}/mcp", content=_call("query_org_memory", {"topic": list(range(50))}),
                            headers={**HEADERS, "Authorization": f"Bearer {key}"}, timeout=BOUND)  # fmt: skip
    text = answer.json()["result"]["content"][0]["text"]
    assert answer.json()["result"]["isError"] and "`topic` got a list of 50 items: send a string" in text, text
    assert checks == [False]  # refused on a worker thread; the SDK never checked it on the loop


def test_a_json_text_in_a_string_argument_of_too_many_values_is_refused_unparsed(grandbo, key, checks):
    """The SDK parses a string sent for an argument that is not a string (Claude Desktop sends lists so) with
    `json.loads`: a 1 MiB list inside a `service` held the loop as long as one sent as a list. Failed before: it was
    parsed and checked on the loop (`service` got list of 990000 characters); over REST too."""
    service = json.dumps([0] * 330_000)
    with serving(grandbo) as served:
        over_mcp = httpx.post(f"{served.url}/mcp", content=_call("triage_alert", {"summary": "a", "service": service}),
                              headers={**HEADERS, "Authorization": f"Bearer {key}"}, timeout=BOUND)  # fmt: skip
        over_rest = httpx.post(f"{served.url}/v1/tools/triage_alert", json={"summary": "a", "service": service},
                               headers={"Authorization": f"Bearer {key}"}, timeout=BOUND)  # fmt: skip
    said = "triage_alert was not called: `service` got a JSON text of over 10,000 values: send a string of 1-128"
    assert said in over_mcp.json()["result"]["content"][0]["text"], over_mcp.text[:300]
    assert over_rest.status_code == 422 and said in over_rest.json()["error"]["message"], over_rest.text[:300]
    assert checks == []  # refused before the SDK's check (which parses it) ran at all


@pytest.mark.parametrize(
    "value",
    [[0] * 33, {f"k{n}": n for n in range(80)}, "x, y [{ " * 25, '"\\' * 25 + "\\", ["a\"b", "c\\", 'd\\"e'], [], {},
     "x", [[[[]]]], {"a": [1, 2, {"b": [None, True, "x,y"]}]}, {"a": '\\\\"\\\\'}, {"é": ["\u202e", "\x00"]}],
)  # fmt: skip
def test_the_values_counted_unparsed_are_never_more_than_the_message_holds(value):
    """The count refuses only what the parsed message's own count would refuse."""

    def held(v: object) -> int:
        if isinstance(v, dict):
            return 1 + len(v) + sum(held(m) for m in v.values())
        return 1 + sum(held(m) for m in v) if isinstance(v, list) else 1

    text = json.dumps(value)
    assert 1 <= values_at_least(text) <= held(value)
    assert values_at_least(json.dumps(value, ensure_ascii=False).encode()) == values_at_least(text)


def test_a_string_argument_of_prose_is_taken_as_the_string_it_is_whatever_its_commas(grandbo, key):
    """A post-mortem is `str | None`, so the SDK tries it as JSON; prose is none and stays a string. Failed before
    (review 27 M1): a post-mortem pasting a CSV timeline (10,200 commas, each counted as a value outside a string)
    was refused as "a JSON text of over 10,000 values"; only a text that may be a JSON array or object is counted."""
    timeline = "".join(f"12:{n % 60:02},step {n},ok\n" for n in range(5_100))
    postmortem = f"Redis evicted session keys at maxmemory.\n{timeline}"
    auth = {"Authorization": f"Bearer {key}"}
    with serving(grandbo) as served:
        opened = httpx.post(f"{served.url}/v1/tools/open_incident", json={"title": "Session evictions"},
                            headers=auth, timeout=BOUND)  # fmt: skip
        incident = opened.json()["id"]
        closed = httpx.post(f"{served.url}/v1/tools/close_incident",
                            json={"incident_id": incident, "postmortem": postmortem}, headers=auth, timeout=BOUND)  # fmt: skip
    assert postmortem.count(",") > MAX_VALUES and values_at_least(postmortem) > MAX_VALUES
    assert closed.status_code == 200 and closed.json()["status"] == "closed", closed.text[:300]
