"""A csv row or a jsonl line's object as a `HistoricIncident`, through the field mapping `--map` gives
(`sources.tabular` says how a mapping reads).

A time whose offset puts it off the calendar in UTC (9999-12-31T23:59:59-05:00) refuses its record naming the
column it was read from: the store cannot hold it, and the refusal named the entry's field (`occurred_at`), which
no export has.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from grandbo.errors import InvalidInputError
from grandbo.history.record import MAX_RECORD, HistoricFinding, HistoricIncident, Refusal, too_long
from grandbo.history.sources._encoding import label
from grandbo.history.sources._fields import Unreadable, on_calendar
from grandbo.linear import LinearPattern
from grandbo.model import ENTRY_ID_PATTERN, MAX_BODY_CHARS

ALIASES = {
    "id": "source_id", "body": "postmortem", "occurred_at": "started_at", "date": "started_at",
    "description": "summary", "root_cause": "cause", "resolution": "remediation", "service": "services",
    "tags": "labels", "runbook": "runbooks", "source_url": "url", "ended_at": "resolved_at",
}  # fmt: skip
TEXT = ("source_id", "title", "summary", "postmortem", "status", "severity", "url")
LISTS = ("services", "labels", "runbooks", "notes")
FINDINGS = ("cause", "trigger", "contributing", "remediation", "lesson", "action")
TIMES = ("started_at", "resolved_at")
OTHER = ("runbook_succeeded", "time_to_mitigate_s", "source")
FIELDS = (*TEXT, *LISTS, *FINDINGS, *TIMES, *OTHER)
# the shortest entry id a source begins (`decide.incident_id`, a one-character id, its first finding): a source no
# such id holds (`model.ENTRY_ID_PATTERN`: a character it refuses, over 128 in all) can begin no entry id
_SHORTEST_ID_AFTER = ":1-f1"
MAX_SOURCE = 128 - len(_SHORTEST_ID_AFTER)  # 123
_UNKNOWN = {"", "unknown", "n/a", "na", "none", "null", "tbd", "-", "?"}
# RE2: Python's engine took 66 s for one heading of 2,000 spaces before a last word (`\s*#*\s*$` after each
# character the lazy title tried), and tried each of a run of blank lines against the rest of them
_HEADING = LinearPattern(r"(?m)^\s*#\s+(.+?)\s*#*\s*$")


class Mapped:
    """A source read through a `--map` (csv, jsonl): its `Reader.check` is the mapping's parse."""

    def check(self, mapping: dict[str, str] | None) -> None:
        parse_mapping(mapping)


def parse_mapping(mapping: Mapping[str, str] | None) -> dict[str, list[str]]:
    """The mapping as field -> columns (aliases resolved); an unknown field is an error listing the valid ones, and
    so, naming the pair, is one no record could be read through (`_mapping_problem`): each record was refused."""
    out: dict[str, list[str]] = {}
    for key, value in (mapping or {}).items():
        name = ALIASES.get(key.strip(), key.strip())
        if name not in FIELDS:
            raise InvalidInputError(
                f"--map names an unknown field {key!r}; the fields are {', '.join(sorted({*FIELDS, *ALIASES}))}.",
                detail={"field": key},
            )
        out[name] = [value.strip()] if value.startswith("=") else [c.strip() for c in value.split("+") if c.strip()]
        if problem := _mapping_problem(name, value.strip()):
            raise InvalidInputError(f"--map {key.strip()}={value.strip()}: {problem}", detail={"field": key})
    return out


def _mapping_problem(name: str, value: str) -> str | None:
    """Why FIELD=VALUE of `--map` reads no record (an id that is no column, a constant source no id can hold)."""
    constant = value[1:].strip() if value.startswith("=") else None
    if name == "source_id" and constant is not None:
        return ("a value starting with `=` is one constant for every record (source==public), and each record needs "
                "its own id: name the column that holds it, source_id=COLUMN.")  # fmt: skip
    if name == "source_id" and not value.replace("+", "").strip():
        return "names no column: name the column that holds each record's id, source_id=COLUMN."
    if constant == "":
        return f"the `=` after `{name}=` starts a constant, and none follows: write one ({name}==VALUE), or a column."
    if name == "source" and constant is not None and (problem := source_problem(constant)):
        return f"{problem} (the `=` after `source=` makes it the source every record is filed under)."
    return None


def source_problem(source: str) -> str | None:
    """Why `source` can begin no entry id (its records' ids begin with it, `decide.incident_id`), or None. The rule
    is the entry id's own, on the shortest id it could begin: a longer id can still be too long, refusing its record
    as before."""
    if not ENTRY_ID_PATTERN.fullmatch(source + _SHORTEST_ID_AFTER):
        shown = source[:60].encode("unicode_escape").decode()
        return (f"the source name {shown!r} must be 1 to {MAX_SOURCE} letters, digits, `.`, `_`, `:`, `@` or `-`, "
                "starting with a letter or digit")  # fmt: skip
    return None


def _columns(name: str) -> list[str]:
    return [name, *(alias for alias, target in ALIASES.items() if target == name)]


def _values(row: Mapping[str, Any], name: str, mapped: dict[str, list[str]]) -> list[Any]:
    if name in mapped:
        columns = mapped[name]
        if len(columns) == 1 and columns[0].startswith("="):
            return [columns[0][1:]]
        return [row.get(column) for column in columns if row.get(column) not in (None, "")]
    for column in _columns(name):  # unmapped: the first column of its own name or an alias
        if row.get(column) not in (None, ""):
            return [row[column]]
    return []


