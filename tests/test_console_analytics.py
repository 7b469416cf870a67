"""The analytics page's numbers are built from every outcome and incident of an org and what its entries add up to;
the process keeps them and builds them again only once one of those changed (probe 19 F3: a build a view, about 0.5
s of CPU at 20,000 entries and 100,000 outcomes; four read keys polling the page took another org's recall p95 11 ->
730 ms). Counted in builds (counts of the whole ledger), never in time."""

from __future__ import annotations

import re
import threading

import pytest

from grandbo.tiers.ledger import Ledger
from grandbo.web import analytics, charts
from grandbo.web.analytics import AnalyticsCache
from tests.serving import serving
from tests.test_console_http import signed_in


def _tile(page: str, name: str) -> int:
    found = re.search(rf"<dt>{name}</dt><dd[^>]*>(\d+)</dd>", page)
    assert found is not None, page[:500]
    return int(found.group(1))


def test_analytics_is_built_once_per_change_of_the_orgs_data_not_on_each_view(grandbo, monkeypatch):
    memory = grandbo.org("alpha", create=True)
    memory.runbooks.add("RB-1", "Restart the replica", ["restart", "verify"])
    memory.ledger.record("RB-1", "succeeded", service="orders-db", time_to_mitigate_s=300)
    memory.remember({"kind": "finding", "title": "Replica lag", "body": "The orders replica lagged 40 s."})
    _, key = memory.keys.create("read", name="console")
    builds: list[str] = []
    tally = Ledger.tally

    def counted(self):  # type: ignore[no-untyped-def]
        builds.append(self.memory.org)
        return tally(self)

    monkeypatch.setattr(Ledger, "tally", counted)
    with serving(grandbo) as served:
        client = signed_in(served, key)
        views = [client.get("/ui/analytics").text for _ in range(4)]
        assert len(builds) == 1, builds  # the old page: one build a view
        assert all(_tile(page, "runbook outcomes") == 1 for page in views)
        entries = _tile(views[0], "entries \\(all statuses\\)")

        memory.ledger.record("RB-1", "failed", service="orders-db")  # a write is on the next view
        assert _tile(client.get("/ui/analytics").text, "runbook outcomes") == 2 and len(builds) == 2
        memory.remember({"kind": "finding", "title": "Replica lag again", "body": "It lagged 90 s this time."})
        assert _tile(client.get("/ui/analytics").text, "entries \\(all statuses\\)") == entries + 1
        memory.incidents.open("orders database lag", services=["orders-db"], incident_id="INC-1")
        assert "orders-db" in client.get("/ui/analytics").text and len(builds) == 4
        memory.keys.create("read", name="another")  # a document written, of none the numbers are made of
        client.get("/ui/analytics")
        assert len(builds) == 4
        client.close()


def test_views_of_one_org_at_once_wait_for_one_build(grandbo, monkeypatch):
    memory = grandbo.org("alpha", create=True)
    memory.runbooks.add("RB-1", "Restart the replica", ["restart", "verify"])
    memory.ledger.record("RB-1", "succeeded", service="orders-db", time_to_mitigate_s=300)
    cache, build = AnalyticsCache(), analytics.build
    building, release, builds = threading.Event(), threading.Event(), []

    def held(memory, figures, incidents):  # type: ignore[no-untyped-def]
        builds.append(memory.org)
        building.set()
        assert release.wait(30)
        return build(memory, figures, incidents)

    monkeypatch.setattr(analytics, "build", held)
    seen: list[analytics.Analytics] = []
    views = [threading.Thread(target=lambda: seen.append(cache.get(grandbo.org("alpha")))) for _ in range(4)]
    for view in views:
        view.start()
    assert building.wait(30)
    while True:  # every view has arrived: the others wait on the one building
        with cache._lock:
            if cache._gates["alpha"].users == 4:
                break
        threading.Event().wait(0.01)
    release.set()
    for view in views:
        view.join(30)
    assert builds == ["alpha"] and len(seen) == 4 and all(one is seen[0] for one in seen)
    assert seen[0].outcomes == 1 and not cache._gates  # the gate goes with its last view


def test_the_embedding_counts_are_read_again_without_a_build_and_orgs_kept_are_bounded(grandbo, monkeypatch):
    orgs = [grandbo.org(name, create=True) for name in ("alpha", "beta", "gamma")]
    for memory in orgs:
        memory.remember({"kind": "finding", "title": "Replica lag", "body": "The orders replica lagged 40 s."})
    cache, builds = AnalyticsCache(max_orgs=2), []
    build = analytics.build
    monkeypatch.setattr(analytics, "build", lambda memory, *made: builds.append(memory.org) or build(memory, *made))
    monkeypatch.setattr(analytics, "STATS_SECONDS", 0.0)
    first = cache.get(orgs[0])
    again = cache.get(orgs[0])
    assert builds == ["alpha"] and again.stats is not first.stats and again.runbooks is first.runbooks
    for memory in orgs[1:]:
        cache.get(memory)
    assert list(cache._kept) == ["beta", "gamma"]  # the least recently viewed went
    cache.get(orgs[0])
    assert builds == ["alpha", "beta", "gamma", "alpha"]


