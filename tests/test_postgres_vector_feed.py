"""On Postgres, an org's vectors are searched in process while it is below the HNSW threshold, fed by vector
writes numbered under the org's writer lock; an org past it is searched by pgvector. A process's first read of
an org does not wait for its vectors: pgvector answers until a later read has fetched them."""

from __future__ import annotations

import threading
import time

import numpy as np
import psycopg
import pytest
import structlog.testing

from grandbo.config import Settings
from grandbo.model import Arm
from grandbo.retrieval.text import index_terms
from grandbo.service import Grandbo
from grandbo.store.postgres.dialect import NEW_EPOCH
from grandbo.store.postgres.store import PostgresStore
from tests.conftest import owner_url, reset_postgres

pytestmark = pytest.mark.postgres

REDIS = {"title": "redis eviction storm on the session cache", "body": "keys evicted under memory pressure"}
# The lock requests of this database's sessions that wait.
WAITING = (
    "SELECT l.locktype, l.mode FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE NOT l.granted AND a.datname = current_database()"
)
KAFKA = {"title": "kafka consumer lag on the billing topic", "body": "lag grows after the deploy"}


@pytest.fixture
def url(pg_database):
    reset_postgres(pg_database)
    return pg_database


@pytest.fixture
def settings(url, tmp_path):
    return Settings(home=tmp_path / "home", database_url=url)


@pytest.fixture
def writer(settings):
    """One Grandbo process, which writes (and embeds inline)."""
    with Grandbo.init(settings, embedding="deterministic") as opened:
        yield opened


@pytest.fixture
def reader(writer, settings):
    """Another Grandbo process on the same database, which recalls."""
    with Grandbo.open(settings) as opened:
        yield opened


def _vectors(grandbo, count, seed=5):
    return list(np.random.default_rng(seed).standard_normal((count, grandbo.space.dimension)).astype(np.float32))


def _ids(result):
    return [hit.entry.id for hit in result.hits]


def _in_process(grandbo, org):
    """The org's index once this process holds its vectors: a later read than the first queues their fetch."""
    grandbo._keeper.fresh(org)
    grandbo._keeper.fresh(org)
    grandbo._keeper.settle()
    return grandbo._keeper.fresh(org)


def _vector_seq(url, org):
    with psycopg.connect(owner_url(url)) as conn:
        return conn.execute("SELECT vector_seq FROM orgs WHERE org_id = %s", (org,)).fetchone()[0]


def test_a_vector_another_process_writes_is_searched_in_process_once_written(writer, reader, url):
    theirs = writer.org("acme", create=True)
    first = theirs.remember(REDIS)
    ours = reader.org("acme")
    assert _ids(ours.recall(REDIS["title"], arm=Arm.VECTOR)) == [first.id]
    view = _in_process(reader, "acme")
    assert (view.space, view.vector_count) == (reader.space, 1)  # in process: the index holds the vector
    assert ours._search.arms_in_parallel(view)
    # The worker's path (an embed job completed) and an append's given vectors, both after this process's index.
    late = theirs.remember(KAFKA)
    given = theirs.remember_many([{"id": "given-1", "title": "disk full on the postgres primary"}],
                                 vectors=_vectors(writer, 1))  # fmt: skip
    assert _ids(ours.recall(KAFKA["title"], arm=Arm.VECTOR, k=1)) == [late.id]
    view = reader._keeper.fresh("acme")
    assert view.vector_count == 3 and view.vector_seq == _vector_seq(url, "acme") == 3
    # The in-process arm answers as pgvector's exact scan does.
    space, vector = reader.space, writer.provider().embed([KAFKA["title"]], "query")[0]
    in_process = [(h.entry_id, round(h.similarity, 5)) for h in view.search_vector(vector, 10, -1.0)]
    native = [(h.entry_id, round(h.similarity, 5)) for h in reader._store.vector_search("acme", space, vector, 10, -1)]
    assert in_process == native and {entry_id for entry_id, _ in native} == {first.id, late.id, given[0].id}


