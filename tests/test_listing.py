"""Listing an organization's entries a page at a time in the store (`Listing`), as `GET /v1/memories` and
`GET /v1/runbooks` do: the same pages, in the same order, as sorting every entry here did, on both backends.
Before, each page read and validated every entry of the org: a page of a 20,000-entry org took 234 ms (SQLite)
and 388 ms (Postgres), and one org's listing slowed another's recalls 92 times over (a hostile probe)."""

from __future__ import annotations

import itertools
import random
import sqlite3
from datetime import UTC, datetime, timedelta, timezone

import httpx
import psycopg

from grandbo.config import Settings
from grandbo.model import EventType, Kind, Listing
from grandbo.ports import NewEvent
from grandbo.service import Grandbo
from grandbo.store.postgres.dialect import DOCUMENTS as POSTGRES_DIALECT
from grandbo.store.sql.entries import listed
from grandbo.store.sqlite.dialect import DOCUMENTS as SQLITE_DIALECT
from tests.serving import BOUND, serving


def _seeded(memory) -> None:
    rng = random.Random(4)
    kinds, services = ["finding", "runbook", "fact"], ["cart", "auth", "db"]
    for batch in range(6):  # a batch is written at one time: ties on created_at, broken by id
        memory.remember_many([
            {"id": f"E-{rng.choice('abcXYZ')}{batch:02d}{n:02d}", "title": f"{rng.choice(services)} broke, case {batch} {n}",
             "kind": rng.choice(kinds), "services": rng.sample(services, rng.randint(0, 2))}
            for n in range(8)
        ])  # fmt: skip
    every = memory.entries()
    for entry in every[::5]:
        memory.retire(entry.id, reason="stale")
    memory.correct(every[3].id, {"title": "corrected: db broke"}, reason="typo")


def test_the_stores_pages_are_the_whole_sorted_list_cut_in_pieces(memory):
    _seeded(memory)
    for inactive, kind, service in itertools.product((False, True), (None, Kind.RUNBOOK, Kind.FACT), (None, "db")):
        whole = sorted(
            (e for e in memory.entries(include_inactive=inactive)
             if (kind is None or e.kind is kind) and (service is None or service in e.services)),
            key=lambda e: (e.created_at, e.id), reverse=True,
        )  # fmt: skip
        walked, before = [], None
        while True:
            page = memory.entries(include_inactive=inactive, listing=Listing(4, before, kind, service))
            walked += page
            if len(page) < 4:
                break
            before = (page[-1].created_at, page[-1].id)
        assert [e.id for e in walked] == [e.id for e in whole], (inactive, kind, service)
        assert walked == whole
    assert len(memory.entries(include_inactive=True)) > len(memory.entries())  # retired and superseded are there


def test_memories_and_runbooks_page_over_the_api_as_they_did(grandbo, memory):
    _seeded(memory)
    key = memory.keys.create("read")[1]
    with serving(grandbo) as served:
        for path, params, kept in (
            ("/v1/memories", {}, lambda e: True),
            ("/v1/memories", {"service": "DB", "kind": "finding"}, lambda e: "db" in e.services and e.kind is Kind.FINDING),
            ("/v1/runbooks", {"service": "auth"}, lambda e: e.kind is Kind.RUNBOOK and "auth" in e.services),
        ):  # fmt: skip
            ids, cursor = [], None
            while True:
                answer = httpx.get(f"{served.url}{path}", params={**params, "limit": 3, **({"cursor": cursor} if cursor else {})},
                                   headers={"Authorization": f"Bearer {key}"}, timeout=BOUND).json()  # fmt: skip
                ids += [item["runbook"]["id"] if "runbook" in item else item["id"] for item in answer["items"]]
                cursor = answer["next_cursor"]
                if cursor is None:
                    break
            expected = sorted(
                (e for e in memory.entries() if kept(e)), key=lambda e: (e.created_at, e.id), reverse=True
            )
            assert ids == [e.id for e in expected] and ids, (path, params)


