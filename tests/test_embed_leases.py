"""A worker records a failure or gives jobs back only while it still holds them, under the lease it claimed them with.

A worker that ran past its lease (a slow provider, a batch halved down to the text at fault) found its jobs leased
again by another worker, which had counted them lost already; its late `fail_jobs` then counted the attempt a second
time (and set its delay and error on the other worker's job), and its `release_jobs` ended the other's lease, so a
third worker claimed the jobs while the second still embedded them: the same entry embedded twice, its attempts
counted twice. Each job now carries the lease it was claimed under (`EmbedJob.leased_until`), and a failure or a
give-back changes only the jobs still held under it, of the text they were claimed with; the rest is left to the new
holder, in one line (`memory.embedding_lease_moved_on`)."""

from __future__ import annotations

import structlog.testing

from grandbo.embed_jobs import TIMED_OUT
from grandbo.logs import configure
from grandbo.model import utcnow
from grandbo.ports import LOST
from tests.test_embed_poison import _jobs, _lapse, _queue


def _held(raw, org: str) -> list[bool]:  # type: ignore[no-untyped-def]
    """Whether each of the org's jobs is leased now, in job order."""
    return [bool(leased) for (leased,) in raw(
        "SELECT claimed_until IS NOT NULL FROM embed_outbox WHERE org_id = %s ORDER BY job_id", (org,), org=org)]  # fmt: skip


def test_a_worker_past_its_lease_neither_counts_the_attempt_again_nor_ends_the_new_holders_lease(store, raw):
    _queue(store, "a", ["disk full on node a", "disk full on node b"])
    first = store.claim_jobs(10, 5, None, 300)  # the slow worker's claim
    _lapse(raw)  # it runs past its lease
    second = store.claim_jobs(10, 5, None, 300, lost_batch=2)  # another worker deals them: counted lost, leased
    assert [(job.job_id, job.attempts, job.lost) for job in second] == [(job.job_id, 1, True) for job in first]
    configure("INFO")  # what `grandbo worker` sets (the test session's default is put back after the test)
    with structlog.testing.capture_logs() as logs:
        store.fail_jobs(first[:1], "the provider timed out", utcnow())  # the slow worker's late failure
        store.release_jobs(first[1:])  # and its give-back of what it did not try
    assert [(attempts, error is not None and error.startswith(LOST[:60])) for attempts, error in _jobs(raw, "a")] == [
        (1, True), (1, True)
    ]  # counted once, by the claim that dealt them again  # fmt: skip
    assert _held(raw, "a") == [True, True]  # still the second worker's
    assert store.claim_jobs(10, 5, None, 300) == []  # no third worker embeds them meanwhile
    moved = [(e["action"], e["jobs"], e["entries"]) for e in logs if e["event"] == "memory.embedding_lease_moved_on"]
    assert moved == [("fail", 1, ["a-0"]), ("release", 1, ["a-1"])]
    assert {e["log_level"] for e in logs if e["event"] == "memory.embedding_lease_moved_on"} == {"info"}
    # The holder's own failure and give-back are recorded as before.
    store.fail_jobs(second[:1], "the provider timed out", utcnow())
    store.release_jobs(second[1:])
    assert [attempts for attempts, _ in _jobs(raw, "a")] == [2, 1] and _held(raw, "a") == [False, False]


def test_a_job_given_back_by_retry_failed_is_left_to_its_next_holder(store, raw):
    """`retry_failed` (`grandbo backfill`) ends the leases of running workers by design: their late failure or
    give-back must not count an attempt on the job it made new, nor end the lease of the worker that took it next."""
    _queue(store, "a", ["disk full on node a"])
    (running,) = store.claim_jobs(10, 5, None, 300)
    assert store.retry_failed() == 1
    (taken,) = store.claim_jobs(10, 5, None, 300)  # another worker takes it at once
    store.fail_jobs([running], "the provider timed out", utcnow())
    store.release_jobs([running])
    assert _jobs(raw, "a") == [(0, None)] and _held(raw, "a") == [True]
    store.fail_jobs([taken], "the provider timed out", utcnow())
    assert [attempts for attempts, _ in _jobs(raw, "a")] == [1]


def test_a_failure_of_an_old_text_leaves_the_job_of_the_new_text_alone(store, raw):
    """The job now stands for another text of the entry (the write that queued it, `Store.append`, keeps the job's
    row and sets its `content_hash`): the failure of the old text's batch, a timeout here, must not give the new text
    an attempt, a delay and the mark that deals it as a lost job, as `complete_jobs` files no vector of the old text.
    (The write also ends the lease, which the test keeps: the text's guard on its own.)"""
    _queue(store, "a", ["disk full on node a"])
    (job,) = store.claim_jobs(10, 5, None, 300)
    raw("UPDATE embed_outbox SET content_hash = 'the new text' WHERE org_id = 'a'", org="a")
    store.fail_jobs([job], TIMED_OUT, utcnow())
    assert _jobs(raw, "a") == [(0, None)]