def test_a_vector_of_text_since_changed_is_not_searched(writer, reader, settings, url):
    entry = writer.org("acme", create=True).remember(REDIS)
    ours = reader.org("acme")
    assert _ids(ours.recall(REDIS["title"], arm=Arm.VECTOR)) == [entry.id]
    assert _in_process(reader, "acme").vector_count == 1
    with Grandbo.open(settings, background=True, embed_here=False) as server:  # a server: embedding is for workers
        server.org("acme").correct(entry.id, {"title": KAFKA["title"], "body": KAFKA["body"]})
    assert _ids(ours.recall(REDIS["title"], arm=Arm.VECTOR)) == []
    assert reader._keeper.fresh("acme").vector_count == 0
    # The old text's vector written again, numbered (as a write that lost a race with the correction would be).
    with psycopg.connect(settings.database_url) as conn:
        conn.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
        conn.execute(
            "WITH n AS (UPDATE orgs SET vector_seq = vector_seq + 1 WHERE org_id = 'acme' RETURNING vector_seq) "
            "UPDATE entry_vectors v SET vseq = n.vector_seq FROM n WHERE v.org_id = 'acme'"
        )
    assert _ids(ours.recall(REDIS["title"], arm=Arm.VECTOR)) == []
    view = reader._keeper.fresh("acme")
    assert view.vector_seq == _vector_seq(url, "acme") and view.vector_count == 0  # read, and left out


def test_an_org_past_the_hnsw_threshold_is_searched_by_pgvector(url, tmp_path):
    settings = Settings(home=tmp_path / "home", database_url=url, hnsw_threshold=50)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        small, big = grandbo.org("small", create=True), grandbo.org("big", create=True)
        small.remember(REDIS)
        vectors = _vectors(grandbo, 60)
        entries = [{"id": f"b{n}", "title": f"bulk entry {n}"} for n in range(60)]
        big.remember_many(entries[:40], vectors=vectors[:40])
        assert big.recall("bulk entry 7", arm=Arm.VECTOR).hits
        view = _in_process(grandbo, "big")
        assert (view.space, view.vector_count) == (grandbo.space, 40)  # below it: in process
        grandbo._keeper._save("big")  # its image, with the vectors
        big.remember_many(entries[40:], vectors=vectors[40:])  # past it: the org asks for its HNSW index
        view = grandbo._keeper.fresh("big")
        assert (view.space, view.vector_count) == (None, 0) and not big._search.arms_in_parallel(view)
        # Made again from that image without its vectors, not built row by row.
        assert (grandbo._keeper.counts["built"], grandbo._keeper.counts["loaded"]) == (1, 1)
        assert view.active_count == 60 and _ids(big.recall("bulk entry 47", arm=Arm.LEXICAL, k=1)) == ["b47"]
        query = vectors[7]
        hits = big._search.vector(view, grandbo.space, query, 5, -1.0)
        assert hits == grandbo._store.vector_search("big", grandbo.space, query, 5, -1.0) and hits[0].entry_id == "b7"
        assert grandbo._store.ensure_vector_index("big")  # built: still pgvector's
        assert grandbo._keeper.fresh("big").space is None
        view = _in_process(grandbo, "small")
        assert (view.space, view.vector_count) == (grandbo.space, 1)  # the other org is still in process


def test_an_upgraded_stores_vectors_are_read_by_the_first_index(url, settings):
    """The store as the release before migration 16 left it (no vector numbers, an index image without
    vectors), migrated: a new process's index holds every vector written before."""
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        written = [memory.remember(REDIS).id, memory.remember(KAFKA).id]
        memory.recall(REDIS["title"])
        grandbo._keeper._save("acme")  # an image, saved now (the old release's had no vectors: below)
    with psycopg.connect(owner_url(url), autocommit=True) as conn:
        conn.execute("DROP INDEX entry_vectors_by_vseq")
        conn.execute("ALTER TABLE entry_vectors DROP COLUMN vseq")
        conn.execute("ALTER TABLE orgs DROP COLUMN vector_seq")
        conn.execute("DELETE FROM schema_migrations WHERE version = 16")
        conn.execute("SELECT set_config('grandbo.org_id', 'acme', false)")
        saved = conn.execute("UPDATE index_images SET provider = NULL, model = NULL, dimension = NULL, "
                             "vector_seq = 0 WHERE org_id = 'acme'").rowcount  # fmt: skip
        assert saved == 1
    PostgresStore(url, index_terms, migrate_url=owner_url(url)).close()  # migration 16 runs
    with Grandbo.open(settings) as upgraded:
        memory = upgraded.org("acme")
        assert _ids(memory.recall(REDIS["title"], arm=Arm.VECTOR, k=1)) == [written[0]]
        view = _in_process(upgraded, "acme")
        assert (view.space, view.vector_count, view.vector_seq) == (upgraded.space, 2, 1)
        later = memory.remember({"title": "disk full on the postgres primary", "body": "wal filled the disk"})
        assert _ids(memory.recall("disk full on the postgres primary", arm=Arm.VECTOR, k=1)) == [later.id]
        assert upgraded._keeper.fresh("acme").vector_seq == 2


