"""What the readers of paged JSON APIs share: one record at a time from the pages an export saved, and times.

A vendor's list endpoint answers one page at a time (`{"issues": [...], "startAt": 0, ...}`,
`{"incidents": [...], "pagination_meta": {...}}`, `{"data": [...], "links": {...}, "meta": {...}}`), so an export
is one page, a JSON array of pages, or one page per line (JSON Lines). `records` walks the file with ijson's event
parser and builds one record at a time, so memory stays flat whatever the number of pages; every record comes with
its location ("issues[4]", "page 2, data[1]") so a refusal says where to look.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import ijson
from pydantic import ValidationError

from grandbo.errors import ImportFormatError
from grandbo.history.record import FindingKind, HistoricFinding, HistoricIncident, Refusal

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


_HEADING = re.compile(r"^(?:#{1,6}|h[1-6]\.)\s+(.+?)\s*$")


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


class Unreadable(ValueError):
    """A record a reader cannot use; the message is the refusal's reason (what is wrong and what to do)."""


def records(path: Path, key: str, *, expected: str) -> Iterator[tuple[str, Any] | Refusal]:
    """(location, record) for every element of every page's `key` array, in order; a Refusal for what is not.

    A file that cannot be read, is empty, is not JSON or is a bare value raises ImportFormatError before anything is
    yielded; a page without a `key` array is a Refusal by its page; JSON that breaks off after some records yields
    one Refusal for the rest and stops.
    """
    try:
        blank = _blank(path)
    except OSError as exc:
        raise ImportFormatError(
            f"cannot read {path}: {exc.strerror or exc}; give the path of the exported JSON file",
            detail={"path": str(path)},
        ) from None
    if blank:
        raise ImportFormatError(f"{path.name} is empty: {expected}", detail={"path": str(path)})
    page = 0
    # A JSON array of pages or several values (JSON Lines): locations name the page.
    many = path.suffix.lower() in (".jsonl", ".ndjson", ".jl")
    in_array = False  # the pages are the elements of one top-level array
    page_prefix, array_prefix, item_prefix = "", key, f"{key}.item"
    seen_key = False
    index = 0
    building: Any = None
    yielded = False
    try:
        with path.open("rb") as handle:
            for prefix, event, value in ijson.parse(handle, multiple_values=True):
                if building is not None:
                    building.event(event, value)
                    if prefix == item_prefix and event in ("end_map", "end_array"):
                        yield _where(page, many, key, index), building.value
                        yielded, building, index = True, None, index + 1
                    continue
                if prefix == "" and event == "start_array" and not in_array:
                    many = in_array = True
                    page_prefix, array_prefix, item_prefix = "item", f"item.{key}", f"item.{key}.item"
                elif prefix == page_prefix and event == "start_map":
                    many = many or page > 0
                    page, seen_key, index = page + 1, False, 0
                elif prefix == array_prefix and event == "start_array":
                    seen_key = True
                elif prefix == page_prefix and event == "end_map":
                    if not seen_key:
                        yield Refusal(location=_page(page, many), reason=f"no `{key}` array in this page: {expected}")
                        yielded = True
                elif prefix == item_prefix:
                    if event in ("start_map", "start_array"):
                        building = ijson.ObjectBuilder()
                        building.event(event, value)
                    else:
                        yield Refusal(
                            location=_where(page, many, key, index),
                            reason=f"a JSON {event} where a record (an object) was expected: {expected}",
                        )
                        yielded, index = True, index + 1
                elif prefix == page_prefix and event not in ("end_array", "start_array", "map_key"):
                    if not yielded and not in_array:
                        raise ImportFormatError(
                            f"{path.name} holds a bare JSON {event}, not pages of records: {expected}",
                            detail={"path": str(path)},
                        )
                    page += 1
                    yield Refusal(location=_page(page, many), reason=f"a JSON {event}, not a page: {expected}")
                    yielded = True
    except ijson.JSONError as exc:
        if not yielded:
            raise ImportFormatError(
                f"{path.name} is not JSON ({_short(exc)}): {expected}", detail={"path": str(path)}
            ) from None
        yield Refusal(
            location=_where(page, many, key, index),
            reason=f"the file stops being JSON here ({_short(exc)}); what came before was read: re-export it whole",
        )
        return
    if page == 0:
        raise ImportFormatError(f"{path.name} is empty: {expected}", detail={"path": str(path)})


def read_each(
    path: Path, key: str, expected: str, build: Callable[[dict[str, Any], str], HistoricIncident]
) -> Iterator[HistoricIncident | Refusal]:
    """Every record of the pages at `path` through `build`; what `build` cannot read becomes a Refusal."""
    for found in records(path, key, expected=expected):
        if isinstance(found, Refusal):
            yield found
            continue
        location, record = found
        if not isinstance(record, dict):
            yield Refusal(location=location, reason=f"a JSON array where a record (an object) was expected: {expected}")
            continue
        try:
            yield build(record, location)
        except Unreadable as exc:
            yield Refusal(location=location, reason=str(exc))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
            yield Refusal(location=location, reason=f"unusable values ({problems}): correct them in the export")
        except (TypeError, AttributeError, KeyError) as exc:
            # Values of a type the vendor never writes there; the record is refused, never a traceback.
            yield Refusal(location=location, reason=f"values of unexpected types ({exc}): correct them in the export")
        except RecursionError:
            yield Refusal(location=location, reason="nested too deeply to read: export it again without the nesting")


def when(value: Any) -> datetime | None:
    """An ISO 8601 time as the vendors write it (`Z`, `+0000`, `+02:00`), in UTC when it has no zone; else None.

    None for anything that is not such a time: an unknown time stays unknown, never guessed.
    """
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def text(value: Any) -> str:
    """A string field as text (stripped), '' for null or anything that is not a string or a number."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return str(value)
    return ""


def name_of(value: Any, *keys: str) -> str:
    """The first non-empty of `keys` in an object (`{"name": "P1"}`), or the value itself when it is a string."""
    if isinstance(value, dict):
        for key in keys:
            if found := text(value.get(key)):
                return found
        return ""
    return text(value)


def items(value: Any) -> list[Any]:
    """A list field as a list ([] for null or a missing field)."""
    return value if isinstance(value, list) else []


def unique(values: list[str]) -> list[str]:
    """Non-empty values, first occurrence kept, in order."""
    return list(dict.fromkeys(v for v in values if v))


def _blank(path: Path) -> bool:
    """Whether the file holds nothing but whitespace (read in chunks, never whole)."""
    with path.open("rb") as handle:
        while chunk := handle.read(65536):
            if chunk.strip():
                return False
    return True


def _page(page: int, many: bool) -> str:
    return f"page {page}" if many else "the file"


def _where(page: int, many: bool, key: str, index: int) -> str:
    here = f"{key}[{index}]"
    return f"page {page}, {here}" if many else here


def _short(exc: Exception) -> str:
    """The parser's first line, as text (yajl hands some messages over as bytes)."""
    said = exc.args[0] if exc.args else ""
    said = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
    return said.strip().splitlines()[0][:120] if said.strip() else type(exc).__name__
