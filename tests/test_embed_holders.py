"""An embed job leased by a worker that was killed is taken over by the next claim, not after its lease.

A killed worker's claim (one job of every org with work, up to eight provider batches) waited out its lease, up to
GRANDBO_EMBED_LEASE_SECONDS (300 s for a worker that had not timed its provider yet), before any worker took it: a
deploy's kill left every org's newest memories without their vectors for minutes. A lease now records its holder
(migration 31, as a write-behind's does since 29), and a worker ends at once the leases of a holder proved gone on
this machine (`EmbedWorker.take_over`): its next claim counts them as lost and deals them. One held on another
machine keeps its lease until it runs out."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import structlog

from grandbo.model import utcnow
from grandbo.service import Grandbo
from tests.test_embed_poison import _jobs, _queue
from tests.test_write_behind_holders import killed_while_holding

# A worker that leases every ready embed job (as a claim of a worker that had not timed its provider does: for
# GRANDBO_EMBED_LEASE_SECONDS), says how many, and waits to be killed.
CLAIMER = """
import sys
from grandbo.config import Settings
from grandbo.service import Grandbo
grandbo = Grandbo.open(Settings())
print(len(grandbo._store.claim_jobs(16, 5, None, 300)), flush=True)
sys.stdin.read()
"""

# A worker that leases every ready embed job, gives two back (acme's released, as a stopping worker does; beta's
# failed, as after a provider error), says so, and waits to be killed holding the third (gamma's).
GIVES_BACK = """
import sys
from grandbo.config import Settings
from grandbo.model import utcnow
from grandbo.service import Grandbo
store = Grandbo.open(Settings())._store
jobs = store.claim_jobs(16, 5, None, 300)
store.release_jobs([job for job in jobs if job.org_id == "acme"])
store.fail_jobs([job for job in jobs if job.org_id == "beta"], "the provider timed out", utcnow())
print(len(jobs) - 1, flush=True)
sys.stdin.read()
"""


def test_embed_jobs_a_killed_worker_held_are_taken_over_at_once_unless_held_on_another_machine(grandbo, raw):
    settings, store = grandbo.settings, grandbo._store
    _queue(store, "acme", ["redis eviction storm on auth-service"])
    _queue(store, "beta", ["disk full on the kafka brokers"])
    killed_while_holding(settings, CLAIMER)
    (holder,) = {
        by
        for org in ("acme", "beta")
        for (by,) in raw("SELECT claimed_by FROM embed_outbox WHERE org_id = %s", (org,), org=org)
    }
    assert isinstance(holder, str) and json.loads(holder)["pid"] != os.getpid()
    elsewhere = json.dumps({**json.loads(holder), "host": "another-machine"}, sort_keys=True)
    raw("UPDATE embed_outbox SET claimed_by = %s WHERE org_id = 'beta'", (elsewhere,), org="beta")
    with Grandbo.open(settings) as other, structlog.testing.capture_logs() as logs:  # well within the 300 s lease
        report = other.worker().run_once()
    assert (report.claimed, report.embedded) == (1, 1)  # the killed worker's; the other machine's keeps its lease
    assert store.vectors("acme", ["acme-0"]) and not store.vectors("beta", ["beta-0"])
    taken = [(e["org_id"], e["jobs"]) for e in logs if e["event"] == "memory.embedding_lease_taken_over"]
    lost = [(e["org_id"], e["attempt"]) for e in logs if e["event"] == "memory.embedding_runner_lost"]
    assert (taken, lost) == ([("acme", 1)], [("acme", 1)])  # ended, then counted as a lost attempt by the claim
    assert _jobs(raw, "beta") == [(0, None)]  # not counted: its holder may still run
    assert store.claim_jobs(16, 5) == []  # and still leased


def test_an_ended_lease_names_no_holder_so_an_older_workers_lease_of_the_job_is_not_taken_over(grandbo, raw):
    """A worker from before migration 31 (still running during a rolling deploy) leases a job without naming
    itself: the job must not still name the worker whose lease ended (released, failed, or ended as its holder was
    gone), or a worker that finds that one gone ends the live lease and embeds the job a second time."""
    settings, store = grandbo.settings, grandbo._store
    orgs = {"acme": "redis eviction storm", "beta": "disk full on the kafka brokers", "gamma": "certificate expired"}
    for org, title in orgs.items():
        _queue(store, org, [title])
    killed_while_holding(settings, GIVES_BACK)
    with Grandbo.open(settings) as other:
        assert other.worker().take_over() == 1  # gamma's: its holder was killed
    later = (utcnow() + timedelta(seconds=300)).isoformat()
    for org in orgs:  # the older worker's lease: claimed_until only, as its claim wrote it
        raw("UPDATE embed_outbox SET claimed_until = %s WHERE org_id = %s", (later, org), org=org)
    assert [by for org in orgs for (by,) in raw("SELECT claimed_by FROM embed_outbox WHERE org_id = %s", (org,),
                                                 org=org)] == [None] * 3  # fmt: skip
    with Grandbo.open(settings) as other:
        assert other.worker().take_over() == 0
    assert store.claim_jobs(16, 5) == []  # the older worker keeps its three leases
