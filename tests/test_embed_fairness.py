"""The embed queue serves organizations in turn: one org's bulk import never starves another's new entries."""

from __future__ import annotations

import pytest

from grandbo.model import EventType, utcnow
from grandbo.ports import NewEvent


def _queue(store, org, count, start=0):
    """Write `count` entries of `org` without vectors: each leaves one embed job in the outbox."""
    now = utcnow()
    store.ensure_org(org)
    events = [
        NewEvent(f"{org}-{n}", EventType.REMEMBERED,
                 {"title": f"{org} entry {n}", "body": "b", "kind": "fact", "source": "import",
                  "occurred_at": now.isoformat()}, "test", now)
        for n in range(start, start + count)
    ]  # fmt: skip
    for first in range(0, len(events), 1000):
        store.append(org, events[first : first + 1000])


def test_a_small_orgs_new_entry_is_in_the_first_batch_while_another_org_imports(grandbo, store):
    """`acme` (first by name, and first in the queue) has 3,000 jobs waiting; `beta` writes one entry after them.
    The next claim holds beta's job in its first provider batch, and one worker round embeds it."""
    _queue(store, "acme", 3000)
    _queue(store, "beta", 1)
    size = grandbo.settings.embed_batch_size
    jobs = store.claim_jobs(size * 8, grandbo.settings.embed_max_attempts)
    assert len(jobs) == size * 8
    assert [n for n, job in enumerate(jobs) if job.org_id == "beta"] == [1]  # acme's first job, then beta's
    store.release_jobs(jobs)
    report = grandbo.worker().run_once()  # a new worker: one batch, the provider's speed not yet timed
    assert report.embedded == size
    assert store.corpus_stats("beta", 5).readable == 1
    assert store.corpus_stats("acme", 5).pending == 3000 - (size - 1)


def test_a_new_worker_claims_one_batch_before_it_has_timed_the_provider(grandbo, store):
    """Before the worker has timed a full batch, a claim of eight could hold a slow provider for many seconds
    (the local model on a busy machine: 6.4-7.3 s, and another org's new entry waited 7.1-8.0 s): it claims one."""
    _queue(store, "acme", 1000)
    worker = grandbo.worker()
    assert worker.run_once().claimed == grandbo.settings.embed_batch_size
    assert store.corpus_stats("acme", 5).pending == 1000 - grandbo.settings.embed_batch_size


def test_claims_take_turns_when_more_orgs_have_work_than_a_claim_holds(store):
    """Five orgs with a backlog each, claims of two jobs: three claims serve all five."""
    for org in ["o1", "o2", "o3", "o4", "o5"]:
        _queue(store, org, 4)
    claims = [[job.org_id for job in store.claim_jobs(2, 5)] for _ in range(3)]
    assert claims == [["o1", "o2"], ["o3", "o4"], ["o5", "o1"]]


def test_the_org_served_first_rotates_from_claim_to_claim(store):
    _queue(store, "x-big", 20)
    _queue(store, "y-big", 20)
    claims = [[job.org_id for job in store.claim_jobs(4, 5)] for _ in range(3)]
    assert claims == [["x-big", "y-big"] * 2, ["y-big", "x-big"] * 2, ["x-big", "y-big"] * 2]


def test_a_claim_deals_jobs_evenly_and_fills_up_from_the_orgs_that_have_more(store):
    """Three orgs with 1, 3 and 100 jobs, a claim of 10: each org's jobs alternate with the others' while it
    has any, the large org fills the rest, and within each org the oldest go first."""
    _queue(store, "a-one", 1)
    _queue(store, "b-three", 3)
    _queue(store, "c-many", 100)
    jobs = store.claim_jobs(10, 5)
    assert [job.org_id for job in jobs][:6] == ["a-one", "b-three", "c-many", "b-three", "c-many", "b-three"]
    assert [job.org_id for job in jobs][6:] == ["c-many"] * 4
    assert [job.entry_id for job in jobs if job.org_id == "c-many"] == [f"c-many-{n}" for n in range(6)]
    assert len({job.job_id for job in jobs}) == 10
    again = store.claim_jobs(200, 5)  # nothing claimed twice while the lease holds
    assert len(again) == 94 and not {job.job_id for job in again} & {job.job_id for job in jobs}


