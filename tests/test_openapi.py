"""The OpenAPI document as a client generator reads it: readable operation ids, typed alerts and plans, the
webhooks' bodies and header, list routes with a cursor, one limit on `k` (issue 27, item 7)."""

from __future__ import annotations

import anyio
import pytest

from grandbo.api.app import create_app
from grandbo.retrieval.recall import MAX_K
from tests.serving import BOUND, serving
from tests.test_mcp import http_client, session

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)


@pytest.fixture
def spec(grandbo):
    return create_app(grandbo, mcp=False, console=False).openapi()


def _operations(spec):
    return {
        (path, method): operation for path, methods in spec["paths"].items() for method, operation in methods.items()
    }


def test_every_operation_id_is_the_route_s_name_and_unique(spec):
    """FastAPI's default ids read `remember_v1_memories_post`: a generated client's method names."""
    ids = [operation["operationId"] for operation in _operations(spec).values()]
    assert len(ids) == len(set(ids))
    assert not [i for i in ids if "_v1_" in i or i.endswith(("_get", "_post", "_patch", "_delete", "_put"))]
    by_route = {route: operation["operationId"] for route, operation in _operations(spec).items()}
    assert by_route[("/v1/memories", "post")] == "remember"
    assert by_route[("/v1/alerts", "get")] == "list_alerts"
    assert by_route[("/v1/webhooks/{source}", "post")] == "receive_webhook"


def _ref(schema) -> set[str]:
    return {option.get("$ref", "").rsplit("/", 1)[-1] for option in schema.get("anyOf", [schema])}


def test_a_stored_alert_s_recall_and_plan_are_typed(spec):
    """They were `{"type": "object"}`, though RecallResult and TriagePlan exist."""
    fields = spec["components"]["schemas"]["StoredAlert"]["properties"]
    assert "RecallResult" in _ref(fields["recall"]) and "TriagePlan" in _ref(fields["plan"])


def test_the_webhook_declares_each_vendor_s_body_and_pagerduty_s_signature(spec):
    operation = spec["paths"]["/v1/webhooks/{source}"]["post"]
    bodies = operation["requestBody"]["content"]["application/json"]["schema"]["anyOf"]
    names = {body["$ref"].rsplit("/", 1)[-1] for body in bodies}
    assert names == {"PagerDutyWebhook", "AlertmanagerWebhook", "GrafanaWebhook", "OpsgenieWebhook"}
    assert names <= set(spec["components"]["schemas"])
    assert "alerts" in spec["components"]["schemas"]["AlertmanagerWebhook"]["required"]
    headers = [p for p in operation["parameters"] if p["in"] == "header"]
    assert [h["name"].lower() for h in headers] == ["x-pagerduty-signature"]
    answer = operation["responses"]["202"]["content"]["application/json"]["schema"]["$ref"]
    assert spec["components"]["schemas"][answer.rsplit("/", 1)[-1]]["properties"]["alerts"]["items"]["$ref"].endswith(
        "/AlertBrief"
    )


