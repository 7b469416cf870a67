"""A write-behind leased by a process that was killed is done at once, not after its lease (probe 22a F3).

The lease recorded no holder, so a closed incident's memories or a delivery's alert triages (leased 8 at a time) that
a killed server held waited the full GRANDBO_WRITE_BEHIND_LEASE_SECONDS (300 s) before anyone redid them. A lease
now records its holder as the org's import lease does (`grandbo.processes`), and a re-driver takes over at once a
lease whose holder is proved gone on this machine; one held on another machine keeps its lease."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from grandbo.ports import NewWork
from grandbo.redrive import ALERT_TRIAGE
from grandbo.service import Grandbo

# A runner of write-behinds: it leases every ready piece (as a server's re-driver or a delivery's `Leases` does),
# says how many, and waits to be killed.
RUNNER = """
import sys
from grandbo.config import Settings
from grandbo.service import Grandbo
grandbo = Grandbo.open(Settings())
print(len(grandbo._store.claim_work(16, 8, 300)), flush=True)
sys.stdin.read()
"""


def killed_while_holding(settings, script: str = RUNNER, **env: str) -> None:  # type: ignore[no-untyped-def]
    """`script` (a runner that leases two pieces and says so) run in a process of its own with `env` added to its
    environment, then killed with SIGKILL while it holds them."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GRANDBO_")}, "GRANDBO_HOME": str(settings.home),
           **({"GRANDBO_DATABASE_URL": settings.database_url} if settings.database_url else {}), **env}  # fmt: skip
    runner = subprocess.Popen([sys.executable, "-c", script], env=env, text=True, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        leased = runner.stdout.readline() if runner.stdout else ""
        assert leased.strip() == "2", (leased, runner.stderr.read() if runner.poll() is not None else "")
    finally:
        os.kill(runner.pid, signal.SIGKILL)
        runner.communicate(timeout=30)


def test_a_write_behind_a_killed_process_held_is_done_at_once_unless_held_on_another_machine(grandbo, settings, raw):
    memory = grandbo.org("acme", create=True)
    grandbo._store.put_documents("acme", [], "t", [NewWork(ALERT_TRIAGE, "A-1"), NewWork(ALERT_TRIAGE, "A-2")])
    killed_while_holding(settings)
    assert memory.stats().write_behinds == 2
    (holder,) = {by for (by,) in raw("SELECT claimed_by FROM pending_work", org="acme")}
    assert isinstance(holder, str) and json.loads(holder)["pid"] != os.getpid()
    elsewhere = json.dumps({**json.loads(holder), "host": "another-machine"}, sort_keys=True)
    raw("UPDATE pending_work SET claimed_by = %s WHERE org_id = 'acme' AND work_id = "
        "(SELECT min(work_id) FROM pending_work WHERE org_id = 'acme')", (elsewhere,), org="acme")  # fmt: skip
    with Grandbo.open(settings) as other:  # another process, at once: well within the 300 s lease
        report = other.redriver.drain()
    assert (report.done, report.failed) == (1, 0)  # the killed process's; the other machine's keeps its lease
    assert memory.stats().write_behinds == 1
    assert [(by,) for (by,) in raw("SELECT claimed_by FROM pending_work", org="acme")] == [(elsewhere,)]
