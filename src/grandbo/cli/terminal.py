"""What the CLI prints to a terminal: text an organization's senders wrote is shown there, never obeyed.

An alert's summary (from any of the org's webhook senders), a memory's title, a finding: `grandbo recall`, `grandbo
triage`, `grandbo incident list` and the rest print them. On a terminal an ESC in one began a sequence the terminal ran
(clearing the screen, setting the window title, moving the cursor over what was printed before), a carriage return
wrote over its line, and a bidirectional override reordered it (probe 28: a memory's title printed by `grandbo recall`
cleared the operator's screen). click strips ANSI sequences only when it prints to no terminal. Now each line a
command prints (`say`), to a terminal, has each control character but a newline and a tab, and each bidirectional
control, written as its escape (`\\x1b`, `\\u202e`); to a pipe or a file it is left as it is, and JSON (`--json`) is
printed as json.dumps writes it (ASCII: its control characters are escapes already). The lines are the data: the
stream is left alone, so typer's styled help and errors, click's progress bars and uvicorn's log lines still draw
(escaping the whole stream printed them as text).
"""

from __future__ import annotations

import sys
from typing import TextIO

import typer

_CONTROLS = (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPED = {code: f"\\x{code:02x}" for code in _CONTROLS} | {code: f"\\u{code:04x}" for code in _BIDI}


def shown(text: str) -> str:
    """`text` with its control characters (but newlines and tabs) and bidirectional controls as escapes."""
    return text.translate(_ESCAPED)


def say(line: str = "", *, err: bool = False) -> None:
    """Print a line a command wrote (stdout, or stderr with `err`), `shown` when that stream is a terminal: a line
    may hold what an org's senders wrote. Our lines carry no styling of their own, so all of a line is escaped."""
    stream = sys.stderr if err else sys.stdout
    typer.echo(shown(line) if stream is not None and _terminal(stream) else line, err=err)


def _terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or no file
        return False
