import pytest

from grandbo.errors import InvalidInputError
from grandbo.tiers.topology import Service, Topology, parse_catalog, twice

CATALOG = """
services:
  - {name: api-gateway, depends_on: [auth-service, checkout-api]}
  - {name: auth-service, depends_on: [redis-sessions]}
  - {name: checkout-api, depends_on: [payments-gateway]}
  - {name: redis-sessions}
  - {name: payments-gateway}
  - {name: island}
"""


def test_hop_distance_ignores_direction():
    topology = Topology(parse_catalog(CATALOG))
    assert topology.distance("auth-service", "auth-service") == 0
    assert topology.distance("auth-service", "redis-sessions") == 1
    assert topology.distance("redis-sessions", "auth-service") == 1
    assert topology.distance("redis-sessions", "payments-gateway") == 4
    assert topology.distance("island", "auth-service") is None
    assert topology.distance("unknown", "auth-service") is None
    assert topology.closest(["checkout-api"], ["redis-sessions", "payments-gateway"]) == 1


def test_closest_is_the_least_distance_over_every_pair_known_or_not():
    topology = Topology(parse_catalog(CATALOG))
    names = [*topology.names, "unknown", "other-unknown"]
    for a in names:
        for b in names:
            hops = [
                h for h in (topology.distance(x, y) for x in (a, "island") for y in (b, "unknown")) if h is not None
            ]
            assert topology.closest([a, "island"], iter([b, "unknown"])) == (min(hops) if hops else None), (a, b)
    assert topology.closest([], ["auth-service"]) is None and topology.closest(["unknown"], ["unknown"]) == 0


def test_services_named_in_a_topic_are_found():
    topology = Topology(parse_catalog(CATALOG))
    assert topology.mentioned_in("auth-service logins slow while redis-sessions evicts") == [
        "auth-service",
        "redis-sessions",
    ]


def test_json_catalogs_work_too():
    assert [s.name for s in parse_catalog('{"services": [{"name": "A-Service"}]}')] == ["a-service"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("services: [{name: a}, {name: a}]", "appears twice"),
        ("services: [{depends_on: [b]}]", "name"),
        ("services: [{name: 'has space'}]", "one token"),
        ("just a string", "A catalog is"),
        ("services: [", "not valid YAML"),
        ("services: [{name: a, colour: red}]", "colour"),
    ],
)
def test_bad_catalogs_are_explained(text, message):
    with pytest.raises(InvalidInputError, match=message):
        parse_catalog(text)


def test_upstream_follows_dependencies_at_any_depth_by_fewest_hops():
    topology = Topology(parse_catalog(CATALOG))
    assert topology.upstream("api-gateway") == {
        "api-gateway": 0, "auth-service": 1, "checkout-api": 1, "redis-sessions": 2, "payments-gateway": 2,
    }  # fmt: skip
    assert topology.upstream("redis-sessions") == {"redis-sessions": 0}  # depends on nothing
    assert topology.downstream("payments-gateway") == {"payments-gateway": 0, "checkout-api": 1, "api-gateway": 2}


def test_upstream_takes_the_shorter_of_two_paths_and_walks_a_cycle_once():
    topology = Topology(
        parse_catalog("""
services:
  - {name: a, depends_on: [b, d]}
  - {name: b, depends_on: [c]}
  - {name: c, depends_on: [d]}
  - {name: d, depends_on: [a]}
""")
    )
    assert topology.upstream("a") == {"a": 0, "b": 1, "d": 1, "c": 2}
    assert topology.upstream("c") == {"c": 0, "d": 1, "a": 2, "b": 3}
    assert topology.downstream("a") == {"a": 0, "d": 1, "c": 2, "b": 3}


def test_an_unknown_service_depends_on_nothing_and_nothing_depends_on_it():
    topology = Topology(parse_catalog(CATALOG))
    assert topology.upstream("ghost") == {"ghost": 0}
    assert topology.downstream("ghost") == {"ghost": 0}
    assert topology.upstream("island") == {"island": 0}


@pytest.mark.timeout(20)  # marks a hang: the old code took minutes here; it times nothing
def test_a_catalog_of_thousands_of_services_with_aliases_is_checked_in_one_pass():
    """Probe 25: each service's name was counted in the list of names, and each alias sought in it (quadratic): a
    5,000-service `PUT /v1/catalog` spent 1.8 s there, 3.2 s with an alias each, and `grandbo catalog import` of
    the 10,000 a catalog may hold several times that, the process's other work sharing its CPU. One pass now, with
    the same problems found."""
    services = [Service(name=f"svc-{n}", aliases=[f"Service {n}", f"P{n:05d}"]) for n in range(40_000)]
    services += [Service(name="svc-7"), Service(name="extra", aliases=["svc-8"])]
    assert twice(services) == [
        "service 'svc-7' appears twice", "alias 'svc-8' of 'extra' is the name of another service"
    ]  # fmt: skip
