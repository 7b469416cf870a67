"""A catalog change costs every process that keeps the org's topology the services it touches, not the catalog
(probe 28): each process made the graph whole again after any change, 10,000 services of 5 dependencies 0.1-0.4 s
a change (8.7 s at 40), while another org's recalls waited behind it. It now takes the services written since its
topology was made (`OrgDocuments.changed`) and makes again the edges of those and of what they called or call
(`Topology.changed`, counted by `built`); past `CATALOG_CHANGES` writes, or after an erasure, the graph is made whole."""

from __future__ import annotations

import random
from collections.abc import Iterable

from grandbo.ports import DocumentWrite
from grandbo.service import Grandbo
from grandbo.tiers import operations
from grandbo.tiers.catalog import WRITE_AT_ONCE
from grandbo.tiers.operations import SERVICES
from grandbo.tiers.topology import Service, Topology

SIZE, DEPENDS = 2_000, 5


def _catalog(rng: random.Random) -> list[Service]:
    names = [f"s{n:04d}" for n in range(SIZE)]
    return [Service(name=name, depends_on=rng.sample(names, DEPENDS)) for name in names]


def _calls(topology: Topology, name: str) -> set[str]:
    return {n for n, hops in topology.upstream(name).items() if hops == 1}


def _callers(topology: Topology, name: str) -> set[str]:
    return {n for n, hops in topology.downstream(name).items() if hops == 1}


def _graph(topology: Topology, among: Iterable[str] | None = None) -> dict[str, object]:
    """What a topology answers, through what its callers ask: each service's direct dependencies and callers (its
    edges both ways; of the services `among` only, when given), the names, the aliases, the dependencies counted and
    the services as written."""
    among = topology.names if among is None else sorted(among)
    return {
        "names": list(topology.names),
        "up": {name: _calls(topology, name) for name in among},
        "down": {name: _callers(topology, name) for name in among},
        "aliases": {alias: topology.canonical(alias) for s in topology.services.values() for alias in s.aliases},
        "dependencies": topology.dependencies,
        "services": topology.to_dict(),
    }


def test_a_change_of_one_service_makes_again_only_the_edges_it_touches(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.catalog.put(_catalog(random.Random(1)))
    whole = memory.catalog.topology()
    changed = whole.services["s0007"]
    memory.catalog.put([Service(name="s0007", depends_on=["s0001", "new-db"], owners=["team-x"])])
    after = memory.catalog.topology()  # what the next recall or triage of the org weighs
    # The service, the 5 it called and the 2 it calls now: not the 2,001 services of the graph
    # (the import's last piece made `whole`: each piece counts the dependencies on the topology brought up to date)
    assert after.built <= 1 + DEPENDS + 2 < WRITE_AT_ONCE <= whole.built and len(whole.services) == SIZE
    assert _calls(after, "s0007") == {"s0001", "new-db"}
    assert "new-db" in after.names and after.services["s0007"].owners == ["team-x"]
    assert not any("s0007" in _callers(after, dependency) for dependency in set(changed.depends_on) - {"s0001"})
    near = {"s0007", "s0001", "new-db", *changed.depends_on, *random.Random(3).sample(after.names, 100)}
    assert _graph(after, near) == _graph(Topology(after.services.values()), near)  # as made whole
    assert _calls(whole, "s0007") == set(changed.depends_on)  # the old one as it was: requests may be walking it
    memory.catalog.put([Service(name="s0007")], replace=True)  # 1,999 dropped
    assert memory.catalog.topology().names == ["s0007"]


def test_another_process_takes_a_change_as_a_change(grandbo, settings):
    """Every process keeps its own topology of the org: a write in one (here the CLI) brings the server's up to
    date by the services written, on both backends."""
    grandbo.org("acme", create=True).catalog.put(_catalog(random.Random(2)))
    served = grandbo.org("acme")
    assert len(served.catalog.topology().services) == SIZE
    with Grandbo.open(settings) as fresh:  # a process's first read of the org makes its graph whole
        assert fresh.org("acme").catalog.topology().built == SIZE
    with Grandbo.open(settings) as cli:
        cli.org("acme").catalog.import_text("services:\n  - {name: s0003, depends_on: [s0004], aliases: [Pay API]}\n")
    after = served.catalog.topology()
    assert after.built <= 1 + DEPENDS + 1 and _calls(after, "s0003") == {"s0004"}
    assert after.canonical("pay api") == "s0003"
    near = {"s0003", "s0004", *random.Random(3).sample(after.names, 100)}
    assert _graph(after, near) == _graph(Topology(after.services.values()), near)


def test_past_its_bound_or_after_an_erasure_the_graph_is_made_whole(grandbo, monkeypatch):
    monkeypatch.setattr(operations, "CATALOG_CHANGES", 3)
    memory = grandbo.org("acme", create=True)
    memory.catalog.put([Service(name=f"s{n}", depends_on=[f"s{n + 1}"]) for n in range(50)])
    memory.catalog.put([Service(name="vault", description="rotated with token zq-7731")])
    assert memory.catalog.topology().built == 1  # the write read the catalog first (its check): one change since
    memory.catalog.put([Service(name=f"s{n}", depends_on=["s40"]) for n in range(2)])
    assert memory.catalog.topology().built == 4  # two written (s0, s1), what they called (s2) and call (s40)
    memory.catalog.put([Service(name=f"s{n}", depends_on=["s30"]) for n in range(4)])
    assert memory.catalog.topology().built == 52  # four: past 3, read whole
    memory.erasure.purge_text("zq-7731", reason="a token in a description", actor="test")
    after = memory.catalog.topology()
    assert after.built == 52 and "zq-7731" not in after.services["vault"].description  # rewritten in place: whole


def test_a_service_written_since_in_a_form_that_cannot_be_read_leaves_the_graph(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.catalog.put([Service(name="api", depends_on=["db"]), Service(name="web", depends_on=["api"])])
    assert memory.catalog.topology().upstream("web") == {"web": 0, "api": 1, "db": 2}
    memory._documents.put([DocumentWrite(SERVICES, "api", {"name": "api", "tier": 99}, "service.put")], "test")
    after = memory.catalog.topology()
    assert "api" not in after.services and after.upstream("web") == {"web": 0, "api": 1}  # still what web calls
    assert "db" not in after.names and after.built <= 3


def test_changes_made_one_after_another_answer_as_the_catalog_made_whole():
    rng = random.Random(11)
    names = [f"s{n:02d}" for n in range(30)]
    aliases = ["Pay API", "PAUTH01", "Search", "pay  api"]  # the last is the first as compared
    topology = Topology(Service(name=name, depends_on=rng.sample(names, 2)) for name in names[:20])
    for _ in range(300):
        before, graph = topology, _graph(topology)
        written = [
            Service(
                name=rng.choice(names),
                depends_on=rng.sample([*names, "phantom-a", "phantom-b"], rng.randint(0, 4)),
                aliases=rng.sample(aliases, rng.randint(0, 1)),
            )
            for _ in range(rng.randint(0, 3))
        ]
        gone = rng.sample(names, rng.randint(0, 2))
        topology = topology.changed(written, gone)
        services = {**before.services, **{s.name: s for s in written}}
        for name in gone:
            services.pop(name, None)
        assert _graph(topology) == _graph(Topology(services.values()))  # aliases held by two: the later's, as whole
        assert _graph(before) == graph  # never changed: requests may be walking it
