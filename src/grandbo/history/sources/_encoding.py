"""The text encoding of a csv, jsonl or vendor JSON export, read once from its first bytes.

UTF-8, with or without a byte order mark; UTF-16 or UTF-32 when a byte order mark says so, read as such: Windows
PowerShell 5.1 writes UTF-16 with a mark for `>` and `Out-File` (as Excel does for "Unicode text"), and such a file
was refused line by line ("line 1: not UTF-8", then "not a JSON object" for every other line). A file that looks
like UTF-16 without a mark (a zero byte in every other place) is one error naming it, before any record is read.
A vendor's JSON export is read the same way (`utf8_blocks`): one with a mark was "not JSON at line 1, column 1".
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, Any, Protocol

from grandbo.errors import ImportFormatError

UTF8_MARK = b"\xef\xbb\xbf"
# The longest first: UTF-32 LE's mark begins with UTF-16 LE's
_MARKS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe", "utf-16"),
          (b"\xfe\xff", "utf-16"), (UTF8_MARK, "utf-8"))  # fmt: skip
_HEAD = 4096  # bytes read to tell the encoding


class Lines(Protocol):
    """What the jsonl reader reads: `readline(limit)` as a binary file's, UTF-8 bytes whatever the file's encoding."""

    encoding: str
    cut: bool  # the file ended inside a character (`Recoded`)

    def readline(self, limit: int, /) -> bytes: ...


def encoding_of(path: Path) -> str:
    """`utf-8`, `utf-16` or `utf-32` (Python's codecs of those names read the mark and the byte order); an
    ImportFormatError for a file that looks like UTF-16 without a mark."""
    with path.open("rb") as handle:
        head = handle.read(_HEAD)
    for mark, name in _MARKS:
        if head.startswith(mark) and (name == "utf-8" or head == mark or _texty(head, name)):  # a mark alone: empty
            return name
    if len(head) >= 4 and max(head[0::2].count(0), head[1::2].count(0)) >= len(head) // 4:
        raise ImportFormatError(
            f"{path.name} looks like UTF-16 without a byte order mark (a zero byte in every other place): save it "
            "as UTF-8 (`iconv -f utf-16le -t utf-8`) and import again.",
            detail={"path": path.name},
        )
    return "utf-8"


def _texty(head: bytes, encoding: str) -> bool:
    """Whether `head`, read in `encoding`, holds any ASCII character (a header's comma, a line's brace, its end):
    bytes that begin as a mark does and hold none are no text in it (`\xff\xfe` then garbage), and are read, and
    refused, as the UTF-8 they are not."""
    return any(ord(char) < 0x80 for char in head[: _HEAD - _HEAD % 4].decode(encoding, "replace"))


def label(encoding: str) -> str:
    """The encoding as a person names it: UTF-8, UTF-16, UTF-32."""
    return encoding.upper().removesuffix("-SIG").removesuffix("-LE").removesuffix("-BE")


class Blocks(Protocol):
    """What the JSON parser reads: a binary file's `read` and `readinto`, UTF-8 bytes whatever the file's encoding."""

    encoding: str
    stopped: str  # where and why the file stopped being text in its encoding (`Transcoded`), else ""

    def read(self, size: int = -1, /) -> bytes: ...

    def readinto(self, buffer: bytearray, /) -> int: ...


def utf8_blocks(path: Path) -> AbstractContextManager[Blocks]:
    """The file as UTF-8 bytes read a block at a time (`Blocks`), its byte order mark left out."""
    return _as_utf8(path, Transcoded)


def byte_lines(path: Path) -> AbstractContextManager[Lines]:
    """The file's lines as UTF-8 bytes (`Lines`), its byte order mark left out."""
    return _as_utf8(path, Recoded)


@contextmanager
def _as_utf8(path: Path, recoded: Callable[[io.BufferedReader, str], Any]) -> Iterator[Any]:
    """The file in UTF-8 as it is (its byte order mark left out), or `recoded` from the encoding its mark says."""
    encoding = encoding_of(path)
    with path.open("rb") as handle:
        if encoding == "utf-8":
            if handle.read(len(UTF8_MARK)) != UTF8_MARK:
                handle.seek(0)
            yield _Utf8(handle)
        else:
            yield recoded(handle, encoding)


class _Utf8:
    def __init__(self, handle: io.BufferedReader) -> None:
        self.handle, self.encoding, self.cut, self.stopped = handle, "utf-8", False, ""

    def readline(self, limit: int, /) -> bytes:
        return self.handle.readline(limit)

    def read(self, size: int = -1, /) -> bytes:
        return self.handle.read(size)

    def readinto(self, buffer: bytearray, /) -> int:
        return self.handle.readinto(buffer) or 0


class Recoded:
    """A UTF-16 or UTF-32 file's lines as UTF-8 bytes. A line of more than `limit` bytes comes in parts of `limit`
    bytes, as from a binary file, so a line too long is found so whatever its encoding. Half a character (a lone
    surrogate) passes through, for its line's refusal to name; a file cut inside a character ends there (`cut`)."""

    def __init__(self, handle: IO[bytes], encoding: str) -> None:
        self.encoding = encoding
        self.text = io.TextIOWrapper(handle, encoding=encoding, errors="surrogatepass", newline="\n")
        self.left, self.cut = b"", False

    def readline(self, limit: int, /) -> bytes:
        if not self.left:
            try:  # at most `limit` characters, so at least as many bytes once encoded: a part, never more
                self.left = self.text.readline(limit).encode("utf-8", "surrogatepass")
            except UnicodeDecodeError:  # only at the end: an odd byte left over
                self.cut = True
                return b""
        line, self.left = self.left[:limit], self.left[limit:]
        return line


class Transcoded:
    """A UTF-16 or UTF-32 file as UTF-8 bytes, a block at a time (`Blocks`). Half a character (a lone surrogate)
    comes as its JSON escape (`_escaped`), so its string is read as holding it and its record alone is refused, as
    a UTF-16 jsonl line is (its raw bytes ended the whole file: Python cannot decode them); bytes that are no
    character (the file cut inside one, a UTF-32 value past U+10FFFF) end the text there (`stopped`), what came
    before kept."""

    def __init__(self, handle: IO[bytes], encoding: str) -> None:
        self.handle, self.encoding, self.stopped = handle, encoding, ""
        head, width = handle.read(4), 4 if encoding == "utf-32" else 2  # the mark says the byte order
        self.codec = encoding + ("-le" if head.startswith(b"\xff\xfe") else "-be")
        handle.seek(width)
        self.decoder = codecs.getincrementaldecoder(self.codec)("surrogatepass")
        self.left, self.done, self.taken, self.before = b"", False, width, ""

    def read(self, size: int = -1, /) -> bytes:
        while not self.done and (size < 0 or len(self.left) < size):
            raw = self.handle.read(_HEAD if size < 0 else max(size, 4))
            try:
                text = self.decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as error:  # what the decoder held and `raw`: the characters before it are text
                text = codecs.decode(error.object[: error.start], self.codec, "surrogatepass")
                where = f"near byte {self.taken + len(raw) - len(error.object) + error.start:,} ({error.reason})"
                self.stopped, raw = where if raw else "at its end, inside a character", b""
            self.left += _escaped(text, self.before)
            self.before = text[-1:] or self.before
            self.taken += len(raw)
            self.done = not raw
        taken = len(self.left) if size < 0 else size
        data, self.left = self.left[:taken], self.left[taken:]
        return data

    def readinto(self, buffer: bytearray, /) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udfff"


def _escaped(text: str, before: str) -> bytes:
    """`text` (after the character `before`) as UTF-8, a lone surrogate as its JSON escape `\\udXXX`: in a string,
    the same character, which the record's checks refuse. One after a backslash or beside another surrogate (a UTF-32
    file's pair) stays its raw bytes, as before: escaped, it would read as other text or as a valid pair."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    out = []
    for at, char in enumerate(text):
        prior, after = text[at - 1] if at else before, text[at + 1 : at + 2]
        lone = _surrogate(char) and prior != "\\" and not _surrogate(prior) and not _surrogate(after)
        out.append(f"\\u{ord(char):04x}".encode() if lone else char.encode("utf-8", "surrogatepass"))
    return b"".join(out)
