"""`csv`: a header row, then one incident a row, read with the field mapping of `sources.tabular`.

Comma-separated and quoted as spreadsheets write it, in UTF-8 or (with a byte order mark) UTF-16 or UTF-32
(`_encoding`). Refused whole, before any row is read, naming what to fix: a file that is not text in its encoding; a
header that names a column twice (each row would keep the last such column's value only); a header of one column
holding `;`, a tab or `|` (a file separated by another character, Excel's in many countries: every row was refused
as having no id). Refused by its row, the rows before it read and the rest not: a quote that is not closed where its
field ends (read leniently, it took in the rest of the file as one field, and the import said nothing); a row over
`MAX_RECORD` characters, never held whole. A row with more values than the header has columns is refused alone
(a value holding an unquoted comma, read leniently, shifted every value after it to the next column, and the last
ones were dropped).
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from grandbo.errors import ImportFormatError, InvalidInputError
from grandbo.history.record import MAX_RECORD, HistoricIncident, Refusal
from grandbo.history.sources._encoding import encoding_of, label
from grandbo.history.sources._rows import Mapped, over, parse_mapping, record_of, unreadable

_SEPARATORS = {";": "`;`", "\t": "tab", "|": "`|`"}  # what else a one-column header may be separated by


class Csv(Mapped):
    """`csv`: a header row, then one incident a row (comma-separated, quoted as spreadsheets write it)."""

    name = "csv"

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal]:
        mapped = parse_mapping(mapping)
        csv.field_size_limit(min(sys.maxsize, MAX_RECORD))  # a post-mortem in one cell
        encoding = encoding_of(path)
        named = label(encoding)
        with path.open(encoding="utf-8-sig" if encoding == "utf-8" else encoding, newline="") as handle:
            lines = _RowLines(handle)
            rows = csv.DictReader(lines, strict=True)
            try:
                names = list(rows.fieldnames or [])
            except (UnicodeDecodeError, csv.Error) as error:
                raise ImportFormatError(
                    f"{path.name} is not a {named} CSV file ({unreadable(error)}): save it as UTF-8 CSV "
                    "(e.g. `iconv -f latin1 -t utf-8`) and import again.",
                    detail={"path": path.name},
                ) from None
            _refuse_one_column(names, path.name)
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
                lines.taken, began = 0, rows.reader.line_num + 1
                try:
                    row = next(rows, None)
                except _TooLong:  # where the next row starts cannot be known without reading this one whole
                    reason = over(f"over {MAX_RECORD:,} characters") + "; rows before were read, the rest were not"
                    yield Refusal(location=f"after row {rows.line_num}", reason=reason)
                    return
                except UnicodeDecodeError as error:  # the rows before were read; the rest cannot be
                    reason = f"the file stops being {named} CSV here ({unreadable(error)}); rows before were read: "
                    yield Refusal(location=f"after row {rows.line_num}", reason=reason + "save it as UTF-8 CSV again")
                    return
                except csv.Error as error:
                    yield Refusal(location=f"line {began}", reason=_unclosed(error, began, rows.reader.line_num))
                    return
                if row is None:
                    return
                spill = row.pop(None, None) or []  # values past the header's columns
                if any(value.strip() for value in spill):
                    yield Refusal(location=f"row {rows.line_num}", reason=(
                        f"{len(names) + len(spill)} values where the header names {len(names)} columns: a value "
                        "holding a comma must be quoted (\"a, b\"); quote it, or name the extra column in the header, "
                        "and import again"))  # fmt: skip
                    continue
                yield record_of(row, mapped, self.name, f"row {rows.line_num}", split=True)


def _unclosed(error: csv.Error, began: int, ended: int) -> str:
    """Why the row that began on line `began` cannot be read (strict quoting), and what to do."""
    said, after = str(error)[:60], "rows before were read, the rest were not"
    if began == ended:
        return (
            f"a quoted field is followed by more text before its comma ({said}): quote the whole field, doubling "
            f'a quote inside it (""), and import again; {after}'
        )
    where = "to the end of the file" if "end of data" in said else f"to line {ended}, where it breaks ({said})"
    return (
        f'a quote (") opened in this row is not closed where its field ends: the field runs on {where}. Close '
        f'the quote at the end of its field, or double a quote meant as text (""), and import again; {after}'
    )


def _refuse_one_column(names: list[str], file: str) -> None:
    """A header of one column holding another separator (`id;title;date`) is refused before any row is read: every
    row would be one value, with no id."""
    named = [name for name in names if name.strip()]
    found = next((sep for sep in _SEPARATORS if len(named) == 1 and sep in named[0]), None)
    if found is not None:
        raise ImportFormatError(
            f"{file}'s header is one column {named[0][:100]!r}: the file looks {_SEPARATORS[found]}-separated, and "
            'the csv source reads commas. Save it comma-separated (a spreadsheet\'s "CSV UTF-8 (comma delimited)") '
            "and import again.",
            detail={"path": file, "separator": found},
        )


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


CSV = Csv()
