"""HNSW indexes are built by the worker's maintenance, concurrently, never inside a write: no org's writes wait."""

from __future__ import annotations

import threading
import time

import numpy as np
import psycopg
import pytest

from grandbo.config import Settings
from grandbo.service import Grandbo
from grandbo.store.postgres.hnsw import index_name
from tests.conftest import owner_url, reset_postgres

pytestmark = pytest.mark.postgres

THRESHOLD = 300
# The lock requests of this database's sessions that wait.
WAITING = (
    "SELECT l.locktype, l.mode FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE NOT l.granted AND a.datname = current_database()"
)


@pytest.fixture
def url(pg_database):
    reset_postgres(pg_database)
    return pg_database


def _settings(url, home, **extra):
    return Settings(home=home, database_url=url, hnsw_threshold=THRESHOLD, **extra)


@pytest.fixture
def api(url, tmp_path):
    """An API process's Grandbo: the runtime role only."""
    with Grandbo.init(_settings(url, tmp_path), embedding="deterministic") as opened:
        yield opened


@pytest.fixture
def worker(api, url, tmp_path):
    """A `grandbo worker` process's Grandbo, given the owner's URL so that it can build indexes concurrently."""
    with Grandbo.open(_settings(url, tmp_path, migrate_database_url=owner_url(url))) as opened:
        yield opened


def _index(url, org):
    """Whether the org's HNSW index exists, and whether it is valid (None: it does not exist)."""
    with psycopg.connect(owner_url(url)) as conn:
        row = conn.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
            (index_name(org),),
        ).fetchone()
    return None if row is None else bool(row[0])


def _wanted(url):
    with psycopg.connect(owner_url(url)) as conn:
        return {r[0] for r in conn.execute("SELECT org_id FROM orgs WHERE vector_index_wanted_at IS NOT NULL")}


def _import(memory, count, dimension, seed=5):
    vectors = list(np.random.default_rng(seed).standard_normal((count, dimension)).astype(np.float32))
    memory.remember_many([{"title": f"bulk entry {n}"} for n in range(count)], vectors=vectors)


def test_crossing_the_threshold_asks_for_the_index_and_the_worker_builds_it(api, worker, url):
    big = api.org("big", create=True)
    _import(big, THRESHOLD + 50, api.space.dimension)
    assert _index(url, "big") is None  # the write committed without building it
    assert _wanted(url) == {"big"}
    query = api.provider().embed(["bulk entry 7"], "query")[0]
    assert "entry_vectors_hnsw" not in api._store.explain_vector_search("big", query)  # exact until it exists
    assert big.recall("bulk entry 7").hits  # and recall works meanwhile
    assert worker.worker().maintain() == ["big"]
    assert _index(url, "big") is True and _wanted(url) == set()
    assert worker.worker().maintain() == []  # nothing more to do


def test_an_index_build_never_blocks_another_orgs_vector_writes(api, worker, url):
    """A transaction holding a vector write open (as any in-flight write does) keeps the build of big's index
    waiting; meanwhile another org writes vectors under a 2 s lock_timeout, so a wait would be an error.
    A build inside a transaction (the old write path) queues a SHARE lock on entry_vectors, and every write
    behind it waits."""
    api.org("other", create=True)
    big = api.org("big", create=True)
    holder = psycopg.connect(url)  # the runtime role, as the API process
    holder.execute("SELECT set_config('grandbo.org_id', 'holder', true)")
    holder.execute("LOCK TABLE entry_vectors IN ROW EXCLUSIVE MODE")  # what an uncommitted vector write holds
    failures: list[BaseException] = []

    def build() -> None:
        try:
            _import(big, THRESHOLD + 50, api.space.dimension)
            worker.worker().maintain()
        except BaseException as error:  # reported by the test below
            failures.append(error)

    builder = threading.Thread(target=build)
    builder.start()
    try:
        with psycopg.connect(owner_url(url), autocommit=True) as watch:
            deadline = time.monotonic() + 120  # waits for a state, asserts no timing
            while not (waiting := watch.execute(WAITING).fetchall()):
                assert builder.is_alive() and time.monotonic() < deadline, failures or "the build never started"
                time.sleep(0.05)
        vector = "[" + ",".join(["0.5"] * api.space.dimension) + "]"
        with psycopg.connect(url) as other:
            other.execute("SET lock_timeout = '2s'")
            other.execute("SELECT set_config('grandbo.org_id', 'other', true)")
            other.execute(
                "INSERT INTO entry_vectors (org_id, entry_id, provider, model, dimension, content_hash, "
                "embedded_at, embedding, vseq) VALUES ('other', 'o1', 'p', 'm', %s, 'h', now(), %s::vector, 1)",
                (api.space.dimension, vector),
            )  # raises LockNotAvailable if the build holds up other orgs' writes
        assert ("virtualxid", "ShareLock") in waiting  # CREATE INDEX CONCURRENTLY waits for in-flight writes
    finally:
        holder.rollback()
        holder.close()
        builder.join(timeout=300)
    assert not failures
    assert _index(url, "big") is True