def test_a_vector_write_waiting_for_a_space_switch_holds_no_org_row_it_would_need(writer, settings):
    """`switch_space` holds store_meta, then renews every org's epoch; a worker's vector write must wait for the
    first before it takes its org's writer lock, or the two deadlock (Postgres aborts one of them)."""
    memory = writer.org("acme", create=True)
    switch = psycopg.connect(settings.database_url)  # the runtime role, store-wide, as switch_space runs
    switch.execute("SELECT set_config('grandbo.org_id', '', true)")  # store-wide: every org's row in sight
    switch.execute("LOCK TABLE store_meta IN EXCLUSIVE MODE")
    failures: list[BaseException] = []
    written = []

    def write() -> None:
        try:
            written.append(memory.remember(REDIS))  # committed, then embedded here: the vector waits for store_meta
        except BaseException as error:  # reported below
            failures.append(error)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as watch:
            deadline = time.monotonic() + 60  # waits for a state, asserts no timing
            while not watch.execute(WAITING).fetchall():
                assert thread.is_alive() and time.monotonic() < deadline, failures or "the write never waited"
                time.sleep(0.02)
        switch.execute("SET lock_timeout = '2s'")
        switch.execute(NEW_EPOCH)  # raises LockNotAvailable if the waiting write holds an org's row
        switch.commit()
    finally:
        switch.close()
        thread.join(timeout=60)
    assert not failures and not thread.is_alive()
    # Its vector was written (a deadlock aborts the vector write, which leaves it for a retry: none here).
    assert list(writer._store.vectors("acme", [written[0].id])) == [written[0].id]


def test_a_bulk_append_numbers_its_vectors_across_steps_and_the_index_holds_them_all(writer, reader, url):
    """600 given vectors: two steps of an append (500 events each), COPYed through the staging tables."""
    theirs = writer.org("acme", create=True)
    theirs.remember(REDIS)  # vector 1, through the worker
    entries = [{"id": f"b{n}", "title": f"bulk entry {n}"} for n in range(600)]
    theirs.remember_many(entries, vectors=_vectors(writer, 600))
    with psycopg.connect(url) as conn:
        conn.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
        numbers = conn.execute("SELECT count(DISTINCT vseq), min(vseq), max(vseq) FROM entry_vectors").fetchone()
    assert numbers == (601, 1, 601) and _vector_seq(url, "acme") == 601
    view = _in_process(reader, "acme")
    assert (view.vector_count, view.vector_seq) == (601, 601)


def test_the_first_read_of_an_org_waits_for_no_vector_and_pgvector_answers_alike_until_they_are_fetched(writer, reader):
    theirs = writer.org("acme", create=True)
    theirs.remember_many(
        [{"id": f"b{n}", "title": f"bulk entry {n}"} for n in range(300)], vectors=_vectors(writer, 300)
    )
    _in_process(writer, "acme")  # the writer's index made again with the vectors: its image saved with them
    writer._keeper.close()
    with reader._store.snapshot("acme") as snapshot:
        whole, head = snapshot.stored(), snapshot.stored(vectors=False)
    assert whole.marks.space == reader.space and whole.vectors_at == len(head.data) < len(whole.data) / 2
    fetched = threading.Event()
    reader._keeper.fetching = lambda _org: fetched.wait(60)  # the fetch held until the first answers are in
    ours = reader.org("acme")
    first = [ours.recall("bulk entry 7", k=5, arm=arm) for arm in (Arm.HYBRID, Arm.VECTOR)]
    view = reader._keeper.fresh("acme")  # a later read: the fetch queued (held)
    assert (view.space, view.awaiting, view.vector_count) == (None, reader.space, 0)  # the image's head only
    assert reader._keeper.counts["loaded"] == 1 and not ours._search.arms_in_parallel(view)  # pgvector's arm
    fetched.set()
    reader._keeper.settle()
    view = reader._keeper.fresh("acme")
    assert (view.space, view.awaiting, view.vector_count) == (reader.space, None, 300)
    assert reader._keeper.counts["fetched"] == 1 and ours._search.arms_in_parallel(view)
    again = [ours.recall("bulk entry 7", k=5, arm=arm) for arm in (Arm.HYBRID, Arm.VECTOR)]
    assert [[(h.entry.id, round(h.sort_score, 6)) for h in r.hits] for r in again] == [
        [(h.entry.id, round(h.sort_score, 6)) for h in r.hits] for r in first
    ]
    assert len(first[1].hits) == 5


