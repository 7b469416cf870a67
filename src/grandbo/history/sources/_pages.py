"""Stream the records out of a vendor's paged JSON answers, one record in memory at a time, for every JSON reader.

A vendor's list endpoint answers one page at a time, an object whose one array holds the records
(`{"incidents": [...], "limit": 100}` PagerDuty, `{"data": [...], "paging": {...}}` Opsgenie, `{"issues": [...]}`
Jira, `{"incidents": [...], "pagination_meta": {...}}` incident.io, `{"data": [...], "links": {...}}` Rootly), so an
export is one page, a JSON array of pages, or one page per line (JSON Lines). `records` walks the file with ijson's
event parser and builds one record at a time, so memory stays flat whatever the number of pages; every record comes
with its location ("incidents[4]", "page 2, data[1]") so a refusal says where to look. Numbers are read exactly
(integers as int, others as Decimal): a 20-digit integer is a number, not a file that is "not JSON". Its encoding is
read as a jsonl file's is (`_encoding`): UTF-8 with or without a byte order mark, UTF-16 or UTF-32 with one.

What every reader says the same way: a file that is empty, not JSON or a bare value is one ImportFormatError; a page
without the records' key is refused by its page (never skipped unseen); a record that is not an object is refused;
JSON that breaks off after some records keeps them and refuses the rest at the place it broke; a record without
any of the vendor's own fields is refused, and a file most of whose first records are is one ImportFormatError
naming the vendor it looks like (`_sniff`). A record one of whose objects names a key twice is refused naming it,
as a jsonl line is (a parser keeps the last value silently: `{"id": "D", "id": "E"}` was filed as E). A record over
`MAX_RECORD` bytes or `MAX_VALUES` values is refused, as a jsonl line over it is, and read past without being built:
built whole, one PagerDuty incident with 40 MB of `[],` in a field took 1 GB of the server's memory and 24 s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson
from pydantic import ValidationError

from grandbo.errors import ImportFormatError
from grandbo.history.record import MAX_RECORD, MAX_VALUES, HistoricIncident, Refusal, Skipped, repeated_key, too_long
from grandbo.history.sources._encoding import Blocks, label, utf8_blocks
from grandbo.history.sources._fields import Fields, Skip, Unreadable, kind, refuse_mapping, unique
from grandbo.history.sources._sniff import MARKS, Judge, missing

Build = Callable[[Fields, str], HistoricIncident]
_LINES = (".jsonl", ".ndjson", ".jl")
MAX_DEPTH = 256  # levels of nesting a file may have (a record's own fields take a handful)
_PAST: Any = object()  # `_Walk.building` while a record over the bounds is read past
_NAMED, _DEEP = 4, "\x00deep"  # the levels whose prefix `_Walk` reads (`item.incidents.item`); below, one name


@dataclass(frozen=True)
class PagedReader:
    """A reader of a vendor's paged JSON answers (satisfies `Reader`): records under `key` of each page, each
    through `build`; `expected` says what to export, `singles` reads a detail answer's one object too."""

    name: str
    key: str
    expected: str
    build: Build
    singles: bool = False

    def check(self, mapping: dict[str, str] | None) -> None:
        refuse_mapping(self.name, "the vendor's own fields", mapping)

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal | Skipped]:
        """Every record of every page at `path`, in order (`read_each`); a `mapping` is an error: none is needed."""
        self.check(mapping)
        return read_each(path, self.key, self.expected, self.build, singles=self.singles, vendor=self.name)


