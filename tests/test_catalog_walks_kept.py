"""A catalog change keeps the walks it cannot affect (`Topology.changed`): every change dropped all of the org's kept
walks, and each was made again, 12-30 ms at 10,000 services (probe 28). A walk looks along the edges of the
services it reached only, so one that reached none of those whose edges the change made again finds the same."""

from __future__ import annotations

import random

import pytest

from grandbo.tiers import topology as topology_module
from grandbo.tiers.topology import Service, Topology

PARTS, PART = 6, 8  # parts of the catalog that call within themselves, now and then across


def _catalog(rng: random.Random) -> dict[str, Service]:
    names = [f"p{part}s{n}" for part in range(PARTS) for n in range(PART)]
    services = {}
    for name in rng.sample(names, len(names) * 3 // 4):
        part = [other for other in names if other.startswith(name.split("s")[0] + "s") and other != name]
        depends = rng.sample(part, rng.randint(0, 3))
        if rng.random() < 0.05:
            depends.append(rng.choice([*names, "outside-db"]))
        services[name] = Service(name=name, depends_on=sorted(set(depends) - {name}), aliases=[f"alias {name}"])
    return services


def _change(rng: random.Random, services: dict[str, Service]) -> tuple[list[Service], list[str]]:
    """Some services written (new ones, changed dependencies, the same again) and some dropped, both applied to
    `services` (the catalog a topology made whole is made of)."""
    names = sorted({*services, *(f"p{rng.randrange(PARTS)}s{n}" for n in range(PART))})
    written = []
    for name in rng.sample(names, rng.randint(0, 2)):
        part = [other for other in names if other.startswith(name.split("s")[0] + "s") and other != name]
        depends = rng.sample(part, min(len(part), rng.randint(0, 3)))
        written.append(Service(name=name, depends_on=sorted(depends), aliases=[f"alias {name}"]))
    gone = rng.sample(sorted(services), rng.randint(0, 1)) if rng.random() < 0.5 else []
    gone = [name for name in gone if name not in {s.name for s in written}]
    services.update((s.name, s) for s in written)
    for name in gone:
        services.pop(name)
    return written, gone


def _answers(topology: Topology, asked: list[str], rng: random.Random) -> dict[str, object]:
    """What each walk a caller makes answers: up, down, around (each depth), distances, closest of sets."""
    pairs = [(rng.choice(asked), rng.choice(asked)) for _ in range(20)]
    sets = [(tuple(rng.sample(asked, 3)), tuple(rng.sample(asked, 3))) for _ in range(10)]
    return {
        "up": {name: topology.upstream(name) for name in asked},
        "down": {name: topology.downstream(name) for name in asked},
        "around": {(name, hops): topology.around(name, hops) for name in asked for hops in (1, 2, 3)},
        "distance": {pair: topology.distance(*pair) for pair in pairs},
        "closest": {pair: topology.closest(*pair) for pair in sets},
    }


def _asked(rng: random.Random) -> list[str]:
    return [f"p{rng.randrange(PARTS)}s{rng.randrange(PART)}" for _ in range(12)] + ["outside-db", "nowhere"]


@pytest.mark.parametrize("seed", range(40))
def test_the_walks_kept_across_changes_answer_as_a_topology_made_whole(seed):
    rng = random.Random(seed)
    services = _catalog(rng)
    topology = Topology(services.values())
    for _ in range(6):  # each change taken from the one before, its walks asked and kept
        asked = _asked(rng)
        _answers(topology, asked, random.Random(seed))
        written, gone = _change(rng, services)
        topology = topology.changed(written, gone)
        whole = Topology(services.values())
        probe = seed * 7 + len(services)
        assert _answers(topology, asked, random.Random(probe)) == _answers(whole, asked, random.Random(probe))
        assert topology.walks_made <= whole.walks_made


@pytest.mark.parametrize("seed", range(20))
def test_walks_cut_short_and_kept_answer_as_those_made_again(seed, monkeypatch):
    """With walks cut short at a few edges, a kept walk answers as the one the changed topology would make."""
    monkeypatch.setattr(topology_module, "WALK_EDGES", 6)
    rng = random.Random(seed)
    services = _catalog(rng)
    kept, fresh = Topology(services.values()), Topology(services.values())
    for _ in range(6):
        asked = _asked(rng)
        _answers(kept, asked, random.Random(seed))
        written, gone = _change(rng, services)
        kept, fresh = kept.changed(written, gone), fresh.changed(written, gone)  # fresh: no walk ever kept
        probe = seed * 7 + len(services)
        assert _answers(kept, asked, random.Random(probe)) == _answers(fresh, asked, random.Random(probe))


def test_a_change_keeps_the_walks_that_reached_none_of_the_services_it_touches():
    """Two parts of a catalog: a change in one keeps the walks of the other, so asked again none is made."""
    left = [Service(name=f"l{n}", depends_on=[f"l{n + 1}"]) for n in range(50)]
    right = [Service(name=f"r{n}", depends_on=[f"r{n + 1}"]) for n in range(50)]
    topology = Topology([*left, *right])
    for name in ("l3", "r3"):
        topology.upstream(name), topology.downstream(name), topology.around(name, 2), topology.distance(name, "l9")
    assert topology.walks_made == 8  # up, down, around and one undirected walk for the distance, of each
    changed = topology.changed([Service(name="r20", depends_on=["r21", "r40"])], [])
    # l3's four walks kept (l3-l50, l0-l3, l1-l5, l0-l50), and r3's that stopped short of r20 (r0-r3, r1-r5)
    assert changed.walks_kept == 48 + 4 + 5 + 51 + 4 + 5
    changed.upstream("l3"), changed.downstream("l3"), changed.around("l3", 2), changed.distance("l3", "l9")
    changed.downstream("r3"), changed.around("r3", 2)
    assert changed.walks_made == 0  # none made again
    assert changed.upstream("r3")["r40"] == 18 and changed.walks_made == 1  # r3's walk reached r20: made again