def test_a_fetch_that_fails_leaves_pgvector_answering_and_a_later_read_fetches_again(writer, reader, url):
    """The fetch reads the org's image on the keeper's thread: refused there (its grant taken away, as a
    database's failure would), it is logged, the kept index still awaits the vectors and pgvector answers as
    before; once the database answers again, the next read queues the fetch anew."""
    theirs = writer.org("acme", create=True)
    theirs.remember_many(
        [{"id": f"b{n}", "title": f"bulk entry {n}"} for n in range(300)], vectors=_vectors(writer, 300)
    )
    _in_process(writer, "acme")
    writer._keeper.close()
    with psycopg.connect(url) as conn:
        runtime = conn.execute("SELECT current_user").fetchone()[0]
    held = threading.Event()
    reader._keeper.fetching = lambda _org: held.wait(60)
    ours = reader.org("acme")
    first = ours.recall("bulk entry 7", k=5)
    reader._keeper.fresh("acme")  # a later read: the fetch queued (held)
    with psycopg.connect(owner_url(url), autocommit=True) as conn:
        conn.execute(f'REVOKE SELECT ON index_images FROM "{runtime}"')
    try:
        with structlog.testing.capture_logs() as logs:
            answer = ours.recall("bulk entry 7", k=5)  # while the fetch is held: none other is queued
            held.set()
            reader._keeper.settle()
            view = reader._keeper.fresh("acme")  # queues it again: refused again
            reader._keeper.settle()  # and no read after it, so none is queued once the grant is back
    finally:
        with psycopg.connect(owner_url(url), autocommit=True) as conn:
            conn.execute(f'GRANT SELECT ON index_images TO "{runtime}"')
    failed = [line for line in logs if line["event"] == "index.vectors_not_fetched"]
    assert len(failed) == 2 and all(line["org_id"] == "acme" for line in failed)
    assert (view.space, view.awaiting, view.vector_count) == (None, reader.space, 0)
    assert reader._keeper.counts["fetched"] == 0 and _ids(answer) == _ids(first) and len(answer.hits) == 5
    view = _in_process(reader, "acme")
    assert (view.space, view.awaiting, view.vector_count) == (reader.space, None, 300)
    assert reader._keeper.counts["fetched"] == 1
    assert _ids(ours.recall("bulk entry 7", k=5)) == _ids(first)


def test_an_org_without_an_image_is_built_with_its_vectors_at_its_first_read_and_its_image_saved(writer, reader):
    """With no image to start from, the rows are read whole either way, so the first read reads the vectors with
    them: built lazily and then again with them by a later read's fetch, every org of a fresh seed was built twice
    in each process (py-spy under `benchmarks/tenants.py`: 60% of a server's GIL in the random-org phase)."""
    theirs = writer.org("acme", create=True)
    theirs.remember_many(
        [{"id": f"b{n}", "title": f"bulk entry {n}"} for n in range(300)], vectors=_vectors(writer, 300)
    )
    with reader._store.snapshot("acme") as snapshot:
        assert snapshot.stored() is None
    view = reader._keeper.fresh("acme")
    assert (view.space, view.awaiting, view.vector_count) == (reader.space, None, 300)
    assert reader._keeper.counts["built"] == 1 and reader.org("acme")._search.arms_in_parallel(view)
    assert reader._keeper.fresh("acme") is view
    reader._keeper.settle()
    assert reader._keeper.counts["fetched"] == 0
    reader._keeper.close()  # waits for the image's save
    with reader._store.snapshot("acme") as snapshot:
        whole = snapshot.stored()
    assert whole is not None and whole.marks.space == reader.space and whole.vectors_at < len(whole.data)
