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
from datetime import timedelta

from grandbo.model import utcnow
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

# A runner that leases every ready piece (one of each of four orgs), gives two back (acme's released, as a stopping
# runner does; beta's failed, as after an error), says how many it still holds, and waits to be killed.
GIVES_BACK = """
import sys
from grandbo.config import Settings
from grandbo.model import utcnow
from grandbo.service import Grandbo
store = Grandbo.open(Settings())._store
work = store.claim_work(16, 8, 300)
store.release_work([piece for piece in work if piece.org_id == "acme"])
store.fail_work([piece for piece in work if piece.org_id == "beta"], "the model timed out", utcnow())
print(len(work) - 2, flush=True)
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


def test_an_ended_write_behind_lease_names_no_holder_so_an_older_runners_lease_is_not_taken_over(
    grandbo, settings, raw
):
    """A runner from before migration 29 (still running during a rolling deploy) leases a piece without naming
    itself: the piece must not still name the runner whose lease ended (released, failed, ended as its holder was
    gone, retried), or a re-driver that finds that one gone ends the live lease and the piece is done twice
    (review 26: embed_outbox.claimed_by was cleared so last session, pending_work.claimed_by was not)."""
    orgs = ("acme", "beta", "gamma", "delta")
    for org in orgs:
        grandbo.org(org, create=True)
        grandbo._store.put_documents(org, [], "t", [NewWork(ALERT_TRIAGE, f"A-{org}")])

    def holders() -> list[object]:
        return [by for org in orgs
                for (by,) in raw("SELECT claimed_by FROM pending_work WHERE org_id = %s", (org,), org=org)]  # fmt: skip

    killed_while_holding(settings, GIVES_BACK)
    with Grandbo.open(settings) as other:
        assert other.redriver.take_over() == 2  # gamma's and delta's: their holder was killed
    assert holders() == [None] * 4  # before: the killed runner, on all four
    claimed = grandbo._store.claim_work(16, 8, 300)  # leased here, then ended by a retry of failed work
    assert grandbo._store.retry_failed_work() == 3  # beta's, gamma's and delta's: each counted a failed attempt
    grandbo._store.release_work([piece for piece in claimed if piece.org_id == "acme"])
    assert len(claimed) == 4 and holders() == [None] * 4  # before: this process, on the three retried
    later = (utcnow() + timedelta(seconds=300)).isoformat()
    for org in orgs:  # the older runner's lease: claimed_until only, as its claim wrote it
        raw("UPDATE pending_work SET claimed_until = %s WHERE org_id = %s", (later, org), org=org)
    with Grandbo.open(settings) as other:
        assert other.redriver.take_over() == 0
    assert grandbo._store.claim_work(16, 8, 300) == []  # the older runner keeps its four leases
