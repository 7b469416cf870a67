"""A REST body of more JSON values than its route takes is refused before anything parses it (probe 27).

FastAPI parses and checks a body on the event loop every organization's requests share (a delivery parses on a
worker thread, where parsing holds the GIL all the same): a 1 MiB list of ~330,000 values sent with a write key made
every other organization's requests wait 140-210 ms, once for each such body. Each route now takes at most the values
its largest legitimate body holds (`api.value_bounds`), nested at most 64 deep: past that, a 413 saying so, unparsed."""

from __future__ import annotations

import json

import httpx
import pytest
from starlette.requests import Request

from grandbo.api.app import create_app
from grandbo.api.value_bounds import BOUNDS, CATALOG_VALUES, MAX_DEPTH, MAX_VALUES, MEMORY_VALUES, WEBHOOK_VALUES
from tests.serving import BOUND, serving

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)


@pytest.fixture
def keys(grandbo):
    org = grandbo.org("alpha", create=True)
    return {scope: org.keys.create(scope)[1] for scope in ("write", "admin")}


@pytest.fixture
def parsed(monkeypatch):
    """The size of each body a route parsed (FastAPI's `Request.json`; the catalog's own, read raw and parsed on
    the request's thread: `routes_org._json_body`)."""
    from grandbo.api import routes_org

    sizes: list[int] = []
    read, parse = Request.json, routes_org._json_body

    async def json_of(self):  # type: ignore[no-untyped-def]
        sizes.append(len(await self.body()))
        return await read(self)

    def parsed_raw(raw, content_type):  # type: ignore[no-untyped-def]
        sizes.append(len(raw))
        return parse(raw, content_type)

    monkeypatch.setattr(Request, "json", json_of)
    monkeypatch.setattr(routes_org, "_json_body", parsed_raw)
    return sizes


def _refused(answer: httpx.Response, bound: int) -> str:
    assert answer.status_code == 413, answer.text[:300]
    error = answer.json()["error"]
    assert error["type"] == "payload_too_large" and error["remedy"].startswith("Split it: send the items in several")
    assert error["detail"]["max_values"] == bound and error["detail"]["max_depth"] == MAX_DEPTH
    return str(error["message"])


def _sent(client: httpx.Client, method: str, path: str, body: object) -> httpx.Response:
    """The answer to `body` written compactly, so that a list of 330,000 values is within the 1 MiB a body may be."""
    content = json.dumps(body, separators=(",", ":"))
    return client.request(method, path, content=content, headers={"Content-Type": "application/json"}, timeout=BOUND)


def test_a_body_of_more_values_than_its_route_takes_is_refused_unparsed(grandbo, keys, parsed):
    """Failed before: each was parsed and checked on the event loop, then refused 422 for its list's length (or,
    nested 100 deep within an entry's meta, stored)."""
    with serving(grandbo) as served:
        write, admin = served.client(keys["write"]), served.client(keys["admin"])
        tags = _sent(write, "POST", "/v1/memories", {"title": "t", "tags": ["x"] * 250_000})
        services = _sent(write, "POST", "/v1/recall", {"topic": "redis evicts keys", "services": [0] * 330_000})
        listed = _sent(write, "POST", "/v1/tools/query_org_memory", {"topic": [0] * 330_000})
        deep = _sent(write, "POST", "/v1/memories", {"title": "t", "meta": {"a": json.loads("[" * 100 + "]" * 100)}})
        catalog = _sent(admin, "PUT", "/v1/catalog", {"services": [{"name": "a", "owners": [0] * 300_000}]})
        alerts = _sent(write, "POST", "/v1/webhooks/alertmanager", {"alerts": [{}] * (WEBHOOK_VALUES + 1)})
    message = _refused(tags, MEMORY_VALUES)
    assert message == ("The request body holds at least 250,003 JSON values, more than POST /v1/memories takes "
                       f"({MEMORY_VALUES:,}). It was not parsed."), message  # fmt: skip
    assert "more than POST /v1/recall takes (10,000)" in _refused(services, MAX_VALUES)
    assert "more than POST /v1/tools/query_org_memory takes (10,000)" in _refused(listed, MAX_VALUES)
    assert f"nests arrays and objects more than {MAX_DEPTH} deep" in _refused(deep, MEMORY_VALUES)
    assert "more than PUT /v1/catalog takes" in _refused(catalog, CATALOG_VALUES)
    assert "more than POST /v1/webhooks/alertmanager takes" in _refused(alerts, WEBHOOK_VALUES)
    assert parsed == []


def test_the_largest_legitimate_bodies_are_taken(grandbo, keys, parsed):
    """An entry's meta of 20,000 values (under its 64 KiB), a catalog of 5,000 services and a recall at its
    limits are each parsed and taken: each route's bound is past what its largest legitimate body holds."""
    services = [{"name": f"s{n}", "owners": ["team"], "depends_on": [f"s{n - 1}"] if n else []} for n in range(5000)]
    with serving(grandbo) as served:
        write, admin = served.client(keys["write"]), served.client(keys["admin"])
        entry = write.post("/v1/memories", json={"title": "t", "tags": ["x"] * 100, "meta": {"a": [0] * 20_000}})
        recall = write.post("/v1/recall", json={"topic": "redis evicts keys", "services": ["s1"] * 50})
        catalog = admin.put("/v1/catalog", json={"services": services}, timeout=BOUND)
    assert entry.status_code == 201 and len(entry.json()["meta"]["a"]) == 20_000, entry.text[:300]
    assert recall.status_code == 200, recall.text[:300]
    assert catalog.status_code == 200 and len(catalog.json()) == 5000, catalog.text[:300]
    assert len(parsed) == 3


def test_every_route_that_takes_a_body_has_its_bound_and_each_bound_its_route(grandbo):
    """A body's bound was found by splitting its path ("memories", one segment more or two), beside FastAPI's own
    route table: a route added under a bounded path took that path's bound unseen, and one added elsewhere the
    default. Each route that takes a JSON body (a requestBody in /openapi.json) is named in `value_bounds.BOUNDS`,
    by its method and path template, and each name there is a route's (failed before: no such table)."""
    spec = create_app(grandbo, mcp=False, console=False).openapi()
    taking = {(method.upper(), path) for path, item in spec["paths"].items()
              for method, operation in item.items() if "requestBody" in operation}  # fmt: skip
    assert len(taking) > 20 and taking == set(BOUNDS), taking ^ set(BOUNDS)
