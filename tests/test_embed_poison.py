"""An embed job whose text ends every worker that takes it (a crash, the OOM killer) is counted, parked and holds no
other org's embedding up.

A killed worker's claim came back when its lease ran out and was taken again, never counted: `attempts` stayed 0, no
error was recorded, `grandbo stats` counted it as pending, and as its org's oldest job it was dealt into the first
batch of every new worker's first claim, with the other orgs' jobs (measured: five workers in a row killed on it,
none of the other org's six entries embedded). Now a lease that ran out counts a failed attempt for each of its jobs
(the claim that takes them again counts it, `memory.embedding_runner_lost`). The jobs whose last attempt lost their
worker are embedded in a batch of lost jobs only, after the claim's fresh batches, one batch a claim; a job lost
again (it was in the lost batch that ended a worker again) alone, one a claim, after the retry delay. So the poison
is alone at its third attempt and counted as failed after GRANDBO_EMBED_MAX_ATTEMPTS with the remedy (`grandbo
backfill`); its batch's other jobs are counted twice, then embedded; no fresh job is ever in a batch with it again.
A worker killed on this machine is proved gone and its leases ended by the next worker's first claim
(`test_embed_holders.py`); here its leases run out instead (a worker on another machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import structlog.testing

from grandbo.model import EventType, utcnow
from grandbo.ports import LOST_AGAIN, NewEvent
from grandbo.service import Grandbo
from grandbo.store.sql.outbox_holders import LOST_BEFORE

# One worker's drain in a process of its own, killed (SIGKILL, as the OOM killer does) when a provider call is asked
# for the poison's text; prints what it did otherwise.
WORKER = """
import os, signal, sys
from grandbo.config import Settings
from grandbo.logs import configure
from grandbo.service import Grandbo

configure("INFO", json=True)

def at(frame, what, arg):
    if what == "call" and frame.f_code.co_name == "embed_checked" and any(
        "poison" in text for text in frame.f_locals.get("texts", ())
    ):
        os.kill(os.getpid(), signal.SIGKILL)

with Grandbo.open(Settings()) as grandbo:
    sys.setprofile(at)
    report = grandbo.worker().drain()
    sys.setprofile(None)
    print(report.embedded, report.failed, flush=True)
"""


def _worker(settings) -> tuple[int, str, list[dict[str, object]]]:  # type: ignore[no-untyped-def]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GRANDBO_")}, "GRANDBO_HOME": str(settings.home),
           **({"GRANDBO_DATABASE_URL": settings.database_url} if settings.database_url else {}),
           "GRANDBO_EMBED_MAX_ATTEMPTS": "3", "GRANDBO_EMBED_BATCH_SIZE": "4"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    return (
        done.returncode,
        done.stdout.strip(),
        [line for line in lines if line.get("event") == "memory.embedding_runner_lost"],
    )


def _survivor(settings) -> tuple[int, str, list[dict[str, object]]]:  # type: ignore[no-untyped-def]
    """`_worker`'s drain where no job of the poison is due: in this process (a process of its own took 1 s of CPU to
    start, 4-8 s under load), as `_worker` reports it. Were the poison dealt to it, it would be embedded: a count of
    embedded jobs one too many, and no event of a lost lease for it."""
    settings = settings.model_copy(update={"embed_max_attempts": 3, "embed_batch_size": 4})
    with structlog.testing.capture_logs() as logs, Grandbo.open(settings) as grandbo:
        report = grandbo.worker().drain()
    return 0, f"{report.embedded} {report.failed}", [e for e in logs if e["event"] == "memory.embedding_runner_lost"]


def _queue(store, org: str, titles: list[str], start: int = 0) -> None:  # type: ignore[no-untyped-def]
    """Entries written without the in-process drain: each leaves one embed job, for the worker."""
    now = utcnow()
    store.ensure_org(org)
    store.append(org, [NewEvent(f"{org}-{n}", EventType.REMEMBERED,
                                {"title": title, "body": "b", "kind": "fact", "source": "import",
                                 "occurred_at": now.isoformat()}, "test", now)
                       for n, title in enumerate(titles, start)])  # fmt: skip


def _lapse(raw) -> None:  # type: ignore[no-untyped-def]
    """The killed worker's leases run out (GRANDBO_EMBED_LEASE_SECONDS, for a worker not timed yet)."""
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    for org in ("a", "b"):
        raw("UPDATE embed_outbox SET claimed_until = %s WHERE claimed_until IS NOT NULL", (past,), org=org)


