"""Bad tool arguments said as an agent can act on them: one sentence naming the argument and what to send,
read from the tool's own input schema, instead of the SDK's pydantic report (type codes, links, the value
echoed back). `checked` runs the SDK's own check of a call's arguments on a worker thread, before the SDK runs it
again on the event loop, so arguments it refuses never reach the loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from pydantic import ValidationError

from grandbo.jsontext import values_at_least
from grandbo.mcp.envelope import MAX_VALUES

SHOWN = 5  # names of arguments no tool takes that a refusal lists at most
NAME_SHOWN = 60  # characters of such a name (or of an unknown tool's) it shows at most


def checked(tool: str, schema: Mapping[str, Any], metadata: FuncMetadata, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a call of `tool` as it takes them (a null for an argument that takes none means "left out"),
    checked as the SDK checks them (`metadata`, the tool's); raises ToolError with one sentence when it refuses them.
    Called on a worker thread: the SDK checks them on the event loop every organization shares, where a refused
    1 MiB list (or a JSON text of one in a string, which the SDK parses first) held it 200-480 ms (probe 27)."""
    if (extra := unknown_arguments(tool, schema, arguments)) is not None:
        raise ToolError(extra)
    arguments = {k: v for k, v in arguments.items() if v is not None or _nullable(schema, k)}
    fields = metadata.arg_model.model_fields
    for name, value in arguments.items():  # the SDK parses a string sent for an argument of another type as JSON
        if (
            isinstance(value, str)
            and fields[name].annotation is not str
            and _container(value)
            and values_at_least(value) > MAX_VALUES
        ):
            said = f"`{name}` got a JSON text of over {MAX_VALUES:,} values: send {_wanted(schema['properties'][name])}"
            raise ToolError(f"{tool} was not called: {said}.")
    try:
        metadata.validate_arguments(arguments)
    except ValidationError as error:
        raise ToolError(invalid_arguments(tool, schema, error)) from error
    return arguments


def _container(text: str) -> bool:
    """Whether `text` may be the JSON text of an array or an object, what the SDK would parse into one: any other
    string (a post-mortem of prose, its commas outside any quotes) is taken as the string it is."""
    stripped = text.strip()
    return stripped[:1] in ("[", "{") and stripped[-1:] in ("]", "}")


def _nullable(schema: Mapping[str, Any], name: str) -> bool:
    field = (schema.get("properties") or {}).get(name) or {}
    return any(option.get("type") == "null" for option in field.get("anyOf", []))


def unknown_arguments(tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """The sentence for arguments the tool does not take (the SDK crashed on them), or None."""
    known = dict(schema.get("properties") or {})
    extra = [name for name in arguments if name not in known]
    if not extra:
        return None
    # A few, each cut short: 70,000 names in a body under its 1 MiB bound were echoed whole, a 689 KB answer
    listed = ", ".join(f"`{_cut(name)}`" for name in extra[:SHOWN]) + (
        f" and {len(extra) - SHOWN} more" if len(extra) > SHOWN else ""
    )
    return f"{tool} was not called: it takes no argument {listed}; send only {_names(known, schema)}."


def unknown_tool(name: str) -> str:
    """The sentence for a call of a tool there is none of, its name cut short (the SDK echoed a 1 MB name whole)."""
    return f"No tool `{_cut(name)}`: tools/list names the tools this server offers."


def _cut(name: str) -> str:
    return name if len(name) <= NAME_SHOWN else f"{name[:NAME_SHOWN]}... ({len(name)} characters)"


def invalid_arguments(tool: str, schema: Mapping[str, Any], error: ValidationError) -> str:
    """One sentence for every argument the validation refused, each with what to send."""
    known = dict(schema.get("properties") or {})
    problems: dict[str, str] = {}
    for issue in error.errors():
        name = str(issue["loc"][0]) if issue.get("loc") else ""
        if name and name not in problems:
            problems[name] = _problem(name, known.get(name, {}), issue)
    said = "; ".join(problems.values()) or "the arguments do not match its schema"
    return f"{tool} was not called: {said}."


def _problem(name: str, field: Mapping[str, Any], issue: Mapping[str, Any]) -> str:
    wanted = _wanted(field)
    if issue.get("type") == "missing":
        return f"`{name}` is missing: send {wanted}"
    return f"`{name}` got {_shown(issue.get('input'))}: send {wanted}"


def _wanted(field: Mapping[str, Any]) -> str:
    """What a property of the schema takes, in words: its type, its bounds or choices, and its description."""
    options = [o for o in field.get("anyOf", [field]) if o.get("type") != "null"] or [field]
    first = {**field, **options[0]}
    if "enum" in first:
        kind = "one of " + ", ".join(f"'{choice}'" for choice in first["enum"])
    else:
        kind = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
                "array": "a list", "object": "an object"}.get(str(first.get("type")), "a value")  # fmt: skip
        if first.get("format") == "date-time":  # a string it got, but not such a time
            kind = "an ISO 8601 time (2026-12-06T08:00:00Z) in the years 1 to 9999"
        if "minimum" in first and "maximum" in first:
            kind += f" from {first['minimum']} to {first['maximum']}"
        if "maxLength" in first:
            kind += f" of {first.get('minLength', 0) or 1}-{first['maxLength']} characters"
    if any(o.get("type") == "null" for o in field.get("anyOf", [])):
        kind += " (or leave it out)"
    description = str(field.get("description", "")).rstrip(".")
    return f"{kind} ({description})" if description else kind


def _shown(value: object) -> str:
    if isinstance(value, list | dict) and len(value) > 20:  # said by its size, its repr never made (80 ms for 1 MiB)
        return f"a list of {len(value):,} items" if isinstance(value, list) else f"an object of {len(value):,} members"
    text = repr(value)
    return text if len(text) <= 40 else f"{type(value).__name__} of {len(text)} characters"


def _names(known: Mapping[str, Any], schema: Mapping[str, Any]) -> str:
    required: Sequence[str] = schema.get("required") or []
    return ", ".join(f"`{name}`" + (" (required)" if name in required else "") for name in known)
