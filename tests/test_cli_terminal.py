"""Text an organization's senders wrote reaches an operator's terminal through the CLI (`grandbo recall` prints a
memory's title): its control characters and bidirectional overrides are shown there as escapes, never run as the
terminal's commands (probe 28: a title's ESC [2J cleared the screen, its carriage return wrote over the line). Output
to a pipe is left as it is."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tty

from grandbo.cli.terminal import shown

EVIL = "redis evictions \x1b[2J\x1b]0;pwned\x07 on auth-service\rspoofed \u202egnp.exe"
TOPIC = "redis evictions on auth-service under memory pressure"


def _on_a_terminal(*args: str) -> str:
    """What `grandbo ARGS` writes to a terminal (a pty in raw mode: no newline becomes a carriage return there)."""
    ours, theirs = pty.openpty()
    tty.setraw(theirs)
    process = subprocess.Popen([sys.executable, "-m", "grandbo", *args], stdout=theirs, stderr=theirs)
    os.close(theirs)
    out = b""
    while True:
        ready, _, _ = select.select([ours], [], [], 120)
        if not ready:
            process.kill()
            break
        try:
            chunk = os.read(ours, 65536)
        except OSError:  # the other side closed: all was read
            break
        if not chunk:
            break
        out += chunk
    os.close(ours)
    assert process.wait(60) == 0, out
    return out.decode()


def test_a_title_s_control_characters_reach_a_terminal_as_escapes(cli):
    cli("remember", "--title", EVIL, "--body", TOPIC, "--kind", "finding", "--service", "auth-service")
    printed = _on_a_terminal("recall", TOPIC)
    assert "pwned" in printed and "spoofed" in printed  # the title is there
    assert "\x1b" not in printed and "\r" not in printed and "\x07" not in printed and "\u202e" not in printed
    assert "\\x1b[2J\\x1b]0;pwned\\x07 on auth-service\\x0dspoofed \\u202egnp.exe" in printed
    piped = cli("recall", TOPIC).stdout  # to a program: as it is (click strips ANSI sequences there)
    assert "\rspoofed \u202egnp.exe" in piped


def test_shown_keeps_newlines_tabs_and_text():
    assert shown("a\tb\nc é 漢字 🙂") == "a\tb\nc é 漢字 🙂"
    assert shown("\x00\x1b\x7f\x9b\u2066") == "\\x00\\x1b\\x7f\\x9b\\u2066"
