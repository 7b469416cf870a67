"""Read a vendor record's fields by the type its reference gives them; a wrong type says which field and what to do.

Times that are missing or unreadable stay None (an unknown time is never guessed); a time without a zone is read
as UTC, the zone every vendor here writes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any


class WrongType(ValueError):
    """A field of the wrong JSON type: the reader turns it into a Refusal for the record."""


def kind(value: object) -> str:
    """The JSON type's name, the way a user reading the export sees it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return "text"
    return "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__


def text(record: dict[str, Any], key: str, where: str = "") -> str:
    """The text at `key`, stripped; "" when absent or null."""
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise WrongType(f"`{where}{key}` is {kind(value)}, not text")
    return value.strip()


def obj(record: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
    """The object at `key`; {} when absent or null."""
    value = record.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WrongType(f"`{where}{key}` is {kind(value)}, not an object")
    return value


def array(record: dict[str, Any], key: str, where: str = "", *, wrapped: tuple[str, ...] = ()) -> list[Any]:
    """The list at `key`; [] when absent or null. `wrapped`: the list may come as the vendor's whole answer, an
    object holding it under one of these keys (`{"notes": [...]}`), as an export script that saved it would write."""
    value = record.get(key)
    for inner in wrapped:
        if isinstance(value, dict) and inner in value:
            value = value[inner]
    if value is None:
        return []
    if not isinstance(value, list):
        raise WrongType(f"`{where}{key}` is {kind(value)}, not a list")
    return value


def when(value: object) -> datetime | None:
    """An ISO 8601 time ("2024-03-01T10:02:00Z", "...+01:00"); None when missing or unreadable."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def after(start: datetime | None, millis: object) -> datetime | None:
    """`start` plus a duration in milliseconds (Opsgenie's report times); None when either is unknown."""
    if start is None or isinstance(millis, bool) or not isinstance(millis, int | float) or millis < 0:
        return None
    return start + timedelta(milliseconds=millis)


def details(value: object) -> str:
    """Free-form details (a string, or an object of fields) as text a person reads: one `key: value` a line."""
    if value is None or value == "" or value == {}:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        return "\n".join(f"{k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in value.items())
    return json.dumps(value)


def joined(*parts: str) -> str:
    """The non-empty parts, a blank line apart."""
    return "\n\n".join(part for part in parts if part)
