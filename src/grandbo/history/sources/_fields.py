"""Read a vendor record's fields by the type its reference gives them, the same way in every JSON reader.

An optional field of the wrong JSON type (`"labels": "db"` where a list belongs) is read as absent and said in
`Fields.ignored` ("labels: a string, not a list"), which the reader puts in `HistoricIncident.ignored` for the
importer to count: never a refusal for the whole record, never silent. Only the essential field, the id, refuses a
record (`Unreadable`), and a time the calendar cannot hold in UTC (9999-12-31T23:59:59-05:00: the store refused it,
naming its own field, `occurred_at`), which `on_calendar` refuses naming the export's. Times that are missing stay
None; an unreadable one stays None too and is said in `ignored` (an unknown time is never guessed). A time without a
zone is read as UTC, the zone every vendor here writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from grandbo.errors import ImportFormatError
from grandbo.history.record import FindingKind, HistoricFinding
from grandbo.values import utc

MAX_IGNORED = 20  # fields listed in one record's `ignored`; past it, one line says there were more


class Unreadable(ValueError):
    """A record a reader cannot use (its id is missing or of the wrong type, a time off the calendar); the message is
    the refusal's reason."""


class Skip(ValueError):
    """A record the reader leaves out on purpose (a test incident, a duplicate); the message says why."""


def refuse_mapping(source: str, reads: str, mapping: Mapping[str, str] | None) -> None:
    """`Reader.check` of a source that reads its own fields (`reads` says which): any mapping is refused."""
    if mapping:
        raise ImportFormatError(
            f"The {source} source takes no --map (?map= over REST): it reads {reads}. Import again without it.",
            detail={"source": source},
        )


def kind(value: object) -> str:
    """The JSON type's name, the way a user reading the export sees it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float | Decimal):
        return f"a number ({value})"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__


class Fields:
    """One JSON object's fields, read by type; `where` prefixes the names said in `ignored` (`service.summary`)."""

    def __init__(self, value: Any, where: str = "", ignored: list[str] | None = None) -> None:
        self.value: dict[str, Any] = value if isinstance(value, dict) else {}
        self.where = where
        self.ignored: list[str] = [] if ignored is None else ignored

    def raw(self, key: str) -> Any:
        """The value as parsed, whatever its type (the caller checks it)."""
        return self.value.get(key)

    def wrong(self, key: str, value: object, wanted: str) -> None:
        """Say that `key` held `value`, not `wanted`, and was read as absent."""
        self.say(f"{self.where}{key}: {kind(value)[:60]}, not {wanted}")

    def say(self, said: str) -> None:
        """Note a field read as absent, once; past `MAX_IGNORED` only that there were more."""
        if said in self.ignored or len(self.ignored) > MAX_IGNORED:
            return
        self.ignored.append(said if len(self.ignored) < MAX_IGNORED else "more fields of the wrong type, not listed")

    def text(self, key: str) -> str:
        """The text at `key`, stripped (a number as written); "" when absent, null or of another type."""
        value = self.value.get(key)
        if value is None or isinstance(value, str) or _number(value):
            return text(value)
        self.wrong(key, value, "a string")
        return ""

    def obj(self, key: str) -> Fields:
        """The object at `key` (its own fields); empty when absent, null or of another type."""
        value = self.value.get(key)
        if value is not None and not isinstance(value, dict):
            self.wrong(key, value, "an object")
        return Fields(value, f"{self.where}{key}.", self.ignored)

    def array(self, key: str, *, wrapped: tuple[str, ...] = ()) -> list[Any]:
        """The list at `key`; [] when absent or null. `wrapped`: the list may come as the vendor's whole answer, an
        object holding it under one of these keys (`{"notes": [...]}`), as an export script that saved it writes."""
        value = self.value.get(key)
        for inner in wrapped:
            if isinstance(value, dict) and inner in value:
                value = value[inner]
        if value is None or isinstance(value, list):
            return value or []
        self.wrong(key, value, "a list")
        return []

    def objects(self, key: str, *, wrapped: tuple[str, ...] = ()) -> list[Fields]:
        """The objects of the list at `key`; an element of another type is left out and said."""
        found = []
        for number, value in enumerate(self.array(key, wrapped=wrapped)):
            if isinstance(value, dict):
                found.append(Fields(value, f"{self.where}{key}[{number}].", self.ignored))
            else:
                self.wrong(f"{key}[{number}]", value, "an object")
        return found

    def strings(self, key: str) -> list[str]:
        """The non-empty strings of the list at `key`; an element of another type is left out and said."""
        found = []
        for number, value in enumerate(self.array(key)):
            if isinstance(value, str) or _number(value):
                found.append(text(value))
            else:
                self.wrong(f"{key}[{number}]", value, "a string")
        return [value for value in found if value]

    def name(self, key: str, *names: str) -> str:
        """A related object's name (the first non-empty of `names`: `{"name": "P1"}`), or a plain string."""
        value = self.value.get(key)
        if isinstance(value, dict):
            inner = Fields(value, f"{self.where}{key}.", self.ignored)
            return next((found for each in names if (found := inner.text(each))), "")
        return self.text(key)

    def when(self, key: str) -> datetime | None:
        """The ISO 8601 time at `key`; None when absent, and None (said) when unreadable or of another type."""
        value = self.value.get(key)
        if value is None or value == "":
            return None
        if (at := when(value)) is None and isinstance(value, str):
            self.say(f"{self.where}{key}: {value.strip()[:40]!r}, not an ISO 8601 time")
        elif at is None:
            self.wrong(key, value, "a time")
        return on_calendar(at, f"{self.where}{key}")


