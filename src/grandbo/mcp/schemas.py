"""The MCP tools as JSON function schemas, for agents that call tools without MCP: one source of truth, the
MCP server's own tool list; with `strict`, in the form strict mode accepts (OpenAI's Structured Outputs, Anthropic's
strict tool use: `"strict": true` beside the schema, which is closed, all required, optional ones nullable)."""

from __future__ import annotations

import asyncio
import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from grandbo.errors import InvalidInputError
from grandbo.mcp.server import build

# What strict mode refuses in a schema (OpenAI's supports type, enum, anyOf, properties, items, required,
# description, minimum/maximum, maxItems and a few more; Anthropic's neither numeric bounds nor item counts past
# minItems 0 or 1); each is said in the description instead, where it is a bound.
_UNSUPPORTED = {
    "openai": ("default", "minLength", "maxLength", "title"),
    "anthropic": ("default", "minLength", "maxLength", "title", "minimum", "maximum", "exclusiveMinimum",
                  "exclusiveMaximum", "multipleOf", "maxItems", "minItems"),
}  # fmt: skip
_SAID = {"maxLength": "At most {} characters.", "minimum": "At least {}.", "maximum": "At most {}.",
         "exclusiveMinimum": "Over {}.", "exclusiveMaximum": "Under {}.", "maxItems": "At most {} items.",
         "minItems": "At least {} items."}  # fmt: skip


def _unbound(*_: Any) -> Any:
    raise AssertionError("schemas are listed, never called")


def _listed() -> list[Any]:
    """The MCP server's own tool list, read on a thread of its own: a caller inside an event loop (the API's
    OpenAPI route) cannot run one of its own."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(build(_unbound).list_tools())).result()


def function_schemas(format: str, *, strict: bool = False) -> list[dict[str, Any]]:
    """`openai` (Chat Completions `tools`) or `anthropic` (Messages `tools`) definitions of the tools."""
    if format not in ("openai", "anthropic"):
        raise InvalidInputError(f"Unknown format {format!r}: use openai or anthropic.", detail={"format": format})
    listed = _listed()
    shaped = [
        (t.name, t.description, strict_schema(t.input_schema, format) if strict else t.input_schema) for t in listed
    ]
    flag = {"strict": True} if strict else {}
    if format == "anthropic":
        return [{"name": name, "description": text, "input_schema": schema, **flag} for name, text, schema in shaped]
    return [
        {"type": "function", "function": {"name": name, "description": text, "parameters": schema, **flag}}
        for name, text, schema in shaped
    ]  # fmt: skip


def strict_schema(schema: dict[str, Any], format: str = "openai") -> dict[str, Any]:
    """`schema` as strict mode wants it: every object closed (`additionalProperties: false`) with every property
    required, those that were optional nullable (`["type", "null"]`, or a null choice of an `anyOf`); no root
    `anyOf` (a tool that needs one of two arguments says so in their descriptions, and refuses a call without)."""
    out: dict[str, Any] = _strict(copy.deepcopy(schema), _UNSUPPORTED[format])
    out.pop("anyOf", None)
    return out


def _strict(node: Any, refused: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_strict(item, refused) for item in node]
    if not isinstance(node, dict):
        return node
    for key in refused:
        kept = key not in node or isinstance(node[key], dict)  # a property named like a keyword stays
        if not kept and not (key == "minItems" and node[key] in (0, 1)):  # the one item count Anthropic's takes
            _bound(node, key)
    out = {key: _strict(value, refused) for key, value in node.items()}
    if out.get("type") == "object" or "properties" in out:
        properties: dict[str, Any] = out.get("properties") or {}
        required = set(out.get("required") or [])
        out["properties"] = {
            name: field if name in required else _nullable(field) for name, field in properties.items()
        }
        out["required"] = list(properties)
        out["additionalProperties"] = False
    return out


def _bound(node: dict[str, Any], key: str) -> None:
    """Drop a keyword strict mode refuses; a bound goes into the description so the model still reads it."""
    value = node.pop(key)
    if key in _SAID:
        text = str(node.get("description", "")).rstrip()
        node["description"] = f"{text} {_SAID[key].format(value)}".strip()


def _nullable(field: dict[str, Any]) -> dict[str, Any]:
    if "anyOf" in field:
        if not any(option.get("type") == "null" for option in field["anyOf"]):
            field["anyOf"] = [*field["anyOf"], {"type": "null"}]
        return field
    kind = field.get("type")
    if isinstance(kind, str):
        field["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        field["type"] = [*kind, "null"]
    if "enum" in field and None not in field["enum"]:
        field["enum"] = [*field["enum"], None]
    return field


def answer_schemas() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each tool's output schema as OpenAPI components, for `POST /v1/tools/{name}`'s answer: the components
    (`tools.<title>`, the models they use beside them, their `$ref`s pointing there) and each tool's component."""
    components: dict[str, dict[str, Any]] = {}
    answers: dict[str, str] = {}
    for tool in _listed():
        schema = _components_refs(copy.deepcopy(tool.output_schema or {"type": "object"}))
        answers[tool.name] = f"tools.{schema.get('title', tool.name)}"
        for name, model in [*schema.pop("$defs", {}).items(), (answers[tool.name].removeprefix("tools."), schema)]:
            if components.setdefault(f"tools.{name}", model) != model:  # two models of one name: rename one
                raise AssertionError(f"two answer models are named {name}")
    return components, answers


def _components_refs(node: Any) -> Any:
    if isinstance(node, list):
        return [_components_refs(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _components_refs(value) for key, value in node.items()}
    if isinstance(out.get("$ref"), str) and out["$ref"].startswith("#/$defs/"):
        out["$ref"] = "#/components/schemas/tools." + out["$ref"].removeprefix("#/$defs/")
    return out