def read_each(
    path: Path, key: str, expected: str, build: Build, *, singles: bool = False, vendor: str = ""
) -> Iterator[HistoricIncident | Refusal | Skipped]:
    """Every record of the pages at `path` through `build`, in order; what `build` cannot read is a Refusal, what
    it leaves out on purpose (`Skip`) is Skipped, and the fields it read as absent are the incident's `ignored`.

    `expected` says what to export (the remedy in every refusal); `singles`: a page whose `key` holds one object
    (a detail answer, `{"data": {...}}`) is that one record. `vendor` (`_sniff.MARKS`): a record without the
    vendor's fields is refused, and when most of the first ones are, the file is (ImportFormatError), before the
    importer has filed any of them (it files `CHUNK` records at a time, more than `_sniff.FIRST`).
    """
    judge = Judge(vendor, path.name) if vendor in MARKS else None
    for found in records(path, key, expected=expected, singles=singles):
        if isinstance(found, Refusal):
            yield found
            continue
        location, record = found
        if not isinstance(record, dict):
            said = f"{kind(record)[:60]} where a record (an object) was expected"
            yield Refusal(location=location, reason=f"{said}: {expected}")
            continue
        if judge is not None and not judge.fits(record):
            yield Refusal(location=location, reason=missing(vendor, record))
            continue
        fields = Fields(record)
        try:
            incident = build(fields, location)
        except Unreadable as exc:
            yield Refusal(location=location, reason=str(exc))
        except Skip as exc:
            yield Skipped(location=location, reason=str(exc))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
            yield Refusal(location=location, reason=f"unusable values ({problems}): correct them in the export")
        except (TypeError, AttributeError, KeyError) as exc:
            # A last resort the readers never reach (history_shapes.py checks it); the record, never a traceback.
            yield Refusal(location=location, reason=f"values of unexpected types ({exc}): correct them in the export")
        except RecursionError:
            yield Refusal(location=location, reason="nested too deeply to read: export it again without the nesting")
        else:
            incident.ignored = unique(fields.ignored)
            yield incident
    if judge is not None:
        judge.verdict()  # a file shorter than `_sniff.FIRST` records, most of them another vendor's


def records(path: Path, key: str, *, expected: str, singles: bool = False) -> Iterator[tuple[str, Any] | Refusal]:
    """(location, record) for every element of every page's `key` array, in order; a Refusal for what is not.

    A file that cannot be read, is empty, is not JSON or is a bare value raises ImportFormatError before anything is
    yielded; a page without a `key` array is a Refusal by its page; JSON that breaks off after some records yields
    one Refusal for the rest and stops. A record over MAX_RECORD bytes or MAX_VALUES values is a Refusal, read past
    unbuilt; one value over MAX_RECORD bytes is a Refusal for the rest, and the read stops there.
    """
    if _blank(path):
        raise ImportFormatError(f"{path.name} is empty: {expected}", detail={"path": str(path)})
    with utf8_blocks(path) as blocks:
        source = _Counted(blocks)
        walk = _Walk(key, expected, singles, source, many=path.suffix.lower() in _LINES)
        try:
            for prefix, event, value in _prefixed(ijson.basic_parse(source, multiple_values=True)):
                found = walk.event(prefix, event, value)
                if isinstance(found, str):  # a bare value where the file's pages belong
                    raise ImportFormatError(
                        f"{path.name} holds a bare JSON {found}, not pages of records: {expected}",
                        detail={"path": str(path)},
                    )
                if found is not None:
                    walk.yielded = True
                    yield found
        except _OneValueTooLong:
            at = walk.here() if walk.building is not None else walk.page_here()
            said = too_long(f"over {MAX_RECORD:,} bytes in one value", f"{MAX_RECORD:,} bytes a record may be")
            yield Refusal(location=at, reason=f"{said}; the records before it were read, the rest were not")
            return
        except (ijson.JSONError, UnicodeDecodeError) as exc:
            if not blocks.stopped:  # else the JSON broke off where the text stopped: said below
                said, remedy = source.broken(exc)
                marked = f" (read as {label(blocks.encoding)}, as its byte order mark says)"
                read_as = marked if blocks.encoding != "utf-8" else ""
                if not walk.yielded:
                    raise ImportFormatError(
                        f"{path.name}{read_as} is not JSON {said}: {remedy or expected}", detail={"path": str(path)}
                    ) from None
                remedy = remedy or "re-export it whole"
                yield Refusal(location=walk.here(), reason=f"the file stops being JSON {said}; what came before was "
                              f"read: {remedy}")  # fmt: skip
                return
    if blocks.stopped:  # the text up to there was read
        said = f"stops being {label(blocks.encoding)} text {blocks.stopped}"
        if not walk.yielded:
            raise ImportFormatError(f"{path.name} {said}: re-export it whole", detail={"path": str(path)})
        yield Refusal(location=walk.here(), reason=f"the file {said}; what came before was read: re-export it whole")
        return
    if walk.page == 0:
        raise ImportFormatError(f"{path.name} is empty: {expected}", detail={"path": str(path)})