def _number(value: object) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def when(value: object) -> datetime | None:
    """An ISO 8601 time as the vendors write it (`Z`, `+0000`, `+02:00`), in UTC when it has no zone; else None."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def on_calendar(at: datetime | None, where: str) -> datetime | None:
    """`at`; Unreadable naming `where` (the export's field or column) when its offset puts it off the calendar in
    UTC, where the store cannot hold it."""
    if at is not None:
        try:
            utc(at)
        except ValueError as error:
            raise Unreadable(f"{where}: {error}") from None
    return at


def text(value: object) -> str:
    """A string (stripped) or a number as text; "" for null or anything else."""
    if isinstance(value, str):
        return value.strip()
    return str(value) if _number(value) else ""


def after(start: datetime | None, millis: object) -> datetime | None:
    """`start` plus a duration in milliseconds (Opsgenie's report times); None when either is unknown."""
    if start is None or not isinstance(millis, int | float | Decimal) or isinstance(millis, bool) or millis < 0:
        return None
    try:
        return start + timedelta(milliseconds=float(millis))
    except OverflowError:
        return None


def details(value: object) -> str:
    """Free-form details (a string, or an object of fields) as text a person reads: one `key: value` a line."""
    if value is None or value == "" or value == {}:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        return "\n".join(f"{k}: {v if isinstance(v, str) else _json(v)}" for k, v in value.items())
    return _json(value)


def _json(value: object) -> str:
    """JSON text of a parsed value; the parser's exact numbers (Decimal) are written as the numbers they are."""
    return json.dumps(value, default=lambda d: int(d) if d == d.to_integral_value() else float(d))


def joined(*parts: str) -> str:
    """The non-empty parts, a blank line apart."""
    return "\n\n".join(part for part in parts if part)


def unique(values: list[str]) -> list[str]:
    """Non-empty values, first occurrence kept, in order."""
    return list(dict.fromkeys(v for v in values if v))


# What a heading or a field's name says the text under it is (teams name them freely: "Root cause(s)",
# "Contributing factors", "What fixed it", "Lessons learned", "Follow-up actions").
_FINDING_WORDS: list[tuple[re.Pattern[str], FindingKind]] = [
    (re.compile(r"contribut", re.I), "contributing"),
    (re.compile(r"cause", re.I), "cause"),
    (re.compile(r"trigger", re.I), "trigger"),
    (re.compile(r"lesson|learn", re.I), "lesson"),
    (re.compile(r"action.?item|follow.?up", re.I), "action"),
    (re.compile(r"resolution|remediat|mitigat|\bfix", re.I), "remediation"),
]
# The title as `(.+?)\s*$` read it, to its last character that is no space (one space when there is none), in
# one pass: that lazy title tried `\s*$` after each of its characters, 0.8 s for a line of 8,000 spaces
_HEADING = re.compile(r"^(?:#{1,6}|h[1-6]\.)\s+(\S(?:.*\S)?|[^\S\n])\s*$")


def finding_kind(name: str) -> FindingKind | None:
    """The kind of finding a heading or field named `name` holds, or None when the name says none."""
    return next((kind for pattern, kind in _FINDING_WORDS if pattern.search(name)), None)


def section_findings(description: str) -> list[HistoricFinding]:
    """The sections of a post-mortem-like text whose heading says what they hold ("Root cause", ...) as findings.

    Markdown headings and Jira wiki headings (`h2. Root cause`, Jira Server) both count; a section runs to
    the next heading.
    """
    found: list[HistoricFinding] = []
    kind: FindingKind | None = None
    lines: list[str] = []
    fenced = False  # a `# comment` in a code block is not a heading
    for line in [*description.splitlines(), "# end"]:
        fenced = fenced != line.lstrip().startswith("```")
        heading = None if fenced else _HEADING.match(line)
        if heading is None:
            lines.append(line)
            continue
        if kind is not None and (body := "\n".join(lines).strip()):
            found.append(HistoricFinding(kind=kind, text=body))
        kind, lines = finding_kind(heading[1]), []
    return found