def _text(values: list[Any]) -> str:
    return "\n\n".join(str(v).strip() for v in values if not isinstance(v, dict | list) and str(v).strip())


def _items(values: list[Any], split: bool) -> list[str]:
    out: list[str] = []
    for value in values:
        if isinstance(value, list):
            out += [str(v).strip() for v in value if isinstance(v, str | int | float) and str(v).strip()]
        elif isinstance(value, str | int | float):
            parts = re.split(r"[,;]", str(value)) if split else [str(value)]
            out += [p.strip() for p in parts if p.strip()]
    return list(dict.fromkeys(out))


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time (UTC when it has no zone), or None when it is unknown or cannot be read."""
    if not isinstance(value, str) or value.strip().lower() in _UNKNOWN:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _flag(values: list[Any]) -> bool | None:
    word = str(values[0]).strip().lower() if values else ""
    if isinstance(values[0] if values else None, bool):
        return bool(values[0])
    return True if word in {"true", "yes", "1", "succeeded", "success", "worked"} else (
        False if word in {"false", "no", "0", "failed", "failure"} else None
    )  # fmt: skip


def _number(values: list[Any]) -> float | None:
    try:
        return float(values[0]) if values else None
    except (TypeError, ValueError):
        return None


def record_of(row: Mapping[str, Any], mapped: dict[str, list[str]], source: str, location: str,
              split: bool) -> HistoricIncident | Refusal:  # fmt: skip
    """One row as a HistoricIncident, or a Refusal saying why it cannot be one."""
    source_id = _text(_values(row, "source_id", mapped))
    if not source_id:
        wanted = "+".join(mapped.get("source_id", ["id"]))
        return Refusal(location=location, reason=f"no id (column {wanted!r} is empty or absent): name the column "
                       "that holds each record's id with --map source_id=COLUMN")  # fmt: skip
    if too_long := _too_long(row, mapped):
        return Refusal(location=location, reason=too_long)
    data: dict[str, Any] = {name: _text(_values(row, name, mapped)) for name in TEXT if name != "source_id"}
    data.update({name: _items(_values(row, name, mapped), split) for name in LISTS})
    try:
        for name in TIMES:
            where = f"{_source_of(row, name, mapped)} (read as {name})"
            data[name] = on_calendar(parse_time(next(iter(_values(row, name, mapped)), None)), where)
    except Unreadable as error:
        return Refusal(location=location, reason=str(error))
    findings = [HistoricFinding(kind=kind, text=text)
                for kind in FINDINGS for text in _items(_values(row, kind, mapped), False)]  # fmt: skip
    if not data["title"] and (heading := _HEADING.search(data["postmortem"])):
        data["title"] = heading.group(1)
    named = _text(_values(row, "source", mapped)) if "source" in mapped else ""
    if named and (problem := source_problem(named)):
        return Refusal(location=location, reason=f"{_source_of(row, 'source', mapped)} (read as source): {problem}")
    try:
        return HistoricIncident(
            source=named or source, source_id=source_id[:500], location=location, findings=findings,
            runbook_succeeded=_flag(_values(row, "runbook_succeeded", mapped)),
            time_to_mitigate_s=_number(_values(row, "time_to_mitigate_s", mapped)), **data,
        )  # fmt: skip
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        return Refusal(location=location, reason=f"cannot be read as an incident: {problems[:300]}")


def _source_of(row: Mapping[str, Any], name: str, mapped: dict[str, list[str]]) -> str:
    """Where field `name`'s value was read from, as the user named it: `column 'date'`, or `--map started_at=...`
    for a constant."""
    columns = mapped.get(name) or _columns(name)
    if columns[0].startswith("="):
        return f"--map {name}{columns[0]}"
    return f"column {next((c for c in columns if row.get(c) not in (None, '')), columns[0])!r}"


def _too_long(row: Mapping[str, Any], mapped: dict[str, list[str]]) -> str | None:
    """Why a column read into a memory entry's body is over what an entry holds, naming it; None when none is."""
    fields = ("postmortem", *FINDINGS) if _values(row, "postmortem", mapped) else ("summary", "notes", *FINDINGS)
    for name in fields:
        columns = mapped.get(name) or [next((c for c in _columns(name) if row.get(c) not in (None, "")), name)]
        for column in columns:
            value = row.get(column)
            if isinstance(value, str) and len(value) > MAX_BODY_CHARS:
                return (
                    f"column {column!r} (read as {name}) holds {len(value):,} characters, over the "
                    f"{MAX_BODY_CHARS:,} a memory entry holds: cut it in the export (keep what was seen, the cause "
                    f"and what fixed it), or leave it out (--map {name}=ANOTHER_COLUMN)"
                )
    return None


def over(size: str) -> str:
    """Why a line or row of `size` ("50,331,648 bytes") is refused: over MAX_RECORD."""
    return too_long(size, f"{MAX_RECORD:,} a line or row may be")


def unreadable(error: Exception) -> str:
    """What the csv module or the decoder said, short."""
    if isinstance(error, UnicodeDecodeError):
        return f"byte 0x{error.object[error.start]:02x} is not {label(error.encoding)}"
    return str(error)[:120]
