"""A catalog's body is parsed on the request's thread, not on the event loop every organization's requests share
(issue 24): FastAPI parsed a 1 MiB `PUT /v1/catalog` there (`json.loads`), and another org's requests waited for it.
Counted, not timed: the large JSON parses the server's event loop thread makes while it takes a large catalog."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from types import FrameType
from typing import Any

import pytest

from grandbo.service import Grandbo
from tests.serving import serving

pytestmark = pytest.mark.embedded_default  # the route's, the same on Postgres (tests/conftest.py)

LARGE = 256 * 1024


def test_a_large_catalog_is_parsed_off_the_event_loop(grandbo: Grandbo):
    memory = grandbo.org("acme", create=True)
    key = memory.keys.create("admin")[1]
    names = [f"service-{n:04d}" for n in range(3_000)]
    services = [{"name": name, "depends_on": names[n + 1 : n + 4], "description": "x" * 200}
                for n, name in enumerate(names)]  # fmt: skip
    body = json.dumps({"services": services}).encode()
    assert LARGE * 3 < len(body) < 1 << 20
    on_loop: list[int] = []

    def parses(frame: FrameType, event: str, arg: Any) -> None:
        if threading.current_thread().name != "test-uvicorn":  # not the server's event loop's thread (`serving`)
            sys.setprofile(None)  # that thread's calls are not looked at again
        elif event == "call" and frame.f_code is json.loads.__code__ and asyncio._get_running_loop() is not None:
            text = frame.f_locals.get("s")
            if text is not None and len(text) > LARGE:
                on_loop.append(len(text))

    threading.setprofile(parses)  # each thread started from here on: the server's among them
    try:
        with serving(grandbo) as served, served.client(key) as client:
            put = client.put("/v1/catalog", content=body, headers={"Content-Type": "application/json"})
            assert put.status_code == 200, put.text
            assert len(put.json()) == len(names)
            assert on_loop == []  # parsed on the request's thread
            # Refused as FastAPI refused a body it parsed: each problem named by its field
            for sent, field in ({"services": [], "extra": 1}, "extra"), ({"services": [{"name": "a", "tier": 12}]},
                                                                          "services.0.tier"):  # fmt: skip
                refused = client.put("/v1/catalog", json=sent)
                assert refused.status_code == 422, refused.text
                assert [p["field"] for p in refused.json()["error"]["detail"]["errors"]] == [field]
            not_json = client.put("/v1/catalog", content=b"{nope", headers={"Content-Type": "application/json"})
            assert "not valid JSON" in not_json.json()["error"]["message"]
            latin = client.put("/v1/catalog", content='{"services": [{"name": "café"}]}'.encode("latin-1"),
                               headers={"Content-Type": "application/json; charset=latin-1"})  # fmt: skip
            assert latin.status_code == 400, latin.text  # as every JSON route answers it (api.app._http_error)
            assert "not UTF-8" in latin.json()["error"]["message"] and latin.json()["error"]["detail"]["byte"] == "0xe9"
            unsaid = client.put("/v1/catalog", content=b'{"services": []}', headers={"Content-Type": "text/plain"})
            assert "Content-Type: application/json" in unsaid.json()["error"]["message"]
            spec = client.get("/openapi.json").json()
        sent = spec["paths"]["/v1/catalog"]["put"]["requestBody"]["content"]["application/json"]["schema"]
        assert sent == {"$ref": "#/components/schemas/CatalogPut"}
        assert spec["components"]["schemas"]["CatalogPut"] == _as_fastapi_declares_it()
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setprofile(None)
    assert sorted(memory.catalog.topology().services) == sorted(names)


def _as_fastapi_declares_it() -> dict[str, Any]:
    """`CatalogPut` as FastAPI documents a route taking it as its body (as `PUT /v1/catalog` did before it was read
    raw): generated clients keep its name and fields."""
    from fastapi import FastAPI

    from grandbo.api.routes_org import CatalogPut

    def put(body):  # type: ignore[no-untyped-def]
        return None

    put.__annotations__ = {"body": CatalogPut}  # the model itself: this module's annotations are strings
    app = FastAPI()
    app.put("/catalog")(put)
    return app.openapi()["components"]["schemas"]["CatalogPut"]
