"""`csv` and `jsonl`: a table of past incidents, one a row (or a JSON object a line), read with a field mapping.

`--map title=root_cause,postmortem=body,started_at=date,...` names the column each field of `HistoricIncident` is
read from; a field left out is read from the column of its own name (or one of its aliases below). Several columns
joined by `+` (`labels=company+category`) are all read: into a list for the list fields, as paragraphs for text.
A value starting with `=` is a constant: `source==public` files the records under the source name `public` (default:
the reader's name). A mapped column a csv file's header lacks, or that no jsonl line has as a key, is refused before
any record is read: a typo would read every record without that part. Findings come from the columns mapped to
`cause`, `trigger`, `contributing`, `remediation`, `lesson` and `action`. With no title, a post-mortem's first `# `
heading is the title.

Dates are ISO 8601 (a time without a zone is UTC); empty, `Unknown`, `N/A` or anything else unreadable is unknown
(None: the importer counts it). A row without an id is refused: map the column that holds it (`source_id=COL`).
A csv file whose header names a column twice is refused whole, naming it (each row would keep the last such
column's value only); a jsonl line whose object names a key twice (at any depth) is refused so, that line alone. A line
(jsonl) or row (csv) over `MAX_RECORD` is refused without being held: no record it
could file is that long, and a gigabyte upload of one line took three times its size in memory. A jsonl line of
more than `MAX_VALUES` JSON values is refused unbuilt too, as a JSON export's record is.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import ijson
from pydantic import ValidationError

from grandbo.errors import ImportFormatError, InvalidInputError
from grandbo.history.record import MAX_RECORD, MAX_VALUES, HistoricFinding, HistoricIncident, Refusal, too_long
from grandbo.linear import LinearPattern
from grandbo.model import MAX_BODY_CHARS
from grandbo.values import NotJsonNumber, RepeatedKey, strict_json

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
_UNKNOWN = {"", "unknown", "n/a", "na", "none", "null", "tbd", "-", "?"}
_NOT_VALUES = frozenset({"map_key", "end_map", "end_array"})  # ijson's events that are no value of their own
SAMPLE = 100  # jsonl lines whose keys a refused `--map` names (`_refuse_unseen`)
# RE2: Python's engine took 66 s for one heading of 2,000 spaces before a last word (`\s*#*\s*$` after each
# character the lazy title tried), and tried each of a run of blank lines against the rest of them
_HEADING = LinearPattern(r"(?m)^\s*#\s+(.+?)\s*#*\s*$")


def parse_pairs(text: str | None) -> dict[str, str] | None:
    """`title=root_cause,postmortem=body` (as `--map` takes it) as a dict; an item without `=` is an error."""
    if not text:
        return None
    items = [item for item in text.split(",") if item.strip()]
    bad = [item for item in items if "=" not in item or not item.split("=", 1)[0].strip()]
    if bad:
        raise InvalidInputError(
            f"--map takes FIELD=COLUMN pairs separated by commas (title=root_cause,started_at=date); {bad[0]!r} is "
            "not one.",
            detail={"map": text},
        )
    return {key.strip(): value.strip() for key, value in (item.split("=", 1) for item in items)}


def parse_mapping(mapping: Mapping[str, str] | None) -> dict[str, list[str]]:
    """The mapping as field -> columns (aliases resolved); an unknown field is an error listing the valid ones."""
    out: dict[str, list[str]] = {}
    for key, value in (mapping or {}).items():
        name = ALIASES.get(key.strip(), key.strip())
        if name not in FIELDS:
            raise InvalidInputError(
                f"--map names an unknown field {key!r}; the fields are {', '.join(sorted({*FIELDS, *ALIASES}))}.",
                detail={"field": key},
            )
        out[name] = [value.strip()] if value.startswith("=") else [c.strip() for c in value.split("+") if c.strip()]
    return out


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
    data.update({name: parse_time(next(iter(_values(row, name, mapped)), None)) for name in TIMES})
    findings = [HistoricFinding(kind=kind, text=text)
                for kind in FINDINGS for text in _items(_values(row, kind, mapped), False)]  # fmt: skip
    if not data["title"] and (heading := _HEADING.search(data["postmortem"])):
        data["title"] = heading.group(1)
    named = _text(_values(row, "source", mapped)) if "source" in mapped else ""
    try:
        return HistoricIncident(
            source=named or source, source_id=source_id[:500], location=location, findings=findings,
            runbook_succeeded=_flag(_values(row, "runbook_succeeded", mapped)),
            time_to_mitigate_s=_number(_values(row, "time_to_mitigate_s", mapped)), **data,
        )  # fmt: skip
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        return Refusal(location=location, reason=f"cannot be read as an incident: {problems[:300]}")


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


class JsonLines:
    """`jsonl`: one JSON object a line."""

    name = "jsonl"

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal]:
        mapped = parse_mapping(mapping)
        _refuse_unseen(path, mapped)
        with path.open("rb") as handle:
            for number, raw in enumerate(_lines(handle), start=1):
                row = _row(raw, number)
                if isinstance(row, dict):
                    yield record_of(row, mapped, self.name, f"line {number}", split=False)
                elif row is not None:
                    yield row


def _row(raw: bytes | int, number: int) -> dict[str, Any] | Refusal | None:
    """Line `number` of a jsonl file (`_lines`) as its JSON object, a Refusal saying why it is none, or None when
    it is blank."""
    if isinstance(raw, int):
        return Refusal(location=f"line {number}", reason=_over(f"{raw:,} bytes"))
    if not raw.strip():
        return None
    try:
        text = (raw.removeprefix(b"\xef\xbb\xbf") if number == 1 else raw).decode("utf-8")
    except UnicodeDecodeError as error:  # json.loads would guess UTF-16 and say so
        return Refusal(location=f"line {number}", reason=f"not UTF-8 ({_unreadable(error)}): save the file as "
                       "UTF-8 (e.g. `iconv -f latin1 -t utf-8`) and import again")  # fmt: skip
    if many := _values_over(raw):
        return Refusal(location=f"line {number}", reason=too_long(many, f"{MAX_VALUES:,} values a line may hold"))
    try:
        row = strict_json(text, unique_keys=True)
    except NotJsonNumber as error:
        return Refusal(location=f"line {number}", reason=f"{error.args[0]}: write null or a string")
    except RepeatedKey as error:
        return Refusal(location=f"line {number}", reason=f"names the key {error.args[0][:100]!r} more than once in "
                       "one object: the record would keep its last value only; remove or rename the repeated key "
                       "and import again")  # fmt: skip
    except (ValueError, RecursionError) as error:
        return Refusal(location=f"line {number}", reason=f"not a JSON object: {str(error)[:200]}")
    if not isinstance(row, dict):
        return Refusal(location=f"line {number}", reason=f"not a JSON object but {type(row).__name__}")
    return row


def _refuse_unseen(path: Path, mapped: dict[str, list[str]]) -> None:
    """Refuse, before any record is read, a mapping naming a column that no line's object has as a key, as a csv
    file's header is checked: a typo (`title=titel`) read every record without that part, and a re-import then
    retired every entry the part had filed. A key may first come late in a sparse file, so lines are read until
    every column has been seen: past the first SAMPLE, only those holding a missing column's longest run of plain
    characters (no writer escapes a letter) are parsed, so a file the check refuses is mostly scanned as bytes,
    not parsed twice (100,000 lines, 112 MB: refused in 0.8 s; 3.6 s for `titl`, which every line holds, against
    27 s to read the records), and one whose columns are all in its first line costs one line. A file with no
    object at all has nothing to misread and is not refused (an empty export, lines refused one by one)."""
    unseen = {c for columns in mapped.values() for c in columns if not c.startswith("=")}
    if not unseen:
        return
    plain = {column: max(re.findall(r"[A-Za-z0-9 _.-]+", column), key=len, default="").encode() for column in unseen}
    keys: set[str] = set()
    read = 0  # lines parsed as objects: the first SAMPLE all are, for the keys the refusal names
    with path.open("rb") as handle:
        for number, raw in enumerate(_lines(handle), start=1):
            if not unseen:
                return
            if read >= SAMPLE and isinstance(raw, bytes) and not any(plain[c] in raw for c in unseen):
                continue
            row = _row(raw, number)
            if isinstance(row, dict):
                read += 1
                keys.update(list(row)[:200] if read <= SAMPLE else ())
                unseen.difference_update(row)
    if unseen and read:
        shown = sorted(key[:100] for key in keys)[:50]
        raise InvalidInputError(
            f"--map names column(s) {', '.join(sorted(unseen))} that no line of {path.name} has as a key: every "
            "record would be read without them, and a re-import would retire the entries they filed before. Map "
            f"keys the lines have (FIELD=KEY); its first {SAMPLE} lines have {', '.join(shown) or 'none'}.",
            detail={"missing": sorted(unseen), "keys": shown},
        )


class Csv:
    """`csv`: a header row, then one incident a row (comma-separated, quoted as spreadsheets write it)."""

    name = "csv"

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal]:
        mapped = parse_mapping(mapping)
        csv.field_size_limit(min(sys.maxsize, MAX_RECORD))  # a post-mortem in one cell
        with path.open(encoding="utf-8-sig", newline="") as handle:
            lines = _RowLines(handle)
            rows = csv.DictReader(lines)
            try:
                names = list(rows.fieldnames or [])
            except (UnicodeDecodeError, csv.Error) as error:
                raise ImportFormatError(
                    f"{path.name} is not a UTF-8 CSV file ({_unreadable(error)}): save it as UTF-8 CSV "
                    "(e.g. `iconv -f latin1 -t utf-8`) and import again.",
                    detail={"path": path.name},
                ) from None
            _refuse_repeated(names, path.name)
            header = set(names)
            missing = sorted({c for columns in mapped.values() for c in columns if not c.startswith("=")} - header)
            if missing:
                raise InvalidInputError(
                    f"--map names column(s) {', '.join(missing)} that {path.name} does not have; its columns are "
                    f"{', '.join(sorted(header)) or 'none (no header row)'}.",
                    detail={"missing": missing},
                )
            while True:
                lines.taken = 0
                try:
                    row = next(rows, None)
                except _TooLong:  # where the next row starts cannot be known without reading this one whole
                    reason = _over(f"over {MAX_RECORD:,} characters") + "; rows before were read, the rest were not"
                    yield Refusal(location=f"after row {rows.line_num}", reason=reason)
                    return
                except (UnicodeDecodeError, csv.Error) as error:  # the rows before were read; the rest cannot be
                    reason = f"the file stops being UTF-8 CSV here ({_unreadable(error)}); rows before were read: "
                    yield Refusal(location=f"after row {rows.line_num}", reason=reason + "save it as UTF-8 CSV again")
                    return
                if row is None:
                    return
                yield record_of(row, mapped, self.name, f"row {rows.line_num}", split=True)


def _refuse_repeated(names: list[str], file: str) -> None:
    """A header naming a column twice is refused before any row is read: each row would keep the value of the last
    such column only, whichever of them the mapping meant. Blank names are no column a mapping can name (a
    spreadsheet's trailing empty cells)."""
    counted = Counter(name for name in names if name.strip())
    repeated = sorted(name for name, times in counted.items() if times > 1)
    if repeated:
        raise ImportFormatError(
            f"{file} names column(s) {', '.join(repr(name[:100]) for name in repeated[:10])} more than once in its "
            "header row: a row's value would be read from the last of them only. Rename or remove the repeated "
            "column(s) and import again.",
            detail={"path": file, "duplicated": [name[:100] for name in repeated[:50]]},
        )


def _lines(handle: IO[bytes]) -> Iterator[bytes | int]:
    """Each line of `handle`; for a line over MAX_RECORD bytes, its length instead (read past, never held)."""
    while raw := handle.readline(MAX_RECORD + 1):
        if len(raw) <= MAX_RECORD or raw.endswith(b"\n"):
            yield raw
            continue
        size = len(raw)
        while not raw.endswith(b"\n"):
            raw = handle.readline(1 << 20)
            if not raw:
                break
            size += len(raw)
        yield size


class _TooLong(csv.Error):
    """A csv row over MAX_RECORD characters (`_RowLines`)."""

    def __init__(self) -> None:
        super().__init__(f"a row over {MAX_RECORD:,} characters")


class _RowLines:
    """The lines of a csv file as the csv reader takes them, each read at most MAX_RECORD characters at a time;
    `taken` counts the characters since the reader's caller set it to 0 (at each row), and past MAX_RECORD the
    reading stops (`_TooLong`): a row of many 16 MiB cells, or one line of a gigabyte, is never held whole."""

    def __init__(self, handle: IO[str]) -> None:
        self.handle, self.taken = handle, 0

    def __iter__(self) -> _RowLines:
        return self

    def __next__(self) -> str:
        line = self.handle.readline(MAX_RECORD + 1)
        if not line:
            raise StopIteration
        self.taken += len(line)
        if self.taken > MAX_RECORD:
            raise _TooLong
        return line


def _values_over(raw: bytes) -> str | None:
    """ "at least N values" for a jsonl line of more than MAX_VALUES JSON values, else None: `json.loads` builds
    every one (a 15 MB line of `[],` took 340 MB and 5 s). Each value but the first follows a `[`, `,` or `:`, so a
    line with fewer of those (any real one; counted in C, 26 ms at 15 MB) is under; the others' values are counted
    by ijson's events, nothing built, up to the bound (a second at 15 MB). JSON that breaks before it is left to
    `strict_json`, which builds no more than that to say where."""
    if raw.count(b"[") + raw.count(b",") + raw.count(b":") < MAX_VALUES:
        return None
    values = 0
    try:
        for event, _ in ijson.basic_parse(io.BytesIO(raw.removeprefix(b"\xef\xbb\xbf"))):
            values += event not in _NOT_VALUES
            if values > MAX_VALUES:
                return f"at least {values:,} values"
    except ijson.JSONError:
        return None
    return None


def _over(size: str) -> str:
    return too_long(size, f"{MAX_RECORD:,} a line or row may be")


def _unreadable(error: Exception) -> str:
    """What the csv module or the decoder said, short."""
    if isinstance(error, UnicodeDecodeError):
        return f"byte 0x{error.object[error.start]:02x} is not UTF-8"
    return str(error)[:120]


def count_lines(path: Path) -> int | None:
    """How many lines a file has (a progress bar's length), read in blocks; None for a folder."""
    if not path.is_file():
        return None
    lines = 0
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            lines += block.count(b"\n")
    return lines


JSONL, CSV = JsonLines(), Csv()
