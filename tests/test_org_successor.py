"""An organization created again under a dropped one's name is a new organization: nothing of the old one acts on it.

Session 21 gave each org an incarnation that a handle's writes are checked against, from the handle's first write
on (`grandbo.incarnation`). Three ways in were left, each tested here on the code before this change:
- an API key of the dropped org, verified a moment before the drop (and kept in the server's key cache) or by a
  request that then waited its turn, opened a handle with no incarnation yet: its first write, and every read,
  went to the new org (the new org's memories were recalled with the old org's key);
- the re-driver opened its handle by name after leasing a dropped org's work: the work acted on the new org;
- a `grandbo mcp --org` session that had not written yet read, then wrote into, the new org.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from grandbo.config import Settings
from grandbo.errors import OrgDroppedError
from grandbo.memory import OrgMemory
from grandbo.ports import DocumentWrite, NewWork
from grandbo.redrive import INCIDENT_SYNC, Redriver
from grandbo.service import Grandbo
from grandbo.tiers.incident_model import INCIDENTS
from tests.serving import serving
from tests.test_api import assert_error
from tests.test_mcp import payload, session, stdio

OLD = {"id": "OLD-1", "title": "walrus-cache stampede after a cold start", "body": "the old org's memory"}
NEW = {"id": "NEW-1", "title": "walrus-cache stampede, the new org's own", "body": "the new org's secret runbook"}
TOPIC = "walrus-cache stampede after a cold start on the cache tier"


@pytest.fixture
def operator(settings: Settings) -> Iterator[Grandbo]:
    """Another process on the same store (`grandbo orgs delete` then `grandbo orgs create`) with no key cache to wait
    out: it creates the org again a quarter of a second after the drop."""
    with Grandbo.open(settings.model_copy(update={"key_cache_seconds": 0})) as opened:
        yield opened


def _replace(operator: Grandbo, org: str = "acme") -> OrgMemory:
    operator.drop_org(org)
    operator.create_org(org)
    new = operator.org(org)
    new.remember(NEW)
    return new


def _titles(memory: OrgMemory) -> list[str]:
    return sorted(entry.title for entry in memory.entries(include_inactive=True))


def test_a_request_authenticated_before_the_drop_acts_on_no_org_created_after_it(grandbo, operator):
    """A request authenticates, then waits for its org's slot (or uploads its body) while the org is deleted and
    created again: its handle reads and writes the org its key was read in, or nothing."""
    old = operator.org("acme", create=True)
    old.remember(OLD)
    _, key = old.keys.create("write", name="the old org's")
    memory, _ = grandbo.authenticate(key)  # the handle the request holds while it waits
    new = _replace(operator)
    with pytest.raises(OrgDroppedError) as refused:  # an identifier's lookup reads the index alone: checked too
        memory.recall("INC-404")
    assert "after this request's API key was checked" in refused.value.message
    with pytest.raises(OrgDroppedError):
        memory.recall(TOPIC)
    with pytest.raises(OrgDroppedError):
        memory.remember({"title": "a write of the old org's key"})
    with pytest.raises(OrgDroppedError):
        memory.stats()
    assert _titles(new) == [NEW["title"]]


@pytest.fixture
def server(settings: Settings, grandbo: Grandbo) -> Iterator[Grandbo]:
    """A `grandbo serve` process whose key cache outlasts the test: a key it verified is trusted from memory."""
    with Grandbo.open(settings.model_copy(update={"key_cache_seconds": 600}), background=True) as opened:
        yield opened


def _old_keys(operator: Grandbo) -> tuple[str, str]:
    """A write key and a read key of org 'acme', which holds OLD."""
    old = operator.org("acme", create=True)
    old.remember(OLD)
    _, key = old.keys.create("write", name="the old org's")
    _, reader = old.keys.create("read", name="the old org's reader")
    return key, reader


def test_a_cached_key_of_a_dropped_org_writes_nothing_into_the_org_created_again(server, operator):
    key, _ = _old_keys(operator)
    with serving(server) as served, served.client(key) as client:
        assert client.get("/v1/stats").json()["total"] == 1  # verified: kept in the server's key cache
        new = _replace(operator)
        wrote = client.post("/v1/memories", json={"title": "a write with the old org's key", "body": "late"})
        assert_error(wrote, 404, "org_dropped")
        assert "after this request's API key was checked" in wrote.json()["error"]["message"]
    assert _titles(new) == [NEW["title"]]


def test_a_cached_key_of_a_dropped_org_reads_nothing_of_the_org_created_again(server, operator):
    _, key = _old_keys(operator)
    with serving(server) as served, served.client(key) as client:
        assert client.get("/v1/stats").json()["total"] == 1
        _replace(operator)
        for answer in (client.post("/v1/recall", json={"topic": TOPIC}), client.get("/v1/memories/NEW-1")):
            assert answer.status_code in (401, 404) and answer.json()["error"]["type"] != "not_found", answer.text
            assert "secret" not in answer.text and "NEW-1" not in answer.text


def test_re_driven_work_of_a_dropped_org_never_acts_on_the_org_created_again(grandbo, settings, operator):
    """The re-driver leases the old org's work (an incident's sync), then the org is deleted and created again, with
    an incident of the same id, before the re-driver opens its handle: the work went with its org."""
    with Grandbo.open(settings.model_copy(update={"write_behind_grace_seconds": 0})) as writer:  # then it died
        old = writer.org("acme", create=True)
        old.incidents.open("walrus-cache stampede", incident_id="INC-1")
        work = NewWork(INCIDENT_SYNC, "INC-1", {"actor": "the-old-org"})
        old.incidents.documents.put([DocumentWrite("note", "n1", {"n": 1}, "note.added")], "the-old-org", [work])
    successors: list[OrgMemory] = []

    def opened_after_the_drop(org_id: str, **pinned: int | None) -> OrgMemory:
        new = _replace(operator, org_id)
        new.incidents.open("the new org's own incident", incident_id="INC-1", actor="the-new-org")
        successors.append(new)
        return grandbo.org(org_id, **pinned)  # type: ignore[arg-type]

    report = Redriver(grandbo._store, settings, opened_after_the_drop).run_once()
    assert report.done == 1 and report.failed == 0  # done: it went with its org, nothing to retry
    (new,) = successors
    history = new.incidents.documents.history(INCIDENTS, "INC-1")
    assert [event["actor"] for event in history] == ["the-new-org"]
    assert grandbo.redriver.counts() == (0, 0)


# --org serves the embedded store only (test_mcp ends a key's session by deleting its org)
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_mcp_session_whose_org_was_deleted_says_so_and_never_acts_on_the_new_one(
    grandbo, settings, operator, backend
):
    """`grandbo mcp --org acme` (the embedded store's keyless session): the org is deleted and created again while
    the session lasts, before its first write. Every call after is refused with what happened and what to do."""
    old = grandbo.org("acme", create=True)
    old.remember(OLD)
    successors: list[OrgMemory] = []

    async def across_the_drop(client):
        before = await client.call_tool("query_org_memory", {"topic": TOPIC, "k": 3})
        new = _replace(operator)
        new.incidents.open("the new org's own incident", incident_id="INC-1")
        successors.append(new)
        read = await client.call_tool("query_org_memory", {"topic": TOPIC, "k": 3})
        wrote = await client.call_tool("record_finding", {"incident_id": "INC-1", "summary": "the old session's"})
        return before, read, wrote

    before, read, wrote = anyio.run(session, stdio(settings, "--org", "acme"), across_the_drop)
    assert [memory["id"] for memory in payload(before)["memories"]] == ["OLD-1"]
    for refused in (read, wrote):
        text = refused.content[0].text
        assert refused.is_error and "[org_dropped]" in text, text
        assert "was deleted after this MCP session (`grandbo mcp`) started" in text and "Restart the session" in text
        assert "NEW-1" not in text and "secret" not in text
    (new,) = successors
    assert new.incidents.get("INC-1").findings == []
