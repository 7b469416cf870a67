"""A NUL character in an id (issue 26, bad input): no stored id can hold one, so every route that takes an id
answers as it does for an unknown id. On Postgres, whose text cannot hold NUL, 24 routes answered 500."""

from __future__ import annotations

import re

import pytest

from grandbo.api.app import create_app
from tests.serving import serving

NUL_ID = "x%00y"
BODIES = {"POST": {}, "PATCH": {}, "PUT": {}}


def _routes_with_ids(grandbo):
    paths = create_app(grandbo, mcp=False).openapi()["paths"]
    return sorted((method.upper(), path) for path, item in paths.items() for method in item if "{" in path)


@pytest.fixture
def keyed(grandbo):
    acme = grandbo.org("acme", create=True)
    acme.remember({"id": "KNOWN-1", "title": "checkout-api pool exhausted after a deploy"})
    return acme.keys.create("admin", name="admin")[1]


def test_every_route_answers_an_id_with_a_nul_as_an_unknown_one(grandbo, keyed):
    routes = _routes_with_ids(grandbo)
    assert len(routes) >= 20
    answered = {}
    with serving(grandbo) as served, served.client(keyed) as client:
        for method, path in routes:
            url = re.sub(r"\{[^}]+\}", NUL_ID, path)
            response = client.request(method, url, json=BODIES.get(method))
            answered[(method, path)] = response.status_code
            error = response.json()["error"]
            assert error["message"] and error["remedy"] and "Traceback" not in response.text
        assert client.get("/v1/memories/KNOWN-1").status_code == 200
    assert {route: status for route, status in answered.items() if status not in (404, 422)} == {}
    assert 404 in answered.values()