def _remembered(entry_id: str, at: datetime) -> NewEvent:
    payload = {"title": f"{entry_id} broke", "kind": "fact", "source": "import", "occurred_at": at.isoformat()}
    return NewEvent(entry_id, EventType.REMEMBERED, payload, "test", at)


def _walked(store, org: str) -> list[str]:
    """Every entry's id, a page of one at a time."""
    walked, before = [], None
    while page := store.entries(org, listing=Listing(1, before)):
        walked.append(page[0].id)
        before = (page[0].created_at, page[0].id)
    return walked


# E-A at 11:00 UTC, given in a zone two hours ahead (an export of a Postgres whose TimeZone was not UTC), then E-B
# at 12:00 and E-C at 11:30: newest first is B, C, A.
NOON = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
WRITTEN = [("E-A", (NOON - timedelta(hours=1)).astimezone(timezone(timedelta(hours=2)))),
           ("E-B", NOON), ("E-C", NOON - timedelta(minutes=30))]  # fmt: skip


def test_an_entry_written_in_another_zone_takes_its_place_in_the_pages(memory, store):
    """The embedded store selects a page by its time as text; an event stamped +02:00 kept that text and sorted
    first, and the cursor past it hid every other entry (the walk ended after E-A)."""
    for entry_id, at in WRITTEN:
        store.append("acme", [_remembered(entry_id, at)])
    assert _walked(store, "acme") == ["E-B", "E-C", "E-A"]
    assert store.entries("acme", listing=Listing(1))[0].id == "E-B"


def test_migration_16_puts_the_times_an_earlier_replay_kept_in_its_zone_in_utc(tmp_path):
    settings = Settings(home=tmp_path / "home", local_model_dir=tmp_path / "model")
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True)
        for entry_id, at in WRITTEN:
            grandbo._store.append("acme", [_remembered(entry_id, at)])
    with sqlite3.connect(settings.home / "grandbo.db") as db:  # as a replay before the fix left them
        db.execute("UPDATE memory_entries SET created_at = '2026-01-01T12:59:59.999999+02:00', "
                   "updated_at = '2026-01-01T13:00:00+02:00' WHERE entry_id = 'E-A'")  # fmt: skip
        db.execute("DELETE FROM schema_migrations WHERE version = 16")
    db.close()
    with Grandbo.open(settings) as upgraded:
        assert _walked(upgraded._store, "acme") == ["E-B", "E-C", "E-A"]
        (entry,) = upgraded._store.get_many("acme", ["E-A"]).values()
        assert entry.created_at == datetime(2026, 1, 1, 10, 59, 59, 999999, tzinfo=UTC)
    with sqlite3.connect(settings.home / "grandbo.db") as db:
        stamps = db.execute("SELECT created_at, updated_at FROM memory_entries WHERE entry_id = 'E-A'").fetchone()
    db.close()
    assert stamps == ("2026-01-01T10:59:59.999999+00:00", "2026-01-01T11:00:00+00:00")


def test_a_page_is_read_through_the_org_s_creation_index_not_sorted_whole(grandbo, settings, backend):
    grandbo.org("acme", create=True)
    dialect = POSTGRES_DIALECT if backend == "postgres" else SQLITE_DIALECT
    where, values, order = listed(dialect, False, Listing(20, before=(datetime(2026, 1, 1, tzinfo=UTC), "E")))
    query = f"SELECT * FROM memory_entries WHERE org_id = {dialect.param}{where} ORDER BY {order}"
    if backend == "sqlite":
        with sqlite3.connect(settings.home / "grandbo.db") as db:
            plan = [str(step[-1]) for step in db.execute(f"EXPLAIN QUERY PLAN {query}", ("acme", *values))]
        db.close()
        assert any("memory_entries_by_created" in step for step in plan) and not any("B-TREE" in s for s in plan), plan
        return
    with psycopg.connect(settings.database_url) as conn:  # an empty table: ask for the plan a large one gets
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_sort = off")
        conn.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
        plan = [row[0] for row in conn.execute(f"EXPLAIN {query}", ("acme", *values))]
    assert any("memory_entries_by_created" in step for step in plan) and not any("Sort" in s for s in plan), plan
