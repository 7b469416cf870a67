"""Stream the records out of a vendor's paged JSON answers, one record in memory at a time.

A vendor's list endpoint answers with a page: an object whose one array holds the records (`{"incidents": [...],
"limit": 100, ...}` for PagerDuty, `{"data": [...], "paging": {...}}` for Opsgenie). An export is one such page, a
JSON array of pages, or pages one after another (JSON Lines). `records` walks the file's parse events (ijson) and
builds only the records themselves, so a 10,000-incident page costs one incident's memory, whatever the file's size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson

from grandbo.errors import ImportFormatError

_OPEN = frozenset({"start_map", "start_array"})
_CLOSE = frozenset({"end_map", "end_array"})


@dataclass(frozen=True)
class Record:
    """One record as parsed (any JSON value: the reader checks its type) and where it was found."""

    value: Any
    page: int  # 1-based, counting the file's pages
    index: int | None  # the position in the page's array; None when the page holds one record (a detail answer)
    key: str  # the page's key that held it ("incidents", "data")
    paged: bool  # the file holds its pages in an array: name the page in every location

    @property
    def location(self) -> str:
        at = f"{self.key}[{self.index}]" if self.index is not None else self.key
        return f"page {self.page}, {at}" if self.paged or self.page > 1 else at


@dataclass(frozen=True)
class Problem:
    """Why the rest of the file cannot be read: `kind` is "json" (not JSON from here on), "empty" or "shape"."""

    kind: str
    location: str
    detail: str = ""


def records(path: Path, keys: tuple[str, ...], *, singles: bool = False) -> Iterator[Record | Problem]:
    """Every record in the arrays under `keys` of each page in `path`, in order; a `Problem` ends the stream.

    `singles`: a page whose key holds an object (not an array) yields that object as one record (Opsgenie's
    `GET /v2/alerts/{id}` answer, `{"data": {...}}`). Pages without any of `keys` are skipped; a file with none at
    all ends with one "shape" `Problem`. Raises ImportFormatError when `path` cannot be opened.
    """
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise ImportFormatError(
            f"cannot read {path}: {exc.strerror or exc}; give the path of the exported JSON file.",
            detail={"path": str(path)},
        ) from None
    with stream:
        yield from _Walk(path.name, keys, singles).run(stream)


class _Walk:
    def __init__(self, name: str, keys: tuple[str, ...], singles: bool) -> None:
        self.name, self.keys, self.singles = name, keys, singles
        self.paged = False
        self.page = 0
        self.arrays = 0  # arrays (or single records) found under `keys`
        self.last = ""  # the last record's location, to say where an unreadable tail starts

    def run(self, stream: Any) -> Iterator[Record | Problem]:
        events = 0
        key, index = "", 0
        builder: Any = None
        depth = 0
        try:
            for prefix, event, value in ijson.parse(stream, multiple_values=True, use_float=True):
                events += 1
                if builder is not None:
                    builder.event(event, value)
                    depth += 1 if event in _OPEN else -1 if event in _CLOSE else 0
                    if depth == 0:
                        yield self._record(builder.value, key, None if index < 0 else index)
                        builder, index = None, index + 1
                    continue
                if prefix == "" and event == "start_array":
                    self.paged = True
                if event == "start_map" and prefix == ("item" if self.paged else ""):
                    self.page += 1
                if (found := self._under(prefix, "")) is not None:
                    if event == "start_array":
                        key, index, self.arrays = found, 0, self.arrays + 1
                    elif event == "start_map" and self.singles:
                        key, index, self.arrays = found, -1, self.arrays + 1
                        builder, depth = ijson.ObjectBuilder(), 1
                        builder.event(event, value)
                elif self._under(prefix, ".item") is not None:
                    builder, depth = ijson.ObjectBuilder(), 1 if event in _OPEN else 0
                    builder.event(event, value)
                    if depth == 0:  # a scalar where a record belongs: the reader refuses it by its type
                        yield self._record(builder.value, key, index)
                        builder, index = None, index + 1
        except (ijson.JSONError, UnicodeDecodeError) as exc:
            if not events and _blank(stream):
                yield Problem("empty", self.name)
            else:
                yield Problem("json", f"after {self.last}" if self.last else self.name, _first_line(exc))
            return
        if not events:
            yield Problem("empty", self.name)
        elif not self.arrays:
            yield Problem("shape", self.name)

    def _under(self, prefix: str, suffix: str) -> str | None:
        """The key in `keys` whose array (suffix "") or array item (suffix ".item") sits at `prefix`."""
        base = "item." if self.paged else ""
        for key in self.keys:
            if prefix == f"{base}{key}{suffix}":
                return key
        return None

    def _record(self, value: Any, key: str, index: int | None) -> Record:
        record = Record(value, max(self.page, 1), index, key, self.paged)
        self.last = record.location
        return record


def _blank(stream: Any) -> bool:
    """Whether the file holds nothing but whitespace (read again from the start, a block at a time)."""
    stream.seek(0)
    while block := stream.read(1 << 16):
        if block.strip():
            return False
    return True


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:160] if lines else type(exc).__name__
