"""Patterns the readers of what users send search with RE2 (issue 24): in time linear in the text whatever it
holds, where Python's engine tried every start against the rest of it (a `[` with no `]` after it, a heading's
trailing spaces). A pattern is searched in a shadow of the text, one ASCII character for each of its characters, in
which every space that Python's `\\s` takes and RE2's does not is a form feed and every other character outside
ASCII is U+0001 (in no class a pattern lists, and no space): so `\\s` and `.` mean what Python's did, no letter
outside ASCII folds to one of ASCII (`ſ` is no `s`), and a lone surrogate is read as any other character. A match's
offsets in the shadow are its offsets in the text, which its groups are read from."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from grandbo.masking import compiled

_ASCII_SPACES = "\x0b\x1c\x1d\x1e\x1f"  # spaces to Python's `\s`, not to RE2's


class _Shadow(dict[int, str]):
    def __missing__(self, code: int) -> str:
        char = chr(code)
        shade = char if code < 0x80 and char not in _ASCII_SPACES else "\f" if char.isspace() else "\x01"
        self[code] = shade
        return shade


_SHADOW = _Shadow()


class Found:
    """A match: its groups and spans, read from the text searched."""

    def __init__(self, text: str, found: Any) -> None:
        self._text, self._found = text, found

    def span(self, group: int = 0) -> tuple[int, int]:
        span: tuple[int, int] = self._found.span(group)
        return span

    def group(self, group: int = 0) -> str | None:
        start, end = self._found.span(group)
        return None if start < 0 else self._text[start:end]

    __getitem__ = group


class LinearPattern:
    """A pattern of ASCII literals, `\\s`, `.` and classes of them, searched by RE2 as Python would search it."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._regex = compiled(pattern)

    def finditer(self, text: str) -> Iterator[Found]:
        data_bytes = text.translate(_SHADOW).encode("ascii")  # ASCII to ASCII: translated in C, quickly
        position, size = 0, len(data_bytes)
        while position <= size:
            found = self._regex.search(data_bytes, position)
            if found is None:
                return
            start, end = found.span()
            yield Found(text, found)
            position = end if end > start else end + 1

    def search(self, text: str) -> Found | None:
        return next(self.finditer(text), None)

    def sub(self, replace: Callable[[Found], str | None], text: str) -> str:
        """`text` with each match replaced by what `replace` gives for it (None: nothing), as `re.sub` does."""
        pieces, last = [], 0
        for found in self.finditer(text):
            start, end = found.span()
            pieces += [text[last:start], replace(found) or ""]
            last = end
        return "".join(pieces) + text[last:]
