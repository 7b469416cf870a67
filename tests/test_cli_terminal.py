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

from grandbo.cli.terminal import shown

EVIL = "redis evictions \x1b[2J\x1b]0;pwned\x07 on auth-service\rspoofed \u202egnp.exe"
TOPIC = "redis evictions on auth-service under memory pressure"


def _on_a_terminal(*args: str, code: int = 0) -> str:
    """What `grandbo ARGS` writes to a terminal (a pty in raw mode: no newline becomes a carriage return there) that
    draws colours, as an operator's does."""
    ours, theirs = pty.openpty()
    tty.setraw(theirs)
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")} | {"TERM": "xterm-256color"}
    process = subprocess.Popen([sys.executable, "-m", "grandbo", *args], stdout=theirs, stderr=theirs, env=env)
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
    assert process.wait(60) == code, out
    return out.decode()


def test_a_title_s_control_characters_reach_a_terminal_as_escapes(cli):
    cli("remember", "--title", EVIL, "--body", TOPIC, "--kind", "finding", "--service", "auth-service")
    printed = _on_a_terminal("recall", TOPIC)
    assert "pwned" in printed and "spoofed" in printed  # the title is there
    assert "\x1b" not in printed and "\r" not in printed and "\x07" not in printed and "\u202e" not in printed
    assert "\\x1b[2J\\x1b]0;pwned\\x07 on auth-service\\x0dspoofed \\u202egnp.exe" in printed
    piped = cli("recall", TOPIC).stdout  # to a program: as it is (click strips ANSI sequences there)
    assert "\rspoofed \u202egnp.exe" in piped


def test_an_incident_s_title_and_an_alert_s_summary_reach_a_terminal_as_escapes(cli):
    cli("incident", "open", EVIL, "--service", "auth-service", "--id", "INC-1")
    listed = _on_a_terminal("incident", "list")
    assert "INC-1" in listed and "\\x1b[2J\\x1b]0;pwned\\x07 on auth-service\\x0dspoofed \\u202egnp.exe" in listed
    assert "\x1b" not in listed and "\r" not in listed and "\u202e" not in listed
    planned = _on_a_terminal("triage", "--summary", EVIL, "--service", "auth-service", "--no-llm")
    assert "pwned" in planned and "\x1b" not in planned and "\r" not in planned and "\u202e" not in planned


def test_the_cli_s_own_styling_still_draws_on_a_terminal():
    helped = _on_a_terminal("recall", "--help")  # typer's help: styled by rich on a terminal
    assert "Usage" in helped and "\x1b[" in helped and "\\x1b" not in helped
    refused = _on_a_terminal("recall", "--bogus", code=2)  # typer's error box
    assert "bogus" in refused and "\x1b[" in refused and "\\x1b" not in refused


def test_json_on_a_terminal_is_the_json_a_pipe_gets(cli):
    cli("incident", "open", "failover \x1b[2J left \x85 the primary\u2028read-only \u202e", "--id", "INC-2")
    printed = _on_a_terminal("incident", "list", "--json")
    assert printed.rstrip("\n") == cli("incident", "list", "--json").stdout.rstrip("\n")
    assert json.loads(printed)[0]["title"] == "failover \x1b[2J left \x85 the primary\u2028read-only \u202e"


def test_shown_keeps_newlines_tabs_and_text():
    assert shown("a\tb\nc é 漢字 🙂") == "a\tb\nc é 漢字 🙂"
    assert shown("\x00\x1b\x7f\x9b\u2066") == "\\x00\\x1b\\x7f\\x9b\\u2066"


def test_an_import_s_progress_bar_draws_on_a_terminal(cli, tmp_path):
    lines = (json.dumps({"title": f"redis evictions {n}", "body": TOPIC, "kind": "finding"}) for n in range(20))
    (tmp_path / "found.jsonl").write_text("\n".join(lines) + "\n")
    printed = _on_a_terminal("import", str(tmp_path / "found.jsonl"))
    assert "imported 20 entries" in printed
    drawn = "\r\x1b[?25limporting"  # click's bar, as it draws it: back to the line's start, cursor hidden
    assert drawn in printed and "\\x0d" not in printed and "\\x1b" not in printed
