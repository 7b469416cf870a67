"""The analytics page's charts over entries are counted by the store (`OrgMemory.figures`), on both backends, and
give exactly what counting every entry in the process gave: the page read every entry of an org on its first view
in a process (and a sign-in read them ahead of it), 26-57 s of the shared process at 228,000 entries (probe 20a).
What the SQL cannot work out alike on both backends, the incident an entry belongs to, the projection keeps beside
it (migration 24)."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest

from grandbo.memory import OrgMemory
from grandbo.model import Entry, Kind
from grandbo.service import Grandbo
from grandbo.store.scoped import ScopedEntries
from grandbo.triage.evidence import incident_of
from grandbo.web import analytics
from tests.conftest import owner_url, undo_migration
from tests.serving import serving
from tests.test_console_http import signed_in

START = datetime(2024, 3, 1, 22, 0, tzinfo=UTC)
# meta.incident_id as people and tools write it: text, numbers, true, and the empty ones (its tags decide then).
INCIDENT_IDS = ["INC-7", 7, 2.5, True, 0, "", None, ["a"], {"b": 1}, "inc-db-2024"]
TAGS = [[], ["INC-12"], ["see:INC-31,too"], ["xINC-4"], ["INC-4a"], ["INC-12", "INC-13"], ["sev1"]]
SERVICES = [["orders-db"], ["orders-db", "checkout-api"], ["checkout-api", "checkout-api"], [], ["kafka"]]
KINDS = ["finding", "post-mortem", "note", "runbook", "finding", "fact"]
ZONES = ["+00:00", "-05:00", "+09:00", "-11:30"]


def _fill(memory: OrgMemory, n: int = 90) -> None:
    """An org whose entries are every case the figures distinguish: kinds, statuses (corrected, retired, purged),
    incidents told by meta, tags or the id, services repeated or none, times of day in other zones."""
    written = []
    for i in range(n):
        meta = {} if INCIDENT_IDS[i % 10] is None else {"incident_id": INCIDENT_IDS[i % 10]}
        at = START + timedelta(hours=7 * i)
        written.append({
            "id": f"E{i:03d}" if i % 9 else f"note-INC-{i}", "kind": KINDS[i % 6], "title": f"replica lag {i}",
            "body": "the orders replica lagged", "tags": TAGS[i % 7], "services": SERVICES[i % 5], "meta": meta,
            "occurred_at": at.astimezone(datetime.fromisoformat(f"2024-01-01T00:00{ZONES[i % 4]}").tzinfo).isoformat(),
        })  # fmt: skip
    memory.remember_many(written)
    for i in range(1, n, 8):
        memory.correct(written[i]["id"], {"title": f"replica lag {i}, corrected"}, reason="typo")
    for i in range(2, n, 10):  # even: none of those corrected
        memory.retire(written[i]["id"], reason="stale")
    memory.purge(written[5]["id"], reason="held a secret", actor="admin")  # tags and meta erased: its own incident
    for number, services in ((7, ["orders-db"]), (12, ["orders-db", "kafka"]), (99, ["checkout-api"]), (5, [])):
        memory.incidents.open(f"incident {number}", services=services, incident_id=f"INC-{number}")


def _counted_in_process(memory: OrgMemory) -> tuple[list[tuple[str, int]], Counter, Counter, int]:  # type: ignore[type-arg]
    """What the page counted from every entry before the store counted them (the code it replaced), by days in UTC."""
    entries: list[Entry] = memory.entries(include_inactive=True)
    per_service: dict[str, set[str]] = defaultdict(set)
    for incident in memory.incidents.summaries():
        for service in incident.services:
            per_service[service].add(incident.id)
    for entry in entries:
        if entry.kind in (Kind.FINDING, Kind.POSTMORTEM) and entry.status.value != "superseded":
            for service in entry.services:
                per_service[service].add(incident_of(entry) or entry.id)
    busiest = sorted(((s, len(ids)) for s, ids in per_service.items()), key=lambda r: (-r[1], r[0]))
    stored = Counter(e.created_at.astimezone(UTC).date() for e in entries)  # the days in UTC, on either backend
    return busiest[:15], stored, Counter(e.occurred_at.astimezone(UTC).date() for e in entries), len(entries)


def _figures_of(memory: OrgMemory) -> tuple[list[tuple[str, int]], dict, dict, int]:  # type: ignore[type-arg]
    incidents = memory.incidents.summaries()
    figures = memory.figures([incident.id for incident in incidents])
    assert figures is not None
    built = analytics.build(memory, figures, incidents)
    assert built.growth["by the day it was stored"] == analytics._cumulative(figures.stored)
    assert built.growth["by the day it happened"] == analytics._cumulative(figures.happened)
    return built.incidents, figures.stored, figures.happened, built.entries


def test_the_figures_counted_by_the_store_are_those_every_entry_gives(memory):
    _fill(memory)
    expected = _counted_in_process(memory)
    assert len(expected[2]) > 20 and expected[0][0][1] > 5  # days and incidents enough to tell a difference
    assert _figures_of(memory) == expected


def test_the_figures_are_counted_again_only_once_an_entry_changed(memory):
    _fill(memory, 20)
    figures = memory.figures()
    assert figures is not None and memory.figures(since=figures.seq) is None
    memory.retire("E004", reason="stale")
    again = memory.figures(since=figures.seq)
    assert again is not None and again.seq > figures.seq and again.entries == figures.entries


def test_the_first_analytics_view_of_an_org_reads_none_of_its_entries(grandbo, monkeypatch):
    """The sign-in read every entry of the org ahead of its analytics, and a first view read them again."""
    memory = grandbo.org("big", create=True)
    _fill(memory, 60)
    _, key = memory.keys.create("read", name="console")
    read: list[int] = []
    entries, get_many = ScopedEntries.entries, ScopedEntries.get_many
    monkeypatch.setattr(ScopedEntries, "entries", lambda self, **kw: read.append(len(found := entries(self, **kw))) or found)  # fmt: skip
    monkeypatch.setattr(ScopedEntries, "get_many", lambda self, ids: read.append(len(found := get_many(self, ids))) or found)  # fmt: skip
    with serving(grandbo) as served:
        client = signed_in(served, key)
        page = client.get("/ui/analytics")
        grandbo.flush(60)
        client.close()
    assert page.status_code == 200 and "orders-db" in page.text
    assert sum(read) == 0, read


def _old_store(settings):  # type: ignore[no-untyped-def]
    return undo_migration(
        settings, 24, "DROP INDEX memory_entries_by_incident", "DROP INDEX memory_entries_by_occurrence",
        "ALTER TABLE memory_entries DROP COLUMN incident_key",
    )  # fmt: skip


def test_entries_stored_before_migration_24_are_counted_alike_after_it(settings):
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        _fill(memory)
        expected = _counted_in_process(memory)
    with Grandbo.open(_old_store(settings)) as upgraded:
        assert _figures_of(upgraded.org("acme")) == expected


@pytest.mark.parametrize("entries", [0, 1])
def test_an_org_of_no_or_one_entry_has_figures(memory, entries):
    if entries:
        memory.remember({"kind": "finding", "title": "Replica lag", "services": ["orders-db"], "tags": ["INC-1"]})
    assert _figures_of(memory) == _counted_in_process(memory)


def test_an_entry_whose_incident_is_longer_than_an_index_holds_is_written_counted_and_linked(memory):
    """Postgres refuses an index row past 2,704 bytes, and with it the write: the index of incidents holds keys of
    up to 500 characters, and a longer one is counted and linked by a scan."""
    long = "".join(f"{n:x}" for n in range(1, 1200))  # about 3,500 characters that do not compress
    memory.remember(
        {"kind": "finding", "title": "Replica lag", "services": ["orders-db"], "meta": {"incident_id": long}}
    )
    memory.remember({"kind": "post-mortem", "title": "Lag", "services": ["orders-db", "kafka"], "tags": ["INC-3"]})
    figures = memory.figures([long, "INC-3", "INC-4"])
    assert figures is not None and figures.incidents == {"orders-db": 2, "kafka": 1}
    assert sorted(figures.linked) == sorted([("orders-db", long), ("orders-db", "INC-3"), ("kafka", "INC-3")])


@pytest.fixture
def zoned(settings, backend):  # type: ignore[no-untyped-def]
    """The settings of a store whose Postgres sessions start in a zone 14 hours ahead of UTC (its database's
    TimeZone, as a server in Kiribati is set up), and put back after the test."""
    if backend == "postgres":
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn:
            name = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
            conn.execute(f"ALTER DATABASE {name} SET TimeZone = 'Pacific/Kiritimati'")  # type: ignore[arg-type]
    yield settings
    if backend == "postgres":
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {name} RESET TimeZone")  # type: ignore[arg-type]


def test_entries_are_counted_by_their_day_in_utc_whatever_the_servers_zone(zoned):
    """Postgres counted the day of a time in the session's zone and SQLite the day its text was written in: on a
    server set to another zone, an entry of 23:30 UTC fell on the next day, and one of 21:00 at -05:00 on its writer's
    day (a day early) on SQLite. Both count the day in UTC."""
    with Grandbo.init(zoned, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        written = {"2024-03-01T23:30:00+00:00": "late", "2024-03-02T00:10:00+00:00": "early",
                   "2024-03-01T21:00:00-05:00": "evening"}  # fmt: skip
        memory.remember_many([{"kind": "note", "title": title, "occurred_at": at} for at, title in written.items()])
        figures = memory.figures()
        entries = memory.entries()
    assert figures is not None
    assert figures.happened == {date(2024, 3, 1): 1, date(2024, 3, 2): 2}
    assert figures.stored == Counter(e.created_at.astimezone(UTC).date() for e in entries)
