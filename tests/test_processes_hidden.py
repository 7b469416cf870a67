"""A holder proved gone (`grandbo.processes.gone`) is one with no process of its pid that started when it did. A
`/proc` mounted with `hidepid=1` or `2` shows a user none of another user's processes: a live worker run by another
user read as gone, and its leases (imports, write-behinds, embed jobs) were taken over while it held them (review
25). The test stands a `/proc` that shows no process at all in for the real one."""

from __future__ import annotations

import subprocess
import sys

from grandbo import processes


def test_a_live_process_hidden_from_proc_is_not_gone_and_an_ended_one_is(tmp_path, monkeypatch):
    here = processes.this_process()  # read from the real /proc (and kept)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    ended = {**here, "pid": child.pid}
    monkeypatch.setattr(processes, "_PROC", tmp_path)  # every pid's entry hidden, as hidepid hides them
    assert not processes.gone(here)  # this very process, alive
    assert processes.gone(ended)
