"""A write-behind that ends every runner that takes it (a crash, the OOM killer) is counted, parked and holds no other
org's work up.

Its lease was freed at once for the next runner (`Redriver.take_over`, the holder proved gone) or ran out, and was
taken again, never counted: `attempts` stayed 0, no error was recorded, `/readyz` counted it as waiting, and as the
first org's oldest piece it was the first claim of every new runner (one piece until a piece is timed), so another
org's work waited for as long as the runners kept dying (measured: five runners in a row killed on it, the other
org's piece never tried). Now a lease lost so counts as a failed attempt: due at once the first time (a deploy's
kill), then after the retry delay, and counted as failed after GRANDBO_WRITE_BEHIND_MAX_ATTEMPTS, named in the log
with the remedy (`grandbo backfill`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from grandbo.ports import NewWork
from grandbo.redrive import ALERT_TRIAGE

# A re-driver's one round in a process of its own, killed (SIGKILL, as the OOM killer does) when it starts on the
# piece "poison"; prints what it did otherwise.
RUNNER = """
import os, signal, sys
from grandbo.config import Settings
from grandbo.logs import configure
from grandbo.service import Grandbo

configure("WARNING", json=True)

def at(frame, what, arg):
    if what == "call" and frame.f_code.co_name == "redo" and getattr(frame.f_locals.get("work"), "subject", "") == "poison":
        os.kill(os.getpid(), signal.SIGKILL)

with Grandbo.open(Settings()) as grandbo:
    sys.setprofile(at)
    report = grandbo.redriver.run_once()
    sys.setprofile(None)
    print(report.done, report.failed, flush=True)
"""


def _round(settings) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GRANDBO_")}, "GRANDBO_HOME": str(settings.home),
           **({"GRANDBO_DATABASE_URL": settings.database_url} if settings.database_url else {}),
           "GRANDBO_WRITE_BEHIND_MAX_ATTEMPTS": "3"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", RUNNER], env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout.strip(), done.stderr


def _poison(raw) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    ((attempts, error),) = raw("SELECT attempts, last_error FROM pending_work WHERE org_id = 'a'", org="a")
    return int(attempts), str(error)  # type: ignore[call-overload]


def test_a_write_behind_that_ends_every_runner_is_counted_parked_and_holds_no_other_org_up(grandbo, settings, raw):
    for org, subject in (("a", "poison"), ("b", "B-1")):
        grandbo.org(org, create=True)
        grandbo._store.put_documents(org, [], "t", [NewWork(ALERT_TRIAGE, subject)])

    assert _round(settings)[:2] == (-9, "")  # the first org's piece, first: it ends its runner
    assert _round(settings)[:2] == (-9, "")  # its lease taken over and counted, due at once (a deploy's kill): again
    assert _poison(raw)[0] == 1
    assert _round(settings)[:2] == (0, "1 0")  # counted again, due after the retry delay: the other org's is done
    assert raw("SELECT count(*) FROM pending_work WHERE org_id = 'b'", org="b") == [(0,)]
    attempts, error = _poison(raw)
    assert attempts == 2 and "ended while it held it (killed or crashed); counted as a failed attempt" in error

    due = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    raw("UPDATE pending_work SET available_at = %s WHERE org_id = 'a'", (due,), org="a")  # the retry delay passed
    assert _round(settings)[:2] == (-9, "")  # its third attempt ends its runner too
    code, said, log = _round(settings)
    assert (code, said) == (0, "0 0")  # counted a third time: GRANDBO_WRITE_BEHIND_MAX_ATTEMPTS, parked
    (lost,) = [line for line in map(json.loads, log.splitlines()) if line.get("event") == "write_behind.runner_lost"]
    assert (lost["org_id"], lost["subject"], lost["attempt"], lost["gave_up"]) == ("a", "poison", 3, True)
    assert "`grandbo backfill` gives it back" in lost["remedy"]
    assert grandbo._store.work_counts(3) == (0, 1)  # failed, as `/readyz` and `grandbo stats` count it
    assert grandbo._store.retry_failed_work() == 1  # the remedy, once the cause is fixed
    assert _poison(raw)[0] == 0


def test_a_lease_that_ran_out_is_counted_by_the_claim_that_takes_its_work(grandbo, settings, raw):
    """A runner on another machine, lost or stuck past its lease: not proved gone, its lease runs out."""
    grandbo.org("a", create=True)
    grandbo._store.put_documents("a", [], "t", [NewWork(ALERT_TRIAGE, "A-1")])
    (leased,) = grandbo._store.claim_work(1, 3, 300)
    assert leased.attempts == 0
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    raw("UPDATE pending_work SET claimed_until = %s WHERE org_id = 'a'", (past,), org="a")
    (again,) = grandbo._store.claim_work(1, 3, 300)
    assert again.work_id == leased.work_id and again.attempts == 1
    attempts, error = _poison(raw)
    assert attempts == 1 and error.startswith("its runner's lease ran out while it held it")
    grandbo._store.release_work([again])  # given back unrun (a pool closed): not counted, and no lease to run out
    assert grandbo._store.claim_work(1, 3, 300)[0].attempts == 1