class _Walk:
    """The parse events of a file of pages, turned into records (and refusals) as they complete."""

    def __init__(self, key: str, expected: str, singles: bool, source: _Counted, *, many: bool) -> None:
        self.key, self.expected, self.singles, self.many, self.source = key, expected, singles, many, source
        self.in_array = False  # the pages are the elements of one top-level array
        self.page_prefix, self.array_prefix, self.item_prefix = "", key, f"{key}.item"
        self.page, self.index, self.seen_key, self.yielded = 0, 0, False, False
        self.building: Any = None
        self.ends = ""  # the prefix whose end_map/end_array completes the record being built
        self.single = False  # the record being built is a detail answer's one object
        self.began, self.values = 0, 0  # the bytes read when the record began; its parse events so far
        self.keys: list[set[str] | None] = []  # the keys of each object open in the record (None: an array)
        self.repeated: str | None = None  # the first key an object of the record names twice

    def here(self) -> str:
        at = self.key if self.single else f"{self.key}[{self.index}]"
        return f"page {self.page}, {at}" if self.many else at

    def page_here(self) -> str:
        return f"page {self.page}" if self.many else "the file"

    def event(self, prefix: str, event: str, value: Any) -> tuple[str, Any] | Refusal | str | None:
        self.source.mark = self.source.taken
        if self.building is not None:
            return self._inside(prefix, event, value)
        if prefix == "" and event == "start_array" and not self.in_array:
            self.many = self.in_array = True
            self.page_prefix, self.array_prefix, self.item_prefix = "item", f"item.{self.key}", f"item.{self.key}.item"
        elif prefix == self.page_prefix and event == "start_map":
            self.many = self.many or self.page > 0
            self.page, self.seen_key, self.index = self.page + 1, False, 0
        elif prefix == self.array_prefix and event == "start_array":
            self.seen_key = True
        elif prefix == self.array_prefix and event == "start_map" and self.singles:
            self.seen_key, self.single = True, True
            self._build(event, value, self.array_prefix)
        elif prefix == self.page_prefix and event == "end_map" and not self.seen_key:
            return Refusal(location=self.page_here(), reason=f"no `{self.key}` array in this page: {self.expected}")
        elif prefix == self.item_prefix:
            if event in ("start_map", "start_array"):
                self._build(event, value, self.item_prefix)
            else:  # a scalar where a record belongs: refused by its type
                found = (self.here(), value)
                self.index += 1
                return found
        elif prefix == self.page_prefix and event not in ("end_array", "start_array", "map_key", "end_map"):
            if not self.yielded and not self.in_array:
                return str(event)
            self.page += 1
            return Refusal(location=self.page_here(), reason=f"a JSON {event}, not a page: {self.expected}")
        return None

    def _build(self, event: str, value: Any, ends: str) -> None:
        self.building, self.ends = ijson.ObjectBuilder(), ends
        self.began, self.values = self.source.taken, 1
        self.keys, self.repeated = [set() if event == "start_map" else None], None
        self.building.event(event, value)

    def _inside(self, prefix: str, event: str, value: Any) -> tuple[str, Any] | Refusal | None:
        """An event of the record being built: the record when it ends. Past MAX_RECORD bytes or MAX_VALUES values
        what was built is dropped and the rest only counted (`_PAST`), and the record ends as a Refusal."""
        self.values += 1
        if self.building is not _PAST:
            if self.values > MAX_VALUES or self.source.taken - self.began > MAX_RECORD:
                self.building = _PAST
            else:
                self.building.event(event, value)
                self._key(event, value)
        if prefix != self.ends or event not in ("end_map", "end_array"):
            return None
        if self.repeated is not None and self.building is not _PAST:  # jsonl refuses it: the last value was kept
            found: tuple[str, Any] | Refusal = Refusal(location=self.here(), reason=repeated_key(self.repeated))
        elif self.building is _PAST:
            size = f"about {self.source.taken - self.began:,} bytes in {self.values:,} values"
            bounds = f"{MAX_RECORD:,} bytes or {MAX_VALUES:,} values a record may be"
            found = Refusal(location=self.here(), reason=too_long(size, bounds))
        else:
            found = (self.here(), self.building.value)
        self.building, self.single, self.index = None, False, self.index + 1
        return found

    def _key(self, event: str, value: Any) -> None:
        """Keep the keys of the record's open objects, and the first one an object names twice (`repeated`)."""
        if event == "map_key":
            named = self.keys[-1]
            if named is not None and value in named:
                self.repeated = self.repeated if self.repeated is not None else value
            elif named is not None:
                named.add(value)
        elif event in ("start_map", "start_array"):
            self.keys.append(set() if event == "start_map" else None)
        elif event in ("end_map", "end_array"):
            self.keys.pop()


