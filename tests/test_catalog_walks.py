"""What one organization's catalog can cost every organization its process serves (probe 28). Every process builds
an org's catalog graph whole after each change, and walks it from the services a question names: a walk reached
every service of its part of the graph, was kept for good, once for each service named, and a catalog held
MAX_DEPENDENCIES (200) dependencies a service. Now a walk looks along WALK_EDGES edges at most, a question's services
are walked from at once, and the walks kept hold WALKS_KEPT services at most (the catalog's dependencies:
`test_catalog_cap.py`)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from grandbo.retrieval.policy import ChangePolicy
from grandbo.service import Grandbo
from grandbo.tiers.change_model import Change
from grandbo.tiers.topology import WALK_EDGES, WALKS_KEPT, Service, Topology
from grandbo.triage.changes import burst_of, first_alerts, rank
from grandbo.triage.evidence import Seen
from tests.serving import serving

TOPIC = "redis connection resets during a key eviction spike; p99 latency above 1200ms"


def test_recalls_naming_new_services_walk_once_a_question_and_keep_a_bounded_memory(settings):
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        key = memory.keys.create("write")[1]
        names = [f"s{n:04d}" for n in range(2000)]
        rng = random.Random(7)
        memory.catalog.put([Service(name=name, depends_on=rng.sample(names, 5)) for name in names])
        for n in range(3):
            memory.remember({"title": f"evictions on s{n:04d}", "body": TOPIC, "services": [f"s{n:04d}"]})
        asked = 120  # each naming 50 services none named before: 6,000 services asked about, each of 2,000 reached
        with serving(grandbo) as served, served.client(key) as client:
            for n in range(asked):
                named = [names[(n * 50 + at) % len(names)] for at in range(50)]
                answer = client.post("/v1/recall", json={"topic": TOPIC, "services": named})
                assert answer.status_code == 200, answer.text
        topology = memory.catalog.topology()
        # One walk a question, not one a service named: 40 questions named apart, each asked 3 times, but the first
        # names the memories' services (as near as can be, no walk); each walk of the whole graph here, the latest kept
        assert topology.walks_made == len(names) // 50 - 1
        assert 0 < topology.walks_kept <= WALKS_KEPT < asked * len(names)


def test_a_walk_looks_along_a_bounded_number_of_edges():
    chain = [f"c{n:05d}" for n in range(WALK_EDGES)]  # each calls the next: two edges a service, both ways
    topology = Topology(Service(name=a, depends_on=[b]) for a, b in zip(chain, [*chain[1:], "end"], strict=True))
    reached = topology.around(chain[0], len(chain))
    assert len(reached) <= WALK_EDGES // 2 + 2  # half the chain: past it, services count as not connected
    assert reached[chain[100]] == 100 and topology.distance(chain[0], chain[-1]) is None
    assert topology.upstream(chain[0])[chain[100]] == 100 and len(topology.upstream(chain[0])) <= WALK_EDGES + 1


def test_closest_walks_from_a_questions_services_together_as_from_each():
    rng = random.Random(3)
    names = [f"s{n:03d}" for n in range(300)]
    topology = Topology(Service(name=name, depends_on=rng.sample(names, 1)) for name in names)
    for _ in range(200):
        ours, theirs = [*rng.sample(names, 3), "unknown"], [*rng.sample(names, 2), "unknown-2"]
        each = [topology.distance(a, b) for a in ours for b in theirs]
        assert topology.closest(ours, theirs) == min((d for d in each if d is not None), default=None)
    assert topology.closest(["unknown"], ["unknown"]) == 0 and topology.closest(["s001"], []) is None


def test_around_walks_no_farther_than_asked_and_finds_what_distance_finds():
    rng = random.Random(5)
    names = [f"s{n:03d}" for n in range(300)]
    topology = Topology(Service(name=name, depends_on=rng.sample(names, 2)) for name in names)
    for service in names[:20]:
        near = {name: hops for name in names if (hops := topology.distance(service, name)) is not None and hops <= 2}
        assert topology.around(service, 2) == near
    assert topology.around("unknown", 2) == {"unknown": 0}


def test_a_change_is_as_near_an_alerting_service_as_the_walk_from_it_found_not_nearest_when_cut_short():
    # top calls s and x; s calls more than a walk looks along, and through c1 and c2, x: 3 hops up from s. A walk up
    # from s is cut before it reaches x, which is 0 hops, the nearest, if "not reached" reads as 0
    fanned = [f"a{n:05d}" for n in range(WALK_EDGES + 1)]
    topology = Topology(
        [Service(name="top", depends_on=["s", "x"]), Service(name="s", depends_on=["c1", *fanned]),
         Service(name="c1", depends_on=["c2"]), Service(name="c2", depends_on=["x"])]
    )  # fmt: skip
    assert topology.downstream("x")["s"] == 3 and "x" not in topology.upstream("s")
    at = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
    path, end = burst_of("top", topology, at, at)
    alerts = [Seen("alert-s", "f", "s", frozenset(), at, at - timedelta(minutes=2))]
    firsts = first_alerts(alerts, path, end, timedelta(minutes=60), timedelta(minutes=10))
    change = Change(id="d1", service="x", summary="deploy", at=at - timedelta(minutes=5), source="cli", received_at=at)
    policy = ChangePolicy()
    [ranked] = rank([change], at=at, window=timedelta(minutes=60), path=path, firsts=firsts, topology=topology,
                    policy=policy)  # fmt: skip
    assert ranked.hops == 1 and ranked.why["topology"].value == round(policy.by_hops(3), 4) < policy.by_hops(0)


WALKED = """
import json, random
from grandbo.tiers.topology import Service, Topology
rng = random.Random(11)
names = [f"s{n:05d}" for n in range(10_000)]
topology = Topology(Service(name=name, depends_on=rng.sample(names, 5)) for name in names)
print(json.dumps([sorted(topology.around(names[0], 20).items()), sorted(topology.upstream(names[1]).items()),
                  sorted(topology.downstream(names[2]).items()), topology.closest(names[3:53], names[-300:])]))
"""


def test_a_walk_cut_short_reaches_the_same_services_whatever_the_hash_seed():
    # 10,000 services of 5 dependencies: a walk is cut about four hops out, partway through the services at some hop
    def walked(seed: str) -> list:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", WALKED], env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    first = walked("1")
    assert len(first[0]) < 10_000  # cut short
    for seed in ("2", "3", "4"):
        assert walked(seed) == first
