"""A list's page is bounded by bytes as well as by count, on every face, and paging on gives every item once.

Before, `GET /v1/incidents?limit=500` over 500 incidents of 250 KiB answered 125 MB in 854 ms and grew the server by
416 MiB, and MCP's `list_incidents` at limit=100 answered 25 MB (hostile probe 19, F2); a symptom, an MCP service or
alert, a recall's severity had no length bound, and an over-long severity or topic was echoed back whole (F8).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import anyio
import pytest

from grandbo.mcp import tools
from grandbo.pages import MAX_PAGE_BYTES
from grandbo.tiers.change_model import NewChange
from tests.serving import serving
from tests.test_mcp import http_client

SYMPTOMS = 100  # of 2,400 characters each: an incident of 240 KB, under the 256 KiB an incident holds


def _large_incidents(memory, count: int) -> list[str]:
    for n in range(count):
        symptoms = [f"{n:03d}-{s:03d} " + "abcdefghij " * 218 for s in range(SYMPTOMS)]
        memory.incidents.open(f"big incident {n}", symptoms=symptoms, incident_id=f"INC-BIG-{n}")
    return [f"INC-BIG-{n}" for n in range(count)]


def _walk(client, path: str, id_of=lambda item: item["id"], **params) -> tuple[list[str], list[int]]:
    """Every item's id, paging on with `next_cursor`, and each page's size in bytes."""
    ids, sizes, cursor = [], [], None
    while True:
        answer = client.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        sizes.append(len(answer.content))
        page = answer.json()
        ids += [id_of(item) for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids, sizes


def test_a_page_of_large_incidents_stays_under_the_byte_bound_and_paging_on_gives_each_once(grandbo, memory):
    made = _large_incidents(memory, 20)  # 4.8 MB
    memory.incidents.open("small one", incident_id="INC-SMALL")
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        ids, sizes = _walk(client, "/v1/incidents", limit=500)
    assert max(sizes) <= MAX_PAGE_BYTES + 1024  # the items and the envelope
    assert len(sizes) >= 3 and sorted(ids) == sorted([*made, "INC-SMALL"])  # each once, none lost
    assert ids[0] == "INC-SMALL"  # the order is the list's: the most recently changed first


def test_mcp_list_incidents_pages_by_bytes_and_its_cursor_gives_the_rest(grandbo, memory):
    made = _large_incidents(memory, 12)
    reads: list[int] = []
    real = memory.incidents.documents.newest
    memory.incidents.documents.newest = lambda *a, **k: reads.append(len(page := real(*a, **k))) or page
    first = tools.list_incidents(memory, None, limit=100)
    assert len(first.model_dump_json()) <= MAX_PAGE_BYTES // 2  # an answer carries it twice: structured and text
    assert first.more and first.next_cursor and len(first.incidents) < 12
    assert sum(reads) <= 2 * len(made)  # read in parts, not 101 incidents for a page of 4
    ids, cursor = [i.id for i in first.incidents], first.next_cursor
    while cursor:
        page = tools.list_incidents(memory, None, limit=100, cursor=cursor)
        ids, cursor = ids + [i.id for i in page.incidents], page.next_cursor
    assert sorted(ids) == sorted(made)


def test_a_page_of_large_memories_stays_under_the_byte_bound_and_paging_on_gives_each_once(grandbo, memory):
    body = "pool exhausted while the cache warmed up again. " * 4000  # 192,000 characters
    memory.remember_many([{"id": f"E-{n:02d}", "title": f"long {n}", "body": body} for n in range(14)])
    memory.remember_many([{"id": f"S-{n:02d}", "title": f"short {n}", "body": "redis resets", "services": ["cart"]}
                          for n in range(30)])  # fmt: skip
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        ids, sizes = _walk(client, "/v1/memories", limit=500)
        cart = client.get("/v1/memories", params={"limit": 30, "service": "cart"}).json()
    assert max(sizes) <= MAX_PAGE_BYTES + 1024
    assert len(sizes) >= 2 and sorted(ids) == [f"E-{n:02d}" for n in range(14)] + [f"S-{n:02d}" for n in range(30)]
    assert len(cart["items"]) == 30 and cart["next_cursor"] is None  # no cursor to an empty page after the last


def test_a_page_of_large_runbooks_stays_under_the_byte_bound_and_paging_on_gives_each_once(grandbo, memory):
    """`GET /v1/runbooks` answered whole runbooks by count alone (about 130 MB at limit=500 of runbooks at their
    caps); each carries its record too."""
    text = "drain the pool and restart the cache warmer again. " * 3600  # 180,000 characters
    for n in range(14):
        memory.runbooks.add(f"RB-{n:02d}", f"restart the warmer {n}", ["drain", "restart"], description=text,
                            services=["cart"])  # fmt: skip
        memory.ledger.record(f"RB-{n:02d}", "succeeded", service="cart")
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        ids, sizes = _walk(client, "/v1/runbooks", id_of=lambda item: item["runbook"]["id"], limit=500)
        first = client.get("/v1/runbooks", params={"limit": 1}).json()["items"][0]
    assert max(sizes) <= MAX_PAGE_BYTES + 1024 and len(sizes) >= 2
    assert sorted(ids) == [f"RB-{n:02d}" for n in range(14)]
    assert first["effectiveness"]["successes"] == 1


def test_changes_and_alert_groups_page_by_bytes_through_the_same_helper(grandbo, memory):
    """Small records: one page holds them all, the answer as before (`Page`'s JSON, the last page's cursor null)."""
    from grandbo.api.routes_changes import ChangePage

    _, key = memory.keys.create("read")
    memory.changes.add(NewChange(id="d1", service="cart", summary="deploy v2", at=datetime.now(UTC)))
    with serving(grandbo) as served, served.client(key) as client:
        changes = client.get("/v1/changes").json()
        groups = client.get("/v1/alert-groups").json()
    assert ChangePage.model_validate(changes).items[0].id == "d1" and changes["next_cursor"] is None
    assert groups == {"items": [], "next_cursor": None}


TOO_LONG = [
    ("/v1/incidents", {"title": "t", "symptoms": ["s" * 2001]}, "symptoms"),
    ("/v1/incidents", {"title": "t", "services": ["s" * 129]}, "services"),
    ("/v1/incidents", {"title": "t", "alerts": ["a" * 129]}, "alerts"),
    ("/v1/incidents", {"title": "t", "severity": "s" * 17}, "severity"),
    ("/v1/recall", {"topic": "redis resets on the auth service", "severity": "x" * 200_000}, "severity"),
    ("/v1/tools/open_incident", {"title": "t", "symptoms": ["s" * 2001]}, "symptoms"),
    ("/v1/tools/open_incident", {"title": "t", "services": ["s" * 129]}, "services"),
    ("/v1/tools/open_incident", {"title": "t", "alerts": ["a" * 129]}, "alerts"),
    ("/v1/tools/record_finding", {"incident_id": "I" * 129, "summary": "keys evicted"}, "incident_id"),
    ("/v1/tools/triage_alert", {"summary": "redis resets", "severity": "x" * 200_000}, "severity"),
]


def test_over_long_items_are_refused_422_naming_the_field_not_echoed(grandbo, memory):
    _, key = memory.keys.create("write")
    with serving(grandbo) as served, served.client(key) as client:
        answers = [(client.post(path, json=body), field) for path, body, field in TOO_LONG]
        vague = client.post("/v1/recall", json={"topic": "x" * 4000})
    for answer, field in answers:
        assert answer.status_code == 422, (field, answer.text[:300])
        assert field in answer.text and len(answer.content) < 4000, (field, answer.text[:300])
    assert memory.incidents.page(10) == ([], None)  # nothing opened
    assert vague.status_code == 422 and vague.json()["error"]["type"] == "topic_too_vague"
    assert len(vague.content) < 1500 and "x" * 80 + "…" in vague.text and "x" * 81 not in vague.text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the SDK's argument handling: one backend is enough
def test_the_mcp_tools_refuse_over_long_items_through_the_sdk(grandbo):
    _, key = grandbo.org("acme", create=True).keys.create("write")

    async def calls(client):
        return [
            await client.call_tool("open_incident", {"title": "t", "symptoms": ["s" * 2001]}),
            await client.call_tool("triage_alert", {"summary": "redis resets", "severity": "x" * 50_000}),
        ]

    async def session(client_for):
        async with client_for() as client:
            return await calls(client)

    with serving(grandbo) as served:
        answers = anyio.run(lambda: session(http_client(served.url, key)))
    for answer, field in zip(answers, ("symptoms", "severity"), strict=True):
        text = answer.content[0].text
        assert answer.is_error and field in text and len(json.dumps(text)) < 1000, text[:300]