class _TooDeep(ijson.JSONError):  # type: ignore[misc]
    """JSON nested deeper than any export's records are."""


class _OneValueTooLong(Exception):
    """One value (a string, most likely) over MAX_RECORD bytes: the parser holds a value whole until it ends, so
    the reading stops there (`_Counted`)."""


class _Counted:
    """The file as the parser reads it, counting: `taken`, the bytes handed over; `mark`, what was taken at the last
    parse event (`_Walk.event`). Bytes past MAX_RECORD with no event are one value over it, which the parser would
    hold whole (a 40 MB string took 81 MB more RSS, in its buffer and as text): `_OneValueTooLong` ends the read.
    The last two blocks read are kept, with the lines before them, to say where the JSON broke (`broken`)."""

    def __init__(self, handle: Blocks) -> None:
        self.handle, self.taken, self.mark = handle, 0, 0
        self.previous, self.last = b"", b""
        self.lines, self.line_at = 0, 0  # before `previous`: the newlines, and the offset the line after the last began

    def read(self, size: int = -1) -> bytes:  # ijson's check that the file is binary: read(0)
        data = self.handle.read(size)
        self.taken += len(data)
        self._keep(data)
        return data

    def readinto(self, buffer: bytearray) -> int:  # how the parser reads, a block at a time
        if self.taken - self.mark > MAX_RECORD:
            raise _OneValueTooLong
        got = self.handle.readinto(buffer) or 0
        self.taken += got
        self._keep(bytes(memoryview(buffer)[:got]))
        return got

    def _keep(self, data: bytes) -> None:
        if data:
            if (newline := self.previous.rfind(b"\n")) >= 0:
                self.lines += self.previous.count(b"\n")
                self.line_at = self.taken - len(data) - len(self.last) - len(self.previous) + newline + 1
            self.previous, self.last = self.last, data

    def broken(self, exc: Exception) -> tuple[str, str]:
        """Where and why the parser stopped (`at line 3, column 21 (lexical error: ...)`), from the block it parsed
        and the text around the place its message shows (yajl's messages give no position), and the remedy when
        the place says more than the parser did (NaN, Infinity: no JSON number); else the parser's words alone."""
        if isinstance(exc, UnicodeDecodeError):  # yajl passed bytes of no UTF-8 character; Python cannot decode them
            bad = exc.object[exc.start : exc.start + 5]  # a surrogate's bytes: ED A0-BF xx
            if len(bad) == 5 and bad[:1] == bad[3:4] == b"\xed" and 0xA0 <= bad[1] <= 0xAF and 0xB0 <= bad[4] <= 0xBF:
                holds = "a character as CESU-8 writes it (each half of a surrogate pair as 3 bytes), not as UTF-8 does"
            elif len(bad) >= 2 and bad[0] == 0xED and 0xA0 <= bad[1] <= 0xBF:
                holds = "half a character, a lone surrogate, which no text can hold"
            else:  # an overlong form (C0 80), past U+10FFFF (F4 90 80 80), ...
                holds = f"bytes that are no UTF-8 character ({exc.reason}, byte 0x{exc.object[exc.start]:02x})"
            return f"(a string in it holds {holds})", "correct that string, or export the file again"
        said = exc.args[0] if exc.args else b""
        said = said if isinstance(said, bytes) else str(said).encode("utf-8", "surrogateescape")
        shown = said.splitlines()
        if shown and b"premature EOF" in shown[0]:
            return "at its end, inside a value (the file was cut short)", ""
        if len(shown) < 3 or b"^" not in shown[2] or not shown[1].strip():
            return f"({_short(exc)})", ""
        caret = shown[2].index(b"^")  # one past the character the parser stopped at
        before, after = shown[1][:caret].lstrip(b" "), shown[1][caret:]
        found = self.last.replace(b"\n", b" ").replace(b"\r", b" ").find(before + after)
        if not before or found < 0:
            return f"({_short(exc)})", ""
        window, at = self.previous + self.last, len(self.previous) + found + len(before) - 1
        start = window.rfind(b"\n", 0, at) + 1
        line = self.lines + window.count(b"\n", 0, at) + 1
        if start or self.taken == len(window):  # the line begins in the window: its characters are counted
            column = f", column {len(window[start:at].decode('utf-8', 'replace')) + 1}"
        else:
            column = f", byte {self.taken - len(window) + at - self.line_at + 1:,} of that line"
        here = window[at : at + 9]
        number = next((n for n in (b"NaN", b"Infinity", b"-Infinity") if here.startswith(n)), None)
        if number is not None:
            return (
                f"at line {line}{column} ({number.decode()}: JSON has no such number)",
                "write null or a string there",
            )
        where = "in the string ending" if b"string" in shown[0] else ""  # yajl stops at a bad string's end
        return f"{where} at line {line}{column} ({_short(exc)})".lstrip(), ""


