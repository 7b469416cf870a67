"""A page cut by bytes goes on from the last item it kept, as the read that kept it placed it, whatever is written
meanwhile: paging on gives every unchanged item exactly once.

Before, a page cut inside a read read the list again from its start to find where the cut fell (`pages._past`): an
item changed (moved to the top), closed, retired or dismissed between the two reads shifted that second read by one,
the cursor landed one item too far, and an unchanged item was on no page (review of probe 19: INC-19 never listed).
Here the list's read is made to write, right after it returns, what a concurrent client would: on the old code the
second read saw it; now there is none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from pydantic_core import to_json

from grandbo import pages
from grandbo.api import paging
from grandbo.mcp import tools
from grandbo.ports import DocumentWrite
from grandbo.store.scoped import ScopedDocuments, ScopedEntries
from grandbo.tiers.change_model import NewChange
from grandbo.tiers.changes import CHANGES
from grandbo.tiers.grouping import ALERT_GROUPS, AlertGroup
from grandbo.tiers.incident_model import INCIDENTS
from tests.serving import serving
from tests.test_page_bytes import _walk

ENTRIES = "entries"
Then = Callable[[list[str]], object]


@pytest.fixture
def race(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Then]]:
    """`race[list] = then`: right after the next read of that list (a collection of documents, or ENTRIES) returns,
    `then(the ids of the items it read)` writes, once, as another client would between two reads of a page."""
    armed: dict[str, Then] = {}

    def wrap(cls: type, name: str, listed: Callable[[tuple[Any, ...], dict[str, Any]], str | None]) -> None:
        real = getattr(cls, name)

        def read(self: object, *args: Any, **kwargs: Any) -> Any:
            found = real(self, *args, **kwargs)
            then = armed.pop(listed(args, kwargs) or "", None) if found else None
            if then is not None:
                then([getattr(item, "doc_id", None) or item.id for item in found])
            return found

        monkeypatch.setattr(cls, name, read)

    wrap(ScopedDocuments, "newest", lambda args, _: args[0])
    wrap(ScopedDocuments, "ranged", lambda args, _: args[0])
    wrap(ScopedEntries, "entries", lambda _, kwargs: ENTRIES if kwargs.get("listing") else None)
    yield armed
    assert not armed, "the race never ran: the list was not read as the test expects"


def _walk_racing(grandbo, memory, path: str, budget: int, race: dict[str, Then], listed: str, then: Then,
                 monkeypatch: pytest.MonkeyPatch, **params: Any) -> list[str]:  # fmt: skip
    """Every id `path` lists, `budget` bytes a page, `then` racing the first read of the second page."""
    monkeypatch.setattr(paging, "filled", partial(pages.filled, budget=budget))
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        first = client.get(path, params=params).json()
        assert first["next_cursor"] and len(first["items"]) >= 2  # cut by bytes, not by count (limit: 500)
        race[listed] = then
        rest, sizes = _walk(client, path, id_of=_id_of, cursor=first["next_cursor"], **params)
    assert len(sizes) >= 2  # the second page was cut as well
    return [_id_of(item) for item in first["items"]] + rest


def _id_of(item: dict[str, Any]) -> str:
    return str(item["id"] if "id" in item else item["runbook"]["id"])


def _once(listed: list[str], made: list[str], changed: str) -> None:
    """Every unchanged item exactly once, in any order (the changed one at most once)."""
    assert sorted(i for i in listed if i != changed) == sorted(i for i in made if i != changed)
    assert listed.count(changed) <= 1


def _incidents(memory, count: int = 30) -> list[str]:
    for n in range(count):
        memory.incidents.open(f"incident {n}", incident_id=f"INC-{n:02d}", symptoms=[f"{n} " + "x" * 1900] * 5)
    return [f"INC-{n:02d}" for n in range(count)]


def _budget(item: object, per_page: int = 4) -> int:
    return per_page * len(to_json(item)) + len(to_json(item)) // 2


def test_an_incident_changed_between_reads_of_a_page_leaves_no_other_off_the_pages(grandbo, memory, race,
                                                                                   monkeypatch):  # fmt: skip
    made = _incidents(memory)
    changed: list[str] = []

    def change(read: list[str]) -> None:  # a finding moves it to the top of the list, above the cursor
        changed.append(read[0])
        memory.incidents.add_finding(read[0], "a note")

    budget = _budget(memory.incidents.get(made[0]))
    listed = _walk_racing(grandbo, memory, "/v1/incidents", budget, race, INCIDENTS, change, monkeypatch, limit=500)
    _once(listed, made, changed[0])


def test_an_incident_closed_between_reads_of_a_page_of_open_ones_leaves_no_other_off_the_pages(grandbo, memory, race,
                                                                                               monkeypatch):  # fmt: skip
    made = _incidents(memory)
    closed: list[str] = []

    def close(read: list[str]) -> None:  # it leaves the list of open incidents
        closed.append(read[0])
        memory.incidents.close(read[0], resolution="restarted")

    budget = _budget(memory.incidents.get(made[0]))
    listed = _walk_racing(grandbo, memory, "/v1/incidents", budget, race, INCIDENTS, close, monkeypatch,
                          limit=500, status="open")  # fmt: skip
    _once(listed, made, closed[0])


def test_mcp_list_incidents_leaves_no_incident_off_its_pages_when_one_changes_between_reads(memory, race, monkeypatch):
    made = _incidents(memory)
    monkeypatch.setattr(tools, "MAX_PAGE_BYTES", 2 * _budget(memory.incidents.get(made[0])))
    changed: list[str] = []

    def change(read: list[str]) -> None:
        changed.append(read[0])
        memory.incidents.add_finding(read[0], "a note")

    page = tools.list_incidents(memory, None, limit=100)
    listed, cursor = [i.id for i in page.incidents], page.next_cursor
    assert cursor and len(listed) >= 2
    race[INCIDENTS] = change
    while cursor:
        page = tools.list_incidents(memory, None, limit=100, cursor=cursor)
        listed, cursor = listed + [i.id for i in page.incidents], page.next_cursor
    _once(listed, made, changed[0])


def test_a_memory_retired_between_reads_of_a_page_leaves_no_other_off_the_pages(grandbo, memory, race, monkeypatch):
    memory.remember_many([{"id": f"E-{n:02d}", "title": f"long {n}", "body": f"{n} " + "pool exhausted. " * 600}
                          for n in range(30)])  # fmt: skip
    made = [f"E-{n:02d}" for n in range(30)]
    retired: list[str] = []

    def retire(read: list[str]) -> None:  # it leaves the list of active memories
        retired.append(read[0])
        memory.retire(read[0], reason="wrong")

    budget = _budget(memory.get(made[0]))
    listed = _walk_racing(grandbo, memory, "/v1/memories", budget, race, ENTRIES, retire, monkeypatch, limit=500)
    _once(listed, made, retired[0])


def test_a_change_moved_between_reads_of_a_page_leaves_no_other_off_the_pages(grandbo, memory, race, monkeypatch):
    now = datetime.now(UTC)
    summary = "rolled out the new pool settings. " * 50

    def new(n: int, at: datetime) -> NewChange:
        return NewChange(id=f"d{n:02d}", service="cart", summary=f"{n} {summary}", at=at)

    memory.changes.receive([new(n, now - timedelta(minutes=60 - n)) for n in range(30)], "cli")
    made = [f"d{n:02d}" for n in range(30)]
    moved: list[str] = []

    def move(read: list[str]) -> None:  # delivered again, now: it moves to the top of the list, above the cursor
        moved.append(read[0].removeprefix("cli:"))
        memory.changes.receive([new(int(read[0].removeprefix("cli:d")), datetime.now(UTC))], "cli")

    budget = _budget(memory.changes.get("d00"))
    listed = _walk_racing(grandbo, memory, "/v1/changes", budget, race, CHANGES, move, monkeypatch, limit=500)
    _once(listed, made, moved[0])


def test_an_alert_group_dismissed_between_reads_of_a_page_of_a_service_leaves_no_other_off(grandbo, memory, race,
                                                                                           monkeypatch):  # fmt: skip
    """A list whose read leaves out some of what it read (the groups without the service) still pages on."""
    now = datetime.now(UTC)
    members = [f"alert-{n:04d}-" + "a" * 100 for n in range(20)]
    writes = [
        DocumentWrite(ALERT_GROUPS, f"grp-{n:02d}", AlertGroup(
            id=f"grp-{n:02d}", alerts=members, services=["cart" if n % 3 else "search"], first_seen=now,
            last_seen=now).model_dump(mode="json"), "alert_group.formed", ref="open", expected_version=0)
        for n in range(30)
    ]  # fmt: skip
    for write in writes:  # one write each: each its own write time
        memory.alert_groups.documents.put([write], "test")
    made = [f"grp-{n:02d}" for n in range(30) if n % 3]
    dismissed: list[str] = []

    def dismiss(read: list[str]) -> None:  # the first of the service's groups read leaves the list of open ones
        dismissed.append(next(group for group in read if group in made))
        memory.alert_groups.dismiss(dismissed[0])

    budget = _budget(memory.alert_groups.get("grp-01"))
    listed = _walk_racing(grandbo, memory, "/v1/alert-groups", budget, race, ALERT_GROUPS, dismiss, monkeypatch,
                          limit=500, status="open", service="cart")  # fmt: skip
    _once(listed, made, dismissed[0])
