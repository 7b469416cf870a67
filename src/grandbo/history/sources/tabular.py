"""`csv` and `jsonl`: a table of past incidents, one a row (or a JSON object a line), read with a field mapping.

`--map title=root_cause,postmortem=body,started_at=date,...` names the column each field of `HistoricIncident` is
read from; a field left out is read from the column of its own name (or one of its aliases, `_rows.ALIASES`).
Several columns joined by `+` (`labels=company+category`) are all read: into a list for the list fields, as
paragraphs for text. A value starting with `=` is a constant: `source==public` files the records under the source
name `public` (default: the reader's name). A mapped column a csv file's header lacks, or that no jsonl line has as
a key, is refused before any record is read: a typo would read every record without that part. Findings come from
the columns mapped to `cause`, `trigger`, `contributing`, `remediation`, `lesson` and `action`. With no title, a
post-mortem's first `# ` heading is the title.

Dates are ISO 8601 (a time without a zone is UTC); empty, `Unknown`, `N/A` or anything else unreadable is unknown
(None: the importer counts it); one the calendar cannot hold in UTC refuses its record, naming its column. A row
without an id is refused: map the column that holds it (`source_id=COL`). The file is UTF-8, or UTF-16 or UTF-32
with a byte order mark (`_encoding`: Windows PowerShell's `>` writes UTF-16). The csv reader's own checks are in
`csv_table`. A jsonl line whose object names a key twice (at any depth) is refused, that line alone; a file that
is one JSON array, or one object written over many lines, is refused once, saying how to convert it (`jq -c '.[]'`,
`_refuse_document`). A line nested past what Python's parser reads is refused so. A line (jsonl) or row (csv) over
`MAX_RECORD` is refused without being held: no record it could file is that long, and a gigabyte upload of one
line took three times its size in memory. A jsonl line of more than `MAX_VALUES` JSON values is refused unbuilt
too, as a JSON export's record is.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ijson

from grandbo.errors import ImportFormatError, InvalidInputError
from grandbo.history.record import MAX_RECORD, MAX_VALUES, HistoricIncident, Refusal, repeated_key, too_long
from grandbo.history.sources._encoding import Lines, byte_lines, label
from grandbo.history.sources._fields import kind
from grandbo.history.sources._rows import Mapped, over, parse_mapping, record_of, unreadable
from grandbo.values import NotJsonNumber, RepeatedKey, strict_json

_NOT_VALUES = frozenset({"map_key", "end_map", "end_array"})  # ijson's events that are no value of their own
SAMPLE = 100  # jsonl lines whose keys a refused `--map` names (`_refuse_unseen`)


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


class JsonLines(Mapped):
    """`jsonl`: one JSON object a line."""

    name = "jsonl"

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal]:
        mapped = parse_mapping(mapping)
        _refuse_document(path)
        _refuse_unseen(path, mapped)
        number = 0
        with byte_lines(path) as handle:
            for number, raw in enumerate(_lines(handle), start=1):
                row = _row(raw, number, handle.encoding)
                if isinstance(row, dict):
                    yield record_of(row, mapped, self.name, f"line {number}", split=False)
                elif row is not None:
                    yield row
            if handle.cut:
                yield Refusal(location=f"line {number + 1}", reason=(
                    f"the file ends inside a character (an odd byte at its end, in {label(handle.encoding)}): its "
                    "last line was not read; export the file again"))  # fmt: skip


def _row(raw: bytes | int, number: int, encoding: str = "utf-8") -> dict[str, Any] | Refusal | None:
    """Line `number` of a jsonl file (`_lines`) as its JSON object, a Refusal saying why it is none, or None when
    it is blank. `encoding` is the file's (its line comes as UTF-8 whatever it is)."""
    if isinstance(raw, int):
        return Refusal(location=f"line {number}", reason=over(f"{raw:,} bytes"))
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:  # json.loads would guess UTF-16 and say so
        if encoding != "utf-8":  # a lone surrogate, passed through (`_encoding.Recoded`)
            return Refusal(location=f"line {number}", reason=f"not {label(encoding)} text: it holds half a "
                           "character (a lone surrogate); export the file again, as UTF-8 if you can")  # fmt: skip
        return Refusal(location=f"line {number}", reason=f"not UTF-8 ({unreadable(error)}): save the file as "
                       "UTF-8 (e.g. `iconv -f latin1 -t utf-8`) and import again")  # fmt: skip
    if many := _values_over(raw):
        return Refusal(location=f"line {number}", reason=too_long(many, f"{MAX_VALUES:,} values a line may hold"))
    try:
        row = strict_json(text, unique_keys=True)
    except NotJsonNumber as error:
        return Refusal(location=f"line {number}", reason=f"{error.args[0]}: write null or a string")
    except RepeatedKey as error:
        return Refusal(location=f"line {number}", reason=repeated_key(error.args[0]))
    except RecursionError:  # Python's parser gives up at about 1,000 levels; a record's fields nest a few
        return Refusal(
            location=f"line {number}",
            reason="nested too deeply to read (past about 1,000 levels of "
            "arrays and objects; an incident's fields nest a few): export it again without the nesting",
        )
    except ValueError as error:
        return Refusal(location=f"line {number}", reason=f"not a JSON object: {str(error)[:200]}")
    if isinstance(row, list):
        return Refusal(location=f"line {number}", reason="a JSON array, not an object (one incident's object a line)")
    if not isinstance(row, dict):
        return Refusal(location=f"line {number}", reason=f"{kind(row)[:60]}, not a JSON object (one incident a line)")
    return row


