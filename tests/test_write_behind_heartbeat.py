"""A write-behind held by a process killed on another machine is taken over after a few missed beats, not after
its lease.

A lease records its holder, and a re-driver takes over at once one whose holder is proved gone on this machine
(test_write_behind_holders.py); a holder on another machine or container cannot be proved gone, so its work waited
the whole GRANDBO_WRITE_BEHIND_LEASE_SECONDS (300 s) after a kill. Now a lease lasts `BEATS` beats of
GRANDBO_WRITE_BEHIND_HEARTBEAT_SECONDS and its live holder renews it every beat (`store.sql.beats`). The clock is
forced here by moving a lease's end back, as that many seconds without a beat would."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta

import pytest

from grandbo.errors import WorkDoneError
from grandbo.model import utcnow
from grandbo.ports import NewWork
from grandbo.redrive import ALERT_TRIAGE
from grandbo.service import Grandbo
from grandbo.store.sql.beats import BEATS
from tests.test_write_behind_holders import killed_while_holding

BEAT = 60.0  # GRANDBO_WRITE_BEHIND_HEARTBEAT_SECONDS here: no beat of the test's own thread comes while it runs
SILENT = BEATS * BEAT  # how long a holder that stopped beating keeps its leases

# A runner of write-behinds on another machine, as its leases record it: it leases every ready piece (as a server's
# re-driver or a delivery's `Leases` does), says how many, and waits to be killed.
RUNNER = """
import socket, sys
socket.gethostname = lambda: "another-machine"
from grandbo.config import Settings
from grandbo.service import Grandbo
grandbo = Grandbo.open(Settings())
print(len(grandbo._store.claim_work(16, 8, 300)), flush=True)
sys.stdin.read()
"""


@pytest.fixture
def beating(settings):  # type: ignore[no-untyped-def]
    return settings.model_copy(update={"write_behind_heartbeat_seconds": BEAT})


def _when(value: object) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def _seconds_left(raw, org: str = "acme") -> list[float]:  # type: ignore[no-untyped-def]
    return [(_when(at) - utcnow()).total_seconds() for (at,) in raw(
        "SELECT claimed_until FROM pending_work WHERE org_id = %s ORDER BY work_id", (org,), org=org)]  # fmt: skip


def _silent_for(raw, seconds: float, org: str = "acme") -> None:  # type: ignore[no-untyped-def]
    """The clock forced: `seconds` pass without a beat (every lease of `org` ends that much sooner)."""
    for work_id, at in raw("SELECT work_id, claimed_until FROM pending_work WHERE org_id = %s", (org,), org=org):
        moved = (_when(at) - timedelta(seconds=seconds)).isoformat()
        raw("UPDATE pending_work SET claimed_until = %s WHERE work_id = %s", (moved, work_id), org=org)


def _killed_on_another_machine(settings) -> None:  # type: ignore[no-untyped-def]
    killed_while_holding(settings, RUNNER, GRANDBO_WRITE_BEHIND_HEARTBEAT_SECONDS=str(BEAT))


def test_work_a_process_killed_on_another_machine_held_is_taken_over_after_its_missed_beats(grandbo, beating, raw):
    memory = grandbo.org("acme", create=True)
    grandbo._store.put_documents("acme", [], "t", [NewWork(ALERT_TRIAGE, "A-1"), NewWork(ALERT_TRIAGE, "A-2")])
    _killed_on_another_machine(beating)
    holders = {json.loads(str(by))["host"] for (by,) in raw("SELECT claimed_by FROM pending_work", org="acme")}
    assert holders == {"another-machine"}
    assert max(_seconds_left(raw)) <= SILENT + 1  # leased for its beats, not GRANDBO_WRITE_BEHIND_LEASE_SECONDS (300)
    with Grandbo.open(beating) as other:
        assert other.redriver.drain().done == 0  # not proved gone: it holds its work while its beats may come
        _silent_for(raw, SILENT)  # BEATS beats without one
        report = other.redriver.drain()
        assert (report.done, report.failed) == (2, 0)
        assert other.redriver.drain().done == 0  # done once
    assert memory.stats().write_behinds == 0


def test_a_live_holder_keeps_its_lease_by_beating_up_to_the_lease_and_a_late_result_is_refused(grandbo, beating, raw):
    grandbo.org("acme", create=True)
    grandbo._store.put_documents("acme", [], "t", [NewWork(ALERT_TRIAGE, "A-1")])
    with Grandbo.open(beating) as holder, Grandbo.open(beating) as other:
        store = holder._store
        (held,) = store.claim_work(16, 8, 300)
        _silent_for(raw, SILENT)  # its lease ends now, unless it beats
        assert store.beat_work() == 1
        assert SILENT - 5 < min(_seconds_left(raw)) <= SILENT + 1
        assert other._store.claim_work(16, 8, 300) == []  # a live holder keeps its work
        _silent_for(raw, SILENT)  # it missed its beats (paused, its store out of reach): the work is taken over
        (taken,) = other._store.claim_work(16, 8, 300)
        assert taken.work_id == held.work_id
        other._store.put_documents("acme", [], "t", done=[taken])  # the result, with the work's completion
        with pytest.raises(WorkDoneError):  # the late holder's result is not kept a second time
            store.put_documents("acme", [], "t", done=[held])
        assert store.beat_work() == 0  # and it forgets the work
        store.put_documents("acme", [], "t", [NewWork(ALERT_TRIAGE, "A-2")])
        (short,) = store.claim_work(16, 8, SILENT - 1)  # less than its beats left of GRANDBO_WRITE_BEHIND_LEASE_SECONDS
        assert store.beat_work() == 0 and max(_seconds_left(raw)) <= SILENT  # left to run out: a stuck holder frees it
        assert short.subject == "A-2"


def test_a_beat_renews_the_other_orgs_leases_when_one_org_s_renewal_fails(grandbo, beating, raw):
    """An org dropped while its work was held: a beat still renews the other orgs' leases (a renewal that fails
    fails for its org alone, review 23 L3)."""
    for org in ("acme", "beta"):
        grandbo.org(org, create=True)
        grandbo._store.put_documents(org, [], "t", [NewWork(ALERT_TRIAGE, f"{org}-1")])
    with Grandbo.open(beating) as holder:
        store = holder._store
        assert {w.org_id for w in store.claim_work(16, 8, 300)} == {"acme", "beta"}
        grandbo.drop_org("acme")  # listed first among the leases held
        _silent_for(raw, SILENT, "beta")  # beta's lease ends now, unless it is renewed
        assert store.beat_work() == 1  # beta's, renewed
        assert SILENT - 5 < min(_seconds_left(raw, "beta")) <= SILENT + 1


def test_a_child_forked_after_a_claim_neither_renews_its_parent_s_leases_nor_thinks_a_thread_beats(grandbo, beating):
    """A process that forks after its first claim: the child had the parent's thread (not running there) and leases
    (its parent's to renew), so no beat ever started in the child (review 23 L3)."""
    grandbo.org("acme", create=True)
    grandbo._store.put_documents("acme", [], "t", [NewWork(ALERT_TRIAGE, "A-1")])
    with Grandbo.open(beating) as holder:
        store = holder._store
        assert len(store.claim_work(16, 8, 300)) == 1
        beats = store._beats
        assert beats is not None and beats._thread is not None and beats._held
        child = os.fork()
        if child == 0:  # the child: nothing of its parent's to beat, and a thread of its own at its first claim
            os._exit(0 if (beats._thread, beats._held) == (None, {}) else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert beats._thread is not None and beats._held  # the parent beats on
