"""What a request's body costs the server's event loop, which every organization's requests share (probe 25).

FastAPI checks a route's body model on the event loop. A catalog's services were checked there whole, each name
through `names.service_name` (NFKC and the rest for a name outside ASCII: 6 us a name): a 1 MiB `PUT /v1/catalog`
of 700 services with 200 dependencies each, every one a name outside ASCII (all within the catalog's limits), held
the loop 1.3 s, and `/healthz` and every other organization's requests waited up to 1.7 s, once for each such
request an admin key sent. The names are now checked on the request's worker thread."""

from __future__ import annotations

import asyncio

import pytest

from grandbo.tiers import topology
from tests.serving import serving

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)


@pytest.fixture
def on_loop(monkeypatch):
    """For each service name the catalog's model checks, whether it was checked on an event loop's thread."""
    seen: list[bool] = []
    checked = topology.service_name

    def service_name(value: str) -> str:
        seen.append(asyncio._get_running_loop() is not None)
        return checked(value)

    monkeypatch.setattr(topology, "service_name", service_name)
    return seen


def test_a_catalogs_names_are_checked_off_the_event_loop(grandbo, on_loop):
    """Failed before: every name of the body was checked on the event loop."""
    key = grandbo.org("acme", create=True).keys.create("admin", name="catalog")[1]
    services = [{"name": f"dienst-{n}", "depends_on": [f"abhängig-{n}-{d}" for d in range(3)]} for n in range(20)]
    with serving(grandbo) as served, served.client(key) as client:
        put = client.put("/v1/catalog", json={"services": services})
        listed = client.get("/v1/catalog", params={"limit": 500})
    assert put.status_code == 200, put.text
    assert [s["name"] for s in put.json()] == [s["name"] for s in services]
    assert put.json()[0]["depends_on"] == ["abhängig-0-0", "abhängig-0-1", "abhängig-0-2"]
    assert len(listed.json()["items"]) == 20  # the services themselves (their dependencies are names)
    assert on_loop and not any(on_loop)


def test_a_catalog_refused_names_each_field_as_before(grandbo, on_loop):
    """The refusal reads as FastAPI's did: every field of every service named, in the one error shape."""
    key = grandbo.org("acme", create=True).keys.create("admin", name="catalog")[1]
    body = {"services": [{"name": "ok"}, {"name": "a b", "depends_on": ["x y"]}, {"name": "c", "tier": "high",
                                                                                  "extra": 1}, 7]}  # fmt: skip
    with serving(grandbo) as served, served.client(key) as client:
        refused = client.put("/v1/catalog", json=body)
        many = client.put("/v1/catalog", json={"services": [{"name": "ok"}] * 5001})
        kept = client.get("/v1/catalog")
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["type"] == "invalid_input" and error["remedy"] == "Correct the fields named and send it again."
    assert [problem["field"] for problem in error["detail"]["errors"]] == [
        "services.1.name", "services.1.depends_on", "services.2.tier", "services.2.extra", "services.3"
    ]  # fmt: skip
    assert "service name 'a b' must be one token" in error["message"]
    assert many.status_code == 422 and "at most 5000 items" in many.text
    assert kept.json()["items"] == []  # nothing of a refused body was written
    assert not any(on_loop)
