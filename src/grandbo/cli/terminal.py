"""What the CLI prints to a terminal: text an organization's senders wrote is shown there, never obeyed.

An alert's summary (from any of the org's webhook senders), a memory's title, a finding: `grandbo recall`, `grandbo
triage`, `grandbo incident show` and the rest print them. On a terminal an ESC in one began a sequence the terminal ran
(clearing the screen, setting the window title, moving the cursor over what was printed before), a carriage return
wrote over its line, and a bidirectional override reordered it (probe 28: a memory's title printed by `grandbo recall`
cleared the operator's screen). click strips ANSI sequences only when it prints to no terminal. Now, to a terminal,
each control character but a newline and a tab, and each bidirectional control, is written as its escape (`\\x1b`,
`\\u202e`); output to a pipe or a file (a program reading it, `--json`) is left as it is.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

_CONTROLS = (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPED = {code: f"\\x{code:02x}" for code in _CONTROLS} | {code: f"\\u{code:04x}" for code in _BIDI}


def shown(text: str) -> str:
    """`text` with its control characters (but newlines and tabs) and bidirectional controls as escapes."""
    return text.translate(_ESCAPED)


class _Shown:
    """A terminal's text stream that writes what it is given `shown`; the rest is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(shown(text))  # bytes have no such translate: click then writes this stream text
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard() -> None:
    """Make the process's standard output and error, where each is a terminal, write what they print `shown`."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Shown) and _terminal(stream):
            setattr(sys, name, _Shown(stream))


def _terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or no file
        return False
