"""The OpenAPI document as the server behaves: every `/v1` route needs a Bearer key of the scope it names,
and every error it can answer has the one error shape (`{"error": {type, message, remedy, detail}}`), not
FastAPI's default `{"detail": [...]}`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from grandbo.api import deps, payloads, routes_org
from grandbo.mcp.schemas import answer_schemas

BEARER = {
    "type": "http",
    "scheme": "bearer",
    "description": "An organization's API key, `gbk.<org>.<id>.<secret>` (`grandbo keys create --org ORG --scope "
    "read|write|admin`). The organization is the key's; scopes nest: read < write < admin.",
}
ERROR = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "message", "remedy", "detail"],
            "properties": {
                "type": {"type": "string", "description": "What kind of error, e.g. not_found, invalid_input."},
                "message": {"type": "string", "description": "What happened, and why."},
                "remedy": {"type": "string", "description": "What to do next."},
                "detail": {"type": "object", "description": "The values the message is about."},
            },
        }
    },
}
_UNUSED = ("HTTPValidationError", "ValidationError")


def _error(description: str) -> dict[str, Any]:
    schema = {"$ref": "#/components/schemas/Error"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def document(app: FastAPI, routes: Sequence[APIRoute]) -> dict[str, Any]:
    """The app's OpenAPI document (built once), with the security scheme and the scope of each of `routes`
    (the `/v1` routes), and the one error shape for every error response."""
    if app.openapi_schema:
        return app.openapi_schema
    spec = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
    spec.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
    spec["components"]["schemas"].update(payloads.schemas())  # the webhooks' bodies (read raw, declared here)
    spec["components"]["schemas"]["CatalogPut"] = routes_org.CATALOG_SCHEMA  # read raw too (`put_catalog`)
    _tool_answers(spec)
    spec["components"]["securitySchemes"] = {"bearer": BEARER}
    scopes = {
        (route.path_format, method.lower()): deps.NEEDS[dependency.call].value
        for route in routes
        for method in route.methods or ()
        for dependency in route.dependant.dependencies
        if dependency.call in deps.NEEDS
    }
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            if "422" in responses or method != "get":
                responses["422"] = _error("The request is not valid: the message names the fields.")
            if (scope := scopes.get((path, method))) is not None:
                operation["security"] = [{"bearer": [scope]}]
                responses["401"] = _error("Missing, unknown or revoked API key (or, for a webhook, a bad signature).")
                responses["403"] = _error(f"The key's scope is below {scope}.")
            if "{" in path:
                responses["404"] = _error("No such thing in the key's organization.")
            if method != "get":
                responses["409"] = _error("It changed meanwhile, or exists already: read it again and retry.")
            if "requestBody" in operation:
                responses["400"] = _error("The body could not be parsed at all (JSON nested too deeply).")
                responses["413"] = _error(
                    "The request body is over the limit (1 MiB; 4 MiB for webhooks), or holds more "
                    "JSON values than the route takes (README), or nests them over 64 deep."
                )
    for name in _UNUSED:
        spec["components"]["schemas"].pop(name, None)
    app.openapi_schema = spec
    return spec


def _tool_answers(spec: dict[str, Any]) -> None:
    """`POST /v1/tools/{name}` answers what the named tool answers over MCP: one of the tools' output schemas."""
    components, answers = answer_schemas()
    spec["components"]["schemas"].update(components)
    answer = spec["paths"]["/v1/tools/{name}"]["post"]["responses"]["200"]
    which = "; ".join(f"{tool}: {schema}" for tool, schema in answers.items())
    answer["description"] = f"{answer['description']} Which tool answers which: {which}."
    refs = [{"$ref": f"#/components/schemas/{name}"} for name in dict.fromkeys(answers.values())]
    answer["content"] = {"application/json": {"schema": {"anyOf": refs}}}