def _refuse_document(path: Path) -> None:
    """Refuse, once, a file that is one JSON array (its first line starts with `[`: no incident's line does), or one
    object written over many lines (`jq .`, `json.dump(indent=2)`, PowerShell's `ConvertTo-Json`): its lines were
    refused one by one ("not a JSON object but list"), none of them saying what the file is or how to convert it."""
    with byte_lines(path) as handle:
        _refuse_carriage_returns(path, handle.readline(MAX_RECORD + 1))
    with byte_lines(path) as handle:
        first = next((raw for raw in _lines(handle) if isinstance(raw, int) or raw.strip()), b"")
    head = first.strip().replace(b" ", b"") if isinstance(first, bytes) else b""
    if not head.startswith(b"[") and head != b"{":  # no incident's line is an array, nor a lone `{`
        return
    new = f"{path.stem}-lines.jsonl"
    if head.startswith(b"["):
        what, remedy = "array", f"convert it with `jq -c '.[]' {path.name} > {new}`"
    else:
        what = "object written over many lines"
        remedy = (f"write each record on a line of its own (`jq -c . {path.name} > {new}` for one record, `jq -c "
                  f"'.KEY[]' {path.name} > {new}` for the records in its list KEY; a vendor's export imports with its "
                  "own source: pagerduty, opsgenie, jira, ...)")  # fmt: skip
    raise ImportFormatError(
        f"{path.name} is one JSON {what}, not JSON lines (one incident's object a line): {remedy}, and import that.",
        detail={"path": path.name},
    )


def _refuse_carriage_returns(path: Path, first: bytes) -> None:
    """Refuse, once, a file whose lines end in a carriage return alone (classic Mac OS's line end, some exporters'):
    it is one line, refused as "not a JSON object: Extra data". Not read so: JSON allows a carriage return between
    the values of one line, so a line end it cannot be told apart from everywhere."""
    end = first.find(b"\r")
    if end < 0 or not first[:end].strip().endswith(b"}") or not first[end:].lstrip(b"\r\t ").startswith(b"{"):
        return  # no carriage return, or one before `\n` (CRLF) or inside a line
    raise ImportFormatError(
        f"{path.name}'s lines end in a carriage return alone (classic Mac OS's line end), so it reads as one line: "
        f"end them with a newline (`tr '\\r' '\\n' < {path.name} > {path.stem}-lf.jsonl`) and import that.",
        detail={"path": path.name},
    )


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
    with byte_lines(path) as handle:
        for number, raw in enumerate(_lines(handle), start=1):
            if not unseen:
                return
            if read >= SAMPLE and isinstance(raw, bytes) and not any(plain[c] in raw for c in unseen):
                continue
            row = _row(raw, number, handle.encoding)
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


def _lines(handle: Lines) -> Iterator[bytes | int]:
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
        for event, _ in ijson.basic_parse(io.BytesIO(raw)):
            values += event not in _NOT_VALUES
            if values > MAX_VALUES:
                return f"at least {values:,} values"
    except ijson.JSONError:
        return None
    return None


def count_lines(path: Path) -> int | None:
    """How many lines a file has (a progress bar's length), read in blocks; None for a folder."""
    if not path.is_file():
        return None
    lines = 0
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            lines += block.count(b"\n")
    return lines


JSONL = JsonLines()