def _prefixed(events: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, str, Any]]:
    """ijson.parse's (prefix, event, value) from its basic events, with the nesting bounded: ijson's own keeps the
    prefix of every open level, so memory grew with the square of the depth (100,000 `[` took the server's memory
    whole). Only the first levels' prefixes mean anything to `_Walk`; deeper ones are `_DEEP`."""
    path: list[str] = []
    for event, value in events:
        if event == "map_key":
            prefix = ".".join(path[:-1]) if len(path) <= _NAMED else _DEEP
            path[-1] = value if len(path) <= _NAMED else ""
        elif event in ("start_map", "start_array"):
            prefix = ".".join(path) if len(path) <= _NAMED else _DEEP
            if len(path) >= MAX_DEPTH:
                raise _TooDeep(f"nested deeper than {MAX_DEPTH} levels")
            path.append("item" if event == "start_array" else "")
        elif event in ("end_map", "end_array"):
            path.pop()
            prefix = ".".join(path) if len(path) <= _NAMED else _DEEP
        else:
            prefix = ".".join(path) if len(path) <= _NAMED else _DEEP
        yield prefix, event, value


def _blank(path: Path) -> bool:
    """Whether the file holds nothing but whitespace (read in chunks, never whole); an ImportFormatError when it
    cannot be read at all (missing, a folder, no permission)."""
    try:
        with utf8_blocks(path) as handle:  # a byte order mark alone is empty too
            while chunk := handle.read(65536):
                if chunk.strip():
                    return False
            if handle.stopped:  # no text, and then bytes that are none: not empty
                return False
    except OSError as exc:
        message = f"cannot read {path}: {exc.strerror or exc}; give the path of the exported JSON file"
        raise ImportFormatError(message, detail={"path": str(path)}) from None
    return True


def _short(exc: Exception) -> str:
    """The parser's first line, as text (yajl hands some messages over as bytes)."""
    said = exc.args[0] if exc.args else ""
    said = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
    return said.strip().splitlines()[0][:120] if said.strip() else type(exc).__name__