def test_two_workers_claiming_at_once_never_take_the_same_job(store, settings):
    """Two stores on one database (two worker processes) claim side by side until the outbox is empty:
    every job is claimed exactly once."""
    import threading

    from grandbo.retrieval.text import index_terms
    from grandbo.store import open_store

    for org in ("acme", "beta", "cora"):
        _queue(store, org, 300)
    other = open_store(settings.store_url, index_terms, settings)
    claimed: list[list[int]] = [[], []]

    def drain(target, seen):
        while jobs := target.claim_jobs(25, 5):
            seen.extend(job.job_id for job in jobs)

    try:
        threads = [threading.Thread(target=drain, args=pair) for pair in ((store, claimed[0]), (other, claimed[1]))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        other.close()
    every = claimed[0] + claimed[1]
    assert len(every) == len(set(every)) == 900


def test_a_slow_provider_gets_smaller_claims_so_a_new_org_waits_at_most_one(tmp_path, database_url):
    """A provider taking 0.6 s a batch, claims held to 1 s of its work: the first claim (nothing timed yet)
    holds one batch and so does every later one, so beta's job queued behind acme's backlog is embedded by the
    next claim."""
    from grandbo.service import Grandbo
    from tests.fakes import FakeEmbeddings
    from tests.test_embedding_faults import _hosted

    with FakeEmbeddings(dimension=8) as fake:
        fake.behaviour.delay_s = 0.6
        settings = _hosted(tmp_path, fake.url, database_url=database_url, http_timeout_seconds=30,
                           embed_batch_size=2, embed_claim_seconds=1.0)  # fmt: skip
        with Grandbo.init(settings, embedding="openai") as grandbo:
            store = grandbo._store
            _queue(store, "acme", 40)
            worker = grandbo.worker()
            assert worker.run_once().claimed == 2
            _queue(store, "beta", 1)
            assert worker.run_once().claimed == 2
            assert store.corpus_stats("beta", 5).readable == 1


def test_a_provider_slower_than_timed_gives_back_the_rest_of_its_claim(tmp_path, database_url):
    """The provider answered at once when timed, so the next claim takes eight batches; then it takes 0.6 s a
    batch. The claim, held to 1 s of work, embeds at most two batches and puts the rest back, free for the next
    claim (which deals them again with whatever arrived meanwhile), instead of holding them for 4.8 s."""
    from grandbo.service import Grandbo
    from tests.fakes import FakeEmbeddings
    from tests.test_embedding_faults import _hosted

    with FakeEmbeddings(dimension=8) as fake:
        settings = _hosted(tmp_path, fake.url, database_url=database_url, http_timeout_seconds=30,
                           embed_batch_size=2, embed_claim_seconds=1.0)  # fmt: skip
        with Grandbo.init(settings, embedding="openai") as grandbo:
            store = grandbo._store
            _queue(store, "acme", 40)
            worker = grandbo.worker()
            assert worker.run_once().claimed == 2  # timed: well under 1/8 s a batch
            fake.behaviour.delay_s = 0.6
            report = worker.run_once()
            assert report.claimed in (2, 4)  # a second batch starts only within the first second
            assert store.corpus_stats("acme", 5).readable == 2 + report.claimed
            assert len(store.claim_jobs(100, 5)) == 40 - 2 - report.claimed  # none left leased


def test_a_worker_killed_mid_claim_leaves_its_jobs_for_seconds_not_the_whole_lease(grandbo, store, raw):
    """Probe 18: a claim holds about 2 s of provider work (one job of every org with work) but was leased for
    GRANDBO_EMBED_LEASE_SECONDS (300): after a worker was killed, another org's acknowledged entry had no vector for
    5 minutes. A worker that has timed its provider leases a claim for 3 times the work it holds, at least 30 s
    and a provider call that runs to the HTTP timeout twice over."""
    from datetime import datetime

    from grandbo.model import utcnow

    _queue(store, "acme", 3 * grandbo.settings.embed_batch_size)
    worker = grandbo.worker()
    assert worker.run_once().embedded == grandbo.settings.embed_batch_size  # a first claim: one batch, timed
    settings = grandbo.settings
    lease = settings.embed_claim_seconds + 2 * settings.http_timeout_seconds  # a stalled call; 62 s by default
    assert worker._lease() == lease < settings.embed_lease_seconds
    with pytest.MonkeyPatch.context() as patch:  # the process dies between embedding a batch and filing it
        patch.setattr(type(store), "complete_jobs", lambda *args: (_ for _ in ()).throw(SystemExit(9)))
        with pytest.raises(SystemExit):
            worker.run_once()
    leased = [
        value for (value,) in raw("SELECT claimed_until FROM embed_outbox WHERE claimed_until IS NOT NULL", org="acme")
    ]
    held = [(v if isinstance(v, datetime) else datetime.fromisoformat(v)) - utcnow() for v in leased]
    assert len(held) == grandbo.settings.embed_batch_size  # the batch it was filing; the rest went back
    assert all(0 < delta.total_seconds() <= lease + 1 for delta in held)


def test_a_stopped_embed_thread_ends_its_claim_and_takes_no_other(tmp_path, database_url):
    """A server told to stop while its embed thread works through a backlog: the thread files the claim it holds
    and claims no other. It drained the whole backlog first (the stop was seen after an idle wait only), and a
    process killed meanwhile (its shutdown timed out) left its claim to lapse, each job counted as lost. The provider
    holds the first batch until the stop is given: counted, not timed. Fails on the thread that drained."""
    import threading

    from grandbo.service import Grandbo
    from tests.fakes import FakeEmbeddings
    from tests.test_embedding_faults import _hosted

    with FakeEmbeddings(dimension=8) as fake:
        settings = _hosted(tmp_path, fake.url, database_url=database_url, http_timeout_seconds=30,
                           embed_batch_size=2)  # fmt: skip
        with Grandbo.init(settings, embedding="openai") as grandbo:
            store = grandbo._store
            _queue(store, "acme", 20)
            fake.behaviour.hold, fake.behaviour.hold_for = threading.Event(), {"acme entry 0\\n"}
            worker = grandbo.worker()
            worker.start(poll_seconds=0.01)
            for _ in range(600):  # until the provider holds the first batch (recorded as it arrives)
                if any("acme entry 0\n" in text for request in fake.behaviour.requests
                       for text in request["body"].get("input", [])):  # fmt: skip
                    break
                threading.Event().wait(0.05)
            stopping = threading.Thread(target=worker.stop)
            stopping.start()
            while not worker._stop.is_set():  # the stop is given (then the thread is waited for)
                threading.Event().wait(0.01)
            fake.behaviour.hold.set()
            stopping.join(timeout=60)
            assert not stopping.is_alive()
            assert store.corpus_stats("acme", 5).readable == 2  # the claim it held, filed
            assert len(store.claim_jobs(100, 5)) == 18  # the rest waits, none of it leased