def test_a_worker_without_the_owner_url_builds_nothing_and_recall_stays_exact(api, url):
    big = api.org("big", create=True)
    _import(big, THRESHOLD + 50, api.space.dimension)
    assert api.worker().maintain() == []  # it cannot build concurrently: it says so (logged) and waits
    assert _index(url, "big") is None and _wanted(url) == {"big"}
    assert big.recall("bulk entry 7").hits


def test_an_index_a_killed_build_left_invalid_is_built_again(api, worker, url):
    big = api.org("big", create=True)
    _import(big, THRESHOLD + 50, api.space.dimension)
    holder = psycopg.connect(url)
    holder.execute("LOCK TABLE entry_vectors IN ROW EXCLUSIVE MODE")
    owner = psycopg.connect(owner_url(url), autocommit=True)
    pid = owner.info.backend_pid

    outcome: list[BaseException] = []

    def doomed() -> None:
        try:
            owner.execute(
                f'CREATE INDEX CONCURRENTLY "{index_name("big")}" ON entry_vectors '
                "USING hnsw (embedding vector_cosine_ops) WHERE org_id = 'big'"
            )
        except psycopg.Error as error:
            outcome.append(error)

    killer = threading.Thread(target=doomed)
    killer.start()
    with psycopg.connect(owner_url(url), autocommit=True) as watch:
        while _index(url, "big") is None or not watch.execute(WAITING + " AND l.pid = %s", (pid,)).fetchone():
            assert killer.is_alive()
            time.sleep(0.05)
        watch.execute("SELECT pg_cancel_backend(%s)", (pid,))
    killer.join(timeout=60)
    holder.rollback()
    holder.close()
    owner.close()
    assert isinstance(outcome[0], psycopg.errors.QueryCanceled)
    assert _index(url, "big") is False  # left invalid by the build cut short
    assert worker.worker().maintain() == ["big"]
    assert _index(url, "big") is True


def test_an_org_that_crosses_the_threshold_over_several_writes_asks_once_it_has(api, url):
    big = api.org("big", create=True)
    vectors = list(np.random.default_rng(9).standard_normal((320, api.space.dimension)).astype(np.float32))
    big.remember_many([{"title": f"entry {n}"} for n in range(200)], vectors=vectors[:200])
    big.remember_many([{"title": f"entry {n}"} for n in range(200, 260)], vectors=vectors[200:260])
    assert _wanted(url) == set()  # 260 of 300
    big.remember_many([{"title": f"entry {n}"} for n in range(260, 320)], vectors=vectors[260:])
    assert _wanted(url) == {"big"}