def _jobs(raw, org: str) -> list[tuple[int, str | None]]:  # type: ignore[no-untyped-def]
    return [(int(n), e) for n, e in raw(  # type: ignore[call-overload]
        "SELECT attempts, last_error FROM embed_outbox WHERE org_id = %s ORDER BY job_id", (org,), org=org)]  # fmt: skip


def test_an_embed_job_that_ends_every_worker_is_counted_parked_and_holds_no_other_org_up(grandbo, store, raw):
    _queue(store, "a", ["poison pill in the queue"])
    _queue(store, "b", [f"disk full on node {n}" for n in "cdefgh"])
    settings = grandbo.settings

    assert _worker(settings)[:2] == (-9, "")  # org a's job is dealt first, with three of b's: the batch ends it
    _lapse(raw)
    code, said, lost = _worker(settings)  # the claim counts the four and takes them as its lost batch: it ends again
    assert (code, said) == (-9, "")
    assert sorted((e["org_id"], e["attempt"], e["gave_up"]) for e in lost) == [("a", 1, False)] + [("b", 1, False)] * 3
    assert [attempts for attempts, _ in _jobs(raw, "b")] == [1, 1, 1, 0, 0, 0]  # counted once, the rest untouched
    _lapse(raw)
    code, said, lost = _survivor(settings)  # lost twice: counted, due after the retry delay; b's fresh three done
    assert (code, said) == (0, "3 0")
    assert sorted((e["org_id"], e["attempt"]) for e in lost) == [("a", 2)] + [("b", 2)] * 3
    assert store.corpus_stats("b", 3).readable == 3
    ((attempts, error),) = _jobs(raw, "a")
    assert attempts == 2 and error is not None and error.startswith("its worker's lease ran out while it held it, and")

    due = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    for org in ("a", "b"):  # the retry delay passed
        raw("UPDATE embed_outbox SET available_at = %s", (due,), org=org)
    _queue(store, "b", ["disk full on node i", "disk full on node j", "disk full on node k"], start=6)
    assert _worker(settings)[:2] == (-9, "")  # its third attempt, alone and last, ends its worker too
    # b's new entries, dealt into the same claim past b's lost jobs (which wait their turn alone), were filed first
    assert store.corpus_stats("b", 3).readable == 6
    _lapse(raw)
    code, said, lost = _survivor(settings)
    assert (code, said) == (0, "3 0")  # counted a third time: GRANDBO_EMBED_MAX_ATTEMPTS, parked; b's three, alone
    ((event),) = lost
    assert (event["org_id"], event["entry_id"], event["attempt"], event["gave_up"]) == ("a", "a-0", 3, True)
    assert "`grandbo backfill` gives it back" in str(event["remedy"])
    assert store.corpus_stats("b", 3).readable == 9 and _jobs(raw, "b") == []  # each innocent job counted twice
    stats = store.corpus_stats("a", 3)
    assert (stats.pending, stats.failed) == (0, 1)  # failed, as `grandbo stats` and GET /v1/stats count it
    assert store.retry_failed() == 1  # the remedy, once the cause is fixed
    assert _jobs(raw, "a")[0][0] == 0


