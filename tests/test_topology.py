import pytest

from grandbo.errors import InvalidInputError
from grandbo.tiers.topology import Topology, parse_catalog

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