@pytest.mark.org_made_again_at_once
def test_an_org_writing_before_each_view_gets_a_build_per_stretch_not_one_a_view(grandbo, monkeypatch):
    """Probe 23b: an org that recorded an outcome before each view changed its data every time, so each view built
    its numbers again (0.27 s of CPU at 100,000 outcomes; four such loops took another org's recall p50 7 -> 83 ms).
    A build that took a while is not made again sooner than REBUILD_EVERY times as long after it: the views meanwhile
    show the numbers kept, saying how old they are; after that, the next view shows every write. Counted on a clock
    the test moves (a build "takes" a second of CPU), never in time."""
    memory = grandbo.org("alpha", create=True)
    memory.runbooks.add("RB-1", "Restart the replica", ["restart", "verify"])
    memory.ledger.record("RB-1", "succeeded", service="orders-db", time_to_mitigate_s=300)
    now = [100.0]
    cache, build, builds = AnalyticsCache(clock=lambda: now[0], cpu=lambda: now[0]), analytics.build, []

    def taking_a_second(memory, figures, incidents):  # type: ignore[no-untyped-def]
        builds.append(memory.org)
        now[0] += 1.0
        return build(memory, figures, incidents)

    monkeypatch.setattr(analytics, "build", taking_a_second)
    assert cache.get(memory).outcomes == 1 and builds == ["alpha"]
    memory.ledger.record("RB-1", "failed", service="orders-db")  # the first build's cost may be a first use's
    assert cache.get(memory).outcomes == 2 and builds == ["alpha", "alpha"]
    for _ in range(3):
        memory.ledger.record("RB-1", "failed", service="orders-db")
        now[0] += 2.0
        held = cache.get(memory)
        assert held.outcomes == 2 and held.held_s > 0
    assert builds == ["alpha", "alpha"]
    now[0] += analytics.REBUILD_EVERY * 1.0
    assert cache.get(memory).outcomes == 5 and builds == ["alpha"] * 3
    grandbo.drop_org("alpha")  # created again under its name within the stretch: a new org, built afresh
    again = grandbo.org("alpha", create=True)
    again.runbooks.add("RB-2", "Fail over", ["fail over"])
    again.ledger.record("RB-2", "succeeded", service="orders-db")
    fresh = cache.get(again)
    assert [rid for rid, _ in fresh.runbooks] == ["RB-2"] and fresh.held_s == 0 and len(builds) == 4


def test_an_erasure_is_shown_at_the_next_view_even_within_a_build_s_stretch(grandbo, monkeypatch):
    """The numbers held within a stretch (above) name services: an erasure of a name is never held back by it, as the
    page would show the erased name until the stretch ended. Counted on a clock the test moves, never in time."""
    memory = grandbo.org("alpha", create=True)
    memory.runbooks.add("RB-1", "Restart the replica", ["restart", "verify"])
    for _ in range(2):
        memory.ledger.record("RB-1", "succeeded", service="zorbax-quell-db", time_to_mitigate_s=300)
    now = [100.0]
    cache, build = AnalyticsCache(clock=lambda: now[0], cpu=lambda: now[0]), analytics.build

    def taking_a_second(memory, figures, incidents):  # type: ignore[no-untyped-def]
        now[0] += 1.0
        return build(memory, figures, incidents)

    monkeypatch.setattr(analytics, "build", taking_a_second)
    cache.get(memory)
    memory.ledger.record("RB-1", "failed", service="orders-db")
    assert "zorbax-quell-db" in cache.get(memory).mttr  # built twice: the next change waits out a stretch

    assert memory.erasure.purge_text("zorbax-quell", reason="a customer's name", actor="alice").documents
    shown = cache.get(memory)
    assert not any("zorbax" in service for service in shown.mttr) and shown.held_s == 0


def test_charts_of_one_title_and_description_on_a_page_have_ids_of_their_own():
    """Review 26 L4: a chart's ids were a digest of its title and description alone, so two charts of the same words
    on a page shared them (both labelled by the first's title). Each has its own, the same on every view of the
    page, whatever other pages were drawn between."""

    def drawn() -> tuple[list[str], list[str]]:
        page = charts.Page()
        both = "".join(charts.hbars([], "Incidents per service", page=page) for _ in range(2))
        return re.findall(r' id="([^"]+)"', both), re.findall(r'aria-labelledby="([^"]+)"', both)

    ids, labels = drawn()
    charts.hbars([("orders", 3.0)], "Incidents per service", page=charts.Page())
    assert len(set(ids)) == len(ids) == 4  # before: the second chart's two ids were the first's
    assert labels == [f"{ids[0]} {ids[1]}", f"{ids[2]} {ids[3]}"]
    assert drawn() == (ids, labels)