def test_a_lease_that_ran_out_is_counted_by_the_claim_that_takes_its_job(grandbo, store, raw):
    """A worker on another machine, lost or stuck past its lease: its jobs are counted by the next claim, and the
    one it takes of them is marked to be embedded alone; jobs given back unrun are not counted."""
    _queue(store, "a", ["disk full on node a", "disk full on node b"])
    leased = store.claim_jobs(10, 3, None, 300)
    assert [job.attempts for job in leased] == [0, 0]
    _lapse(raw)
    again = store.claim_jobs(10, 3, None, 300)  # one job a claim that lost its worker: the other waits its turn
    assert [(job.job_id, job.attempts) for job in again] == [(leased[0].job_id, 1)]
    assert again[0].lost  # to be embedded alone
    assert [attempts for attempts, _ in _jobs(raw, "a")] == [1, 1]
    store.release_jobs(again)  # given back unrun (a worker's budget ran out): not counted
    assert [(job.attempts, job.lost) for job in store.claim_jobs(10, 3, None, 300)] == [(1, True)]
    (last,) = store.claim_jobs(10, 3, None, 300)
    assert (last.job_id, last.attempts, last.lost) == (leased[1].job_id, 1, True)


def test_a_killed_claims_jobs_come_back_a_batch_a_claim_and_hold_no_fresh_job_behind_them(grandbo, store, raw):
    """A worker killed in a deploy lost a claim of good jobs: they were dealt back one a claim, each embedded alone,
    and each took a place of the claim from its org's fresh jobs (the org's new entries waited one claim per lost
    job). Now they come back as one batch of lost jobs a claim; a job lost a second time in a row (in the lost batch
    that ended a worker again: maybe the poison) comes back alone, and the lost jobs a claim passes over take no
    place from the fresh ones."""
    _queue(store, "a", [f"disk full on node {n}" for n in "cdef"])
    assert len(store.claim_jobs(10, 5, None, 300)) == 4  # the killed worker's claim
    _lapse(raw)
    _queue(store, "a", ["fresh g", "fresh h"], start=4)
    again = store.claim_jobs(6, 5, None, 300, lost_batch=4)
    assert [(job.entry_id, job.attempts, job.lost) for job in again] == [
        ("a-0", 1, True), ("a-1", 1, True), ("a-2", 1, True), ("a-3", 1, True), ("a-4", 0, False), ("a-5", 0, False)
    ]  # fmt: skip
    _lapse(raw)  # the lost batch ended its worker too (and its fresh jobs with it)
    lost_once = store.claim_jobs(6, 5, None, 300, lost_batch=4)  # the four counted again: due after the retry delay
    assert [(job.entry_id, job.attempts, job.lost) for job in lost_once] == [("a-4", 1, True), ("a-5", 1, True)]
    assert [(attempts, error is not None and error.startswith(LOST_AGAIN[:60])) for attempts, error in _jobs(raw, "a")
            ][:4] == [(2, True)] * 4  # fmt: skip
    store.release_jobs(lost_once)
    raw("UPDATE embed_outbox SET available_at = %s WHERE org_id = 'a'", (datetime.now(UTC).isoformat(),), org="a")
    _queue(store, "a", ["fresh i"], start=6)
    alone = store.claim_jobs(3, 5, None, 300, lost_batch=4)  # one lost again, alone; the others take no place
    assert [(job.entry_id, job.lost) for job in alone] == [("a-0", True), ("a-6", False)]
    assert [(job.entry_id, job.lost) for job in store.claim_jobs(3, 5, None, 300, lost_batch=4)] == [("a-1", True)]


def test_a_job_marked_lost_before_migration_31_is_still_embedded_alone(grandbo, store, raw):
    """A release before migration 31 marked a lost job with its own words (then: embedded alone at once); matched on
    the new words only, such a job was read as fresh after an upgrade and dealt in with other jobs (review 25)."""
    _queue(store, "a", ["disk full on node c", "disk full on node d", "fresh e"])
    for entry in ("a-0", "a-1"):
        raw("UPDATE embed_outbox SET last_error = %s, attempts = 1 WHERE entry_id = %s", (LOST_BEFORE, entry), org="a")
    first = store.claim_jobs(4, 5, None, 300, lost_batch=4)
    assert [(job.entry_id, job.lost) for job in first] == [("a-0", True), ("a-2", False)]  # one alone; a-1 waits
