"""Text an organization's senders wrote reaches an operator's terminal through the CLI (`grandbo recall` prints a
memory's title): its control characters and bidirectional overrides are shown there as escapes, never run as the
terminal's commands (probe 28: a title's ESC [2J cleared the screen, its carriage return wrote over the line). Output
to a pipe is left as it is, and so is what the CLI's own parts draw there (typer's styled help, its error box)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import tty
from collections.abc import Callable, Iterator

import pytest

from grandbo.cli.terminal import shown

EVIL = "redis evictions \x1b[2J\x1b]0;pwned\x07 on auth-service\rspoofed \u202egnp.exe"
TOPIC = "redis evictions on auth-service under memory pressure"


# The terminal's program: `grandbo ARGS` for each request read from the pipe it is given, in this one process (an interpreter's start
# and the package's import, 3 s of CPU, paid once a module, not at each of seven commands), then a line that says it
# is done with its exit status, written after all it printed.
_DONE = "\n@@grandbo exited "
_PROGRAM = f"""
import json, os, sys
from grandbo.cli import app
for line in os.fdopen(int(sys.argv[1])):
    request = json.loads(line)
    os.environ.clear()
    os.environ.update(request["env"])
    try:
        app(request["args"], prog_name="grandbo")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(1, ({_DONE!r} + str(code) + "\\n").encode())
"""


class _Terminal:
    """A terminal (a pty in raw mode: no newline becomes a carriage return there) that draws colours, as an
    operator's does, and a Python process whose output goes to it, running `grandbo` commands one after another
    as `python -m grandbo` runs them (`grandbo.cli.app`)."""

    def __init__(self) -> None:
        self._ours, theirs = pty.openpty()
        tty.setraw(theirs)
        requests, self._requests = os.pipe()
        self._process = subprocess.Popen([sys.executable, "-c", _PROGRAM, str(requests)], stdin=subprocess.DEVNULL,
                                         stdout=theirs, stderr=theirs, pass_fds=(requests,))  # fmt: skip
        os.close(theirs)
        os.close(requests)

    def run(self, args: tuple[str, ...], code: int) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")} | {"TERM": "xterm-256color"}
        os.write(self._requests, (json.dumps({"args": list(args), "env": env}) + "\n").encode())
        out = b""
        while _DONE.encode() not in out or not out.endswith(b"\n"):
            ready, _, _ = select.select([self._ours], [], [], 120)
            assert ready, f"`grandbo {' '.join(args)}` said nothing for 2 minutes: {out!r}"
            chunk = os.read(self._ours, 65536)
            assert chunk, f"the terminal's process exited: {out!r}"
            out += chunk
        printed, _, status = out.decode().rpartition(_DONE)
        assert int(status) == code, printed
        return printed

    def close(self) -> None:
        os.close(self._requests)  # its loop ends
        assert self._process.wait(60) == 0
        os.close(self._ours)


@pytest.fixture(scope="module")
def _terminal() -> Iterator[_Terminal]:
    terminal = _Terminal()
    yield terminal
    terminal.close()


@pytest.fixture
def on_a_terminal(_terminal: _Terminal) -> Callable[..., str]:
    """What `grandbo ARGS` writes to the terminal, in the test's environment (its GRANDBO_HOME); `code` is the
    exit status it must end with."""

    def run(*args: str, code: int = 0) -> str:
        return _terminal.run(args, code)

    return run


def test_a_title_s_control_characters_reach_a_terminal_as_escapes(cli, on_a_terminal):
    cli("remember", "--title", EVIL, "--body", TOPIC, "--kind", "finding", "--service", "auth-service")
    printed = on_a_terminal("recall", TOPIC)
    assert "pwned" in printed and "spoofed" in printed  # the title is there
    assert "\x1b" not in printed and "\r" not in printed and "\x07" not in printed and "\u202e" not in printed
    assert "\\x1b[2J\\x1b]0;pwned\\x07 on auth-service\\x0dspoofed \\u202egnp.exe" in printed
    piped = cli("recall", TOPIC).stdout  # to a program: as it is (click strips ANSI sequences there)
    assert "\rspoofed \u202egnp.exe" in piped


def test_an_incident_s_title_and_an_alert_s_summary_reach_a_terminal_as_escapes(cli, on_a_terminal):
    cli("incident", "open", EVIL, "--service", "auth-service", "--id", "INC-1")
    listed = on_a_terminal("incident", "list")
    assert "INC-1" in listed and "\\x1b[2J\\x1b]0;pwned\\x07 on auth-service\\x0dspoofed \\u202egnp.exe" in listed
    assert "\x1b" not in listed and "\r" not in listed and "\u202e" not in listed
    planned = on_a_terminal("triage", "--summary", EVIL, "--service", "auth-service", "--no-llm")
    assert "pwned" in planned and "\x1b" not in planned and "\r" not in planned and "\u202e" not in planned


def test_the_cli_s_own_styling_still_draws_on_a_terminal(on_a_terminal):
    helped = on_a_terminal("recall", "--help")  # typer's help: styled by rich on a terminal
    assert "Usage" in helped and "\x1b[" in helped and "\\x1b" not in helped
    refused = on_a_terminal("recall", "--bogus", code=2)  # typer's error box
    assert "bogus" in refused and "\x1b[" in refused and "\\x1b" not in refused


def test_json_on_a_terminal_is_the_json_a_pipe_gets(cli, on_a_terminal):
    cli("incident", "open", "failover \x1b[2J left \x85 the primary\u2028read-only \u202e", "--id", "INC-2")
    printed = on_a_terminal("incident", "list", "--json")
    assert printed.rstrip("\n") == cli("incident", "list", "--json").stdout.rstrip("\n")
    assert json.loads(printed)[0]["title"] == "failover \x1b[2J left \x85 the primary\u2028read-only \u202e"


def test_shown_keeps_newlines_tabs_and_text():
    assert shown("a\tb\nc é 漢字 🙂") == "a\tb\nc é 漢字 🙂"
    assert shown("\x00\x1b\x7f\x9b\u2066") == "\\x00\\x1b\\x7f\\x9b\\u2066"


def test_an_import_s_progress_bar_draws_on_a_terminal(cli, tmp_path, on_a_terminal):
    lines = (json.dumps({"title": f"redis evictions {n}", "body": TOPIC, "kind": "finding"}) for n in range(20))
    (tmp_path / "found.jsonl").write_text("\n".join(lines) + "\n")
    printed = on_a_terminal("import", str(tmp_path / "found.jsonl"))
    assert "imported 20 entries" in printed
    drawn = "\r\x1b[?25limporting"  # click's bar, as it draws it: back to the line's start, cursor hidden
    assert drawn in printed and "\\x0d" not in printed and "\\x1b" not in printed