def test_memories_runbooks_and_alerts_are_lists_with_a_cursor(spec):
    for path, page in (("/v1/memories", "MemoryPage"), ("/v1/runbooks", "RunbookPage"), ("/v1/alerts", "AlertPage")):
        names = {p["name"] for p in spec["paths"][path]["get"]["parameters"]}
        assert {"cursor", "limit"} <= names, path
        answer = spec["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        assert answer.endswith(f"/{page}") and "next_cursor" in spec["components"]["schemas"][page]["properties"]


def test_k_has_one_limit_over_rest_and_mcp(grandbo):
    """REST allowed k up to 100, MCP up to 20."""
    spec = create_app(grandbo, mcp=False, console=False).openapi()
    rest = spec["components"]["schemas"]["RecallRequest"]["properties"]["k"]["maximum"]
    _, key = grandbo.org("acme", create=True).keys.create("read")

    async def tools(client):
        return (await client.list_tools()).tools

    with serving(grandbo) as served:
        found = anyio.run(session, http_client(served.url, key), tools)
    (query,) = [tool for tool in found if tool.name == "query_org_memory"]
    assert rest == query.input_schema["properties"]["k"]["maximum"] == MAX_K


def test_an_mcp_recall_returns_as_many_memories_as_a_rest_one(memory):
    """`query_org_memory` cut k to 20 whatever its schema said."""
    from grandbo.mcp import tools

    memory.remember_many([{"title": f"redis eviction storm number {n} on the session cache"} for n in range(30)])
    answer = tools.query_org_memory(memory, "redis eviction storm on the session cache under memory pressure", 25)
    assert (
        len(answer.memories)
        == len(memory.recall("redis eviction storm on the session cache under memory pressure", 25).hits)
        == 25
    )


def test_memories_and_runbooks_page_with_a_cursor_over_a_real_server(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.remember_many([{"id": f"M-{n}", "title": f"memory number {n} about the cache"} for n in range(7)])
    for n in range(3):
        memory.runbooks.add(f"RB-{n}", f"runbook {n}", ["one step"])
    memory.ledger.record("RB-1", "succeeded")
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:

        def walk(path, **params):
            seen, cursor = [], None
            while True:
                page = client.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
                assert page.status_code == 200, page.text
                seen.append(page.json()["items"])
                if not (cursor := page.json()["next_cursor"]):
                    return seen

        memories = walk("/v1/memories", limit=3, kind="fact")
        runbooks = walk("/v1/runbooks", limit=2)
        bad = client.get("/v1/memories", params={"cursor": "bm90IG91cnM"})
    assert [len(page) for page in memories] == [3, 3, 1]
    assert sorted(e["id"] for page in memories for e in page) == sorted(f"M-{n}" for n in range(7))
    records = {v["runbook"]["id"]: v["effectiveness"]["attempts"] for page in runbooks for v in page}
    assert records == {"RB-0": 0, "RB-1": 1, "RB-2": 0} and [len(page) for page in runbooks] == [2, 1]
    assert bad.status_code == 422 and bad.json()["error"]["type"] == "invalid_input"


def test_the_swagger_ui_loads_nothing_from_outside_the_server(grandbo):
    """FastAPI's `/docs` page fetched its script and stylesheet from cdn.jsdelivr.net, so without the internet it
    stayed blank; the server serves them itself now (a real browser renders the page in tests/test_console.py).
    ReDoc, which had no local copy, is gone."""
    import re

    import httpx

    with serving(grandbo) as served:
        page = httpx.get(f"{served.url}/docs", timeout=BOUND)
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "<title>Grandbo API</title>" in page.text
        urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*["'`]([^"'`]+)["'`]""", page.text)
        assert len(urls) >= 4, urls  # the stylesheet, the icon, the script, the document
        for url in urls:
            assert url.startswith((served.url + "/", "/")), url  # this server's, nothing else
            fetched = httpx.get(url if url.startswith("http") else f"{served.url}{url}", timeout=BOUND)
            assert fetched.status_code == 200 and len(fetched.content) > 100, url
        assert httpx.get(f"{served.url}/redoc", timeout=BOUND).status_code == 404


def test_the_swagger_ui_names_its_files_by_path_and_forgets_the_key(grandbo):
    """Behind a proxy that ends TLS the server sees `http` and the proxy's Host: the page named its files by
    absolute URLs built from them (`http://grandbo.example.com/swagger/...`), which a browser on the `https`
    page refuses. It also kept the key given to Authorize in the browser's local storage (persistAuthorization)."""
    import re

    import httpx

    with serving(grandbo) as served:
        page = httpx.get(f"{served.url}/docs", headers={"host": "grandbo.example.com"}, timeout=BOUND)
        named = re.findall(r"""(?:src|href)="([^"]+)\"""", page.text)
        assert sorted(named) == [
            "/swagger/favicon-32x32.png",
            "/swagger/swagger-ui-bundle.js",
            "/swagger/swagger-ui.css",
        ]
        assert '"persistAuthorization": false' in page.text and '"persistAuthorization": true' not in page.text
        script = httpx.get(f"{served.url}/swagger/swagger-ui-bundle.js", timeout=BOUND)
        assert (
            script.headers["content-type"].startswith("application/javascript")
            and "max-age" in script.headers["cache-control"]
        )
        assert httpx.get(f"{served.url}/swagger/..%2Fmain.py", timeout=BOUND).status_code == 404
        assert httpx.get(f"{served.url}/swagger/__init__.py", timeout=BOUND).status_code == 404