def test_an_org_whose_vectors_two_processes_write_asks_once_it_holds_the_threshold(api, url, tmp_path):
    """Probe 18: each process counted down only the vectors it wrote itself after a count short of the threshold, so
    with two workers sharing an org's jobs the org reached about twice the threshold (22,000 of 20,000) without
    asking for its index. The org's vector numbers are shared: whichever process writes past them counts again."""
    other_home = tmp_path / "other"
    with Grandbo.open(_settings(url, other_home)) as other:
        mine, theirs = api.org("big", create=True), other.org("big")
        vectors = list(np.random.default_rng(3).standard_normal((320, api.space.dimension)).astype(np.float32))
        mine.remember_many([{"title": f"entry {n}"} for n in range(200)], vectors=vectors[:200])  # 200 of 300
        for start in range(200, 320, 20):  # the other process writes the rest, this one a little more
            theirs.remember_many([{"title": f"entry {n}"} for n in range(start, start + 10)],
                                 vectors=vectors[start : start + 10])  # fmt: skip
            mine.remember_many([{"title": f"entry {n}"} for n in range(start + 10, start + 20)],
                               vectors=vectors[start + 10 : start + 20])  # fmt: skip
    assert _wanted(url) == {"big"}  # 320 of 300, half of the last 120 written by each


def test_an_org_from_before_its_vectors_were_numbered_asks_once_it_holds_the_threshold(api, url, tmp_path):
    """Review: migration 16 numbered an org's vectors from 1, whatever it held, so an org of 290 vectors then was
    counted for its index only once its numbers reached the threshold (about 590 vectors). A process counts an org
    the first time it writes vectors of it."""
    vectors = list(np.random.default_rng(4).standard_normal((400, api.space.dimension)).astype(np.float32))
    api.org("big", create=True).remember_many([{"title": f"entry {n}"} for n in range(290)], vectors=vectors[:290])
    with psycopg.connect(owner_url(url)) as conn:  # as migration 16 left an org it found holding vectors
        conn.execute("UPDATE orgs SET vector_seq = 1 WHERE org_id = 'big'")
    with Grandbo.open(_settings(url, tmp_path / "upgraded")) as upgraded:  # a process after the upgrade
        memory = upgraded.org("big")
        memory.remember_many([{"title": f"entry {n}"} for n in range(290, 300)], vectors=vectors[290:300])
        assert _wanted(url) == {"big"}  # 300 of 300, though numbered 11


def test_dropping_an_org_while_another_orgs_index_is_built_stops_no_org(api, worker, url):
    """The drop's transaction dropped the org's index with a plain DROP INDEX, which waits for the shared table's
    ACCESS EXCLUSIVE lock behind a build under way; every org's recall and vector write queued behind it. The index
    is now dropped concurrently after the drop commits, giving up after 2 s while a build runs (the partial index
    left behind matches no row): with a build of another org held open (here: a transaction holding a vector write
    of that org, which a concurrent build waits for), the drop ends, and a third org's vector write goes through."""
    big, other = api.org("big", create=True), api.org("other", create=True)
    _import(big, THRESHOLD + 50, api.space.dimension)
    assert worker.worker().maintain() == ["big"] and _index(url, "big") is True
    _import(other, THRESHOLD + 50, api.space.dimension, seed=9)
    holder = psycopg.connect(owner_url(url))  # an open write of `other`: its concurrent build waits for it
    holder.execute("UPDATE entry_vectors SET provider = provider WHERE org_id = 'other' AND entry_id IN "
                   "(SELECT entry_id FROM entry_vectors WHERE org_id = 'other' LIMIT 1)")  # fmt: skip
    building = threading.Thread(target=worker.worker().maintain)
    building.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _waiting_for_build(url):
            time.sleep(0.05)
        dropping = threading.Thread(target=worker.drop_org, args=("big",))
        dropping.start()
        dropping.join(timeout=30)
        assert not dropping.is_alive(), "the drop waited for another org's index build"
        third = api.org("third", create=True)
        writing = threading.Thread(target=_import, args=(third, 5, api.space.dimension, 11))
        writing.start()
        writing.join(timeout=30)
        assert not writing.is_alive() and third.stats().total == 5  # a third org's vector write went through
    finally:
        holder.rollback()
        holder.close()
        building.join(timeout=120)
    assert _index(url, "other") is True


def _waiting_for_build(url):
    with psycopg.connect(owner_url(url)) as conn:
        return (
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'CREATE INDEX%'"
            ).fetchone()[0]
            > 0
        )
