"""What only the Postgres store has to prove: RLS as a second wall, migrations, connections, HNSW, workers."""

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import numpy as np
import psycopg
import pytest

from grandbo.config import Settings
from grandbo.errors import ConfigError, MigrationError, StoreError, StoreUnavailableError
from grandbo.retrieval.text import index_terms
from grandbo.service import Grandbo
from grandbo.store.postgres import migrations
from grandbo.store.postgres.store import PostgresStore
from tests.conftest import APP_PASSWORD, APP_ROLE, OWNER_PASSWORD, OWNER_ROLE, owner_url, reset_postgres
from tests.fakes import FakeEmbeddings

pytestmark = pytest.mark.postgres

SECRET = {
    "id": "B-SECRET",
    "title": "Redis eviction storm on auth-service",
    "body": "ERR_CONN_RESET, keys evicted",
    "tags": ["ERR_CONN_RESET"],
    "services": ["auth-service"],
}


@pytest.fixture
def url(pg_database):
    reset_postgres(pg_database)
    return pg_database


@pytest.fixture
def grandbo(url, tmp_path):
    with Grandbo.init(Settings(home=tmp_path, database_url=url), embedding="deterministic") as opened:
        yield opened


def app_conn(url, org=None):
    conn = psycopg.connect(url)
    if org is not None:
        conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
    return conn


def test_row_level_security_hides_other_orgs_from_raw_sql(grandbo, url):
    grandbo.org("org-a", create=True).remember({"title": "org a memory about disks", "body": "disk full"})
    grandbo.org("org-b", create=True).remember(SECRET)
    tables = ["memory_events", "memory_entries", "entry_vectors", "embed_outbox"]
    for org in (None, "", "org-a", "org-c", "' OR '1'='1"):
        with app_conn(url, org) as conn:
            for table in tables:
                rows = conn.execute(f"SELECT org_id FROM {table}").fetchall()
                assert ("org-b",) not in rows, (org, table)
                if org in (None, "", "org-c", "' OR '1'='1"):
                    assert rows == [], (org, table)
    with app_conn(url, "org-b") as conn:
        assert conn.execute("SELECT entry_id FROM memory_entries").fetchall() == [("B-SECRET",)]
    with app_conn(url, "org-a") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level"):
        conn.execute(  # writing into another org is refused by the policy's WITH CHECK
            "INSERT INTO memory_events (org_id, entry_id, type, payload, actor, at) "
            "VALUES ('org-b', 'forged', 'remembered', '{}', 'intruder', now())"
        )
    with app_conn(url, "org-a") as conn:
        assert conn.execute("UPDATE memory_entries SET title = 'x' WHERE org_id = 'org-b'").rowcount == 0
        assert conn.execute("DELETE FROM entry_vectors WHERE org_id = 'org-b'").rowcount == 0


def test_store_methods_for_org_a_never_return_org_b_rows(grandbo, store):
    a = grandbo.org("org-a", create=True)
    a.remember({"title": "Unrelated disk alert", "body": "disk full on a batch node"})
    grandbo.org("org-b", create=True).remember(SECRET)
    query = grandbo.provider().embed(["redis eviction storm ERR_CONN_RESET auth-service"], "query")[0]
    with store.snapshot("org-a") as snapshot:
        assert [row.entry_id for row in snapshot.rows(0, active_only=False)] == [a.entries()[0].id]
    assert all(h.entry_id != "B-SECRET" for h in store.vector_search("org-a", grandbo.space, query, 25, -1.0))
    assert store.get_many("org-a", ["B-SECRET"]) == {} and store.events("org-a", "B-SECRET") == []
    assert store.corpus_stats("org-a", 5).total == 1
    assert store.any_vector("org-b", grandbo.space) and not store.any_vector("org-c", grandbo.space)
    assert "B-SECRET" not in [hit.entry.id for hit in a.recall("redis eviction storm on auth-service").hits]


def test_a_role_that_bypasses_rls_is_refused(pg_server, pg_database):
    admin = pg_server.url(urlsplit(pg_database).path.lstrip("/"))
    with pytest.raises(StoreError, match="bypasses row-level security"):
        PostgresStore(admin, index_terms)


def test_unreachable_database_error_shows_the_url_without_its_password():
    with pytest.raises(StoreUnavailableError) as caught:
        PostgresStore("postgresql://grandbo:s3cret-pw@127.0.0.1:1/nowhere", index_terms, connect_timeout=2)
    assert "postgresql://grandbo:***@127.0.0.1:1/nowhere" in caught.value.message
    assert "s3cret-pw" not in caught.value.message


def test_migrations_run_twice_and_concurrently(url):
    errors = []

    def open_once():
        try:
            PostgresStore(url, index_terms, migrate_url=owner_url(url)).close()
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=open_once) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    store = PostgresStore(url, index_terms, migrate_url=owner_url(url))
    assert store.schema_versions() == [v for v, _, _ in migrations.MIGRATIONS]
    assert store.migrate() == []
    store.close()


def test_a_migrate_url_with_a_wrong_password_is_an_error_naming_it_not_a_traceback(url):
    wrong = owner_url(url).replace(":owner-password@", ":not-the-password@")
    with pytest.raises(ConfigError, match="GRANDBO_MIGRATE_DATABASE_URL") as caught:  # not an outage to wait on
        PostgresStore(url, index_terms, migrate_url=wrong)
    assert "not-the-password" not in caught.value.message
    assert "password authentication failed" in caught.value.message


def test_a_migrate_url_of_another_database_is_refused_before_it_migrates_anything(pg_server, url):
    name = "t_other_" + secrets.token_hex(3)
    pg_server.create_app_database(name, APP_ROLE, APP_PASSWORD, OWNER_ROLE, OWNER_PASSWORD)
    try:
        with pytest.raises(ConfigError, match=f"names the database {name}, not this store's"):
            PostgresStore(url, index_terms, migrate_url=pg_server.owner_url(name))
        with psycopg.connect(pg_server.url(name)) as conn:  # the other database was left as it was
            assert conn.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,)
    finally:
        pg_server.drop_database(name)


def test_a_migrate_url_of_a_same_named_database_on_another_server_is_refused(url):
    """Two servers can each hold a database of the store's name: the names agreeing is not enough."""
    from grandbo.devtools.postgres import LocalPostgres

    name = urlsplit(url).path.lstrip("/")
    with LocalPostgres() as other:
        other.create_app_database(name, APP_ROLE, APP_PASSWORD, OWNER_ROLE, OWNER_PASSWORD)
        with pytest.raises(ConfigError, match=f"database named {name} on another Postgres server") as refused:
            PostgresStore(url, index_terms, migrate_url=other.owner_url(name))
        assert OWNER_PASSWORD not in refused.value.message
        with psycopg.connect(other.url(name)) as conn:  # nothing was migrated there
            assert conn.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,)
    PostgresStore(url, index_terms, migrate_url=owner_url(url)).close()  # the store's own server still works


def test_an_interrupted_migration_leaves_nothing_and_a_rerun_completes_it(url, monkeypatch):
    released = migrations.MIGRATIONS
    broken = [*released, (99, "test", ["CREATE TABLE half_done (x int)", "SELECT 1 / 0"])]
    monkeypatch.setattr("grandbo.store.postgres.migrations.MIGRATIONS", broken)
    with pytest.raises(psycopg.errors.DivisionByZero):
        PostgresStore(url, index_terms, migrate_url=owner_url(url))
    with psycopg.connect(owner_url(url)) as conn:
        assert conn.execute("SELECT to_regclass('half_done')").fetchone() == (None,)
        assert 99 not in [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
    fixed = [*released, (99, "test", ["CREATE TABLE half_done (x int)"])]
    monkeypatch.setattr("grandbo.store.postgres.migrations.MIGRATIONS", fixed)
    store = PostgresStore(url, index_terms, migrate_url=owner_url(url))
    assert store.schema_versions()[-1] == 99
    store.close()
    with psycopg.connect(owner_url(url), autocommit=True) as conn:
        conn.execute("DROP TABLE half_done")
        conn.execute("DELETE FROM schema_migrations WHERE version = 99")


def test_a_database_from_a_newer_release_is_refused(url):
    with psycopg.connect(owner_url(url), autocommit=True) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', now())")
    try:
        with pytest.raises(MigrationError, match="newer release"):
            PostgresStore(url, index_terms, migrate_url=owner_url(url))
    finally:
        with psycopg.connect(owner_url(url), autocommit=True) as conn:
            conn.execute("DELETE FROM schema_migrations WHERE version = 999")


def test_reads_survive_a_lost_connection_and_writes_fail_cleanly(grandbo, pg_server, pg_database, store):
    memory = grandbo.org("acme", create=True)
    memory.remember({"title": "first memory on disk pressure", "body": "disk full"})
    admin_url = pg_server.url(urlsplit(pg_database).path.lstrip("/"))

    def kill_app_connections():
        with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'grandbo_app'")

    kill_app_connections()
    assert memory.recall("disk full on the batch node").hits  # served by a fresh connection
    events_before = len(store.events("acme"))
    # Hold the org's writer lock from outside, so the write is caught inside its transaction; then cut it.
    with psycopg.connect(admin_url) as blocker:
        blocker.execute("SELECT 1 FROM orgs WHERE org_id = 'acme' FOR UPDATE")
        outcome = []
        writer = threading.Thread(target=lambda: outcome.append(_attempt(memory)))
        writer.start()
        time.sleep(0.5)
        kill_app_connections()
        blocker.rollback()
    writer.join(timeout=30)
    assert isinstance(outcome[0], StoreUnavailableError)
    assert "nothing was written" in outcome[0].message and outcome[0].detail["outcome"] == "not_committed"
    assert len(store.events("acme")) == events_before
    assert memory.stats().total == 1
    memory.remember({"title": "third memory", "body": "after the outage"})  # the pool recovered
    assert memory.stats().total == 2


def _attempt(memory):
    try:
        return memory.remember({"title": "second memory", "body": "written while the connection dies"})
    except StoreUnavailableError as error:
        return error


@pytest.mark.parametrize(
    ("count", "bad", "field"),
    [(2_500, 1_800, "title"), (2_100, 2_050, "meta")],
    ids=["refused-in-a-copy", "refused-in-the-pipeline"],
)
def test_a_step_the_server_refuses_rolls_back_the_whole_append(grandbo, count, bad, field, store):
    """A large append is written in steps, the server working on one while the next is built. A NUL
    character, which Postgres text and jsonb cannot hold, in a step's COPY (500 rows) or in the last step's
    pipelined INSERT (100 rows, reported when the append waits for the server) fails the append, and the
    steps before it go with it."""
    from grandbo.model import EventType, utcnow
    from grandbo.ports import NewEvent

    now = utcnow()
    store.ensure_org("acme")

    def payload(n):
        body = {"title": f"memory {n}", "body": "b", "kind": "fact", "source": "import", "occurred_at": now.isoformat()}
        if n == bad:
            body[field] = {"note": "a\x00b"} if field == "meta" else "memory \x00"
        return body

    events = [NewEvent(f"e{n}", EventType.REMEMBERED, payload(n), "test", now) for n in range(count)]
    with pytest.raises(psycopg.DataError):
        store.append("acme", events)
    assert store.events("acme") == [] and store.get_many("acme", ["e1"]) == {}
    store.append("acme", events[:3])  # the connection is usable again
    assert len(store.events("acme")) == 3


def test_hnsw_index_serves_the_vector_arm_once_an_org_is_large(grandbo, store):
    memory = grandbo.org("big", create=True)
    memory.remember_many(
        [{"title": f"incident {n} on service {n % 17}", "body": f"symptom {n % 13}"} for n in range(3000)]
    )
    query = grandbo.provider().embed(["incident on service 3 symptom 4"], "query")[0]
    exact = store.vector_search("big", grandbo.space, query, 10, -1.0)
    assert "entry_vectors_hnsw" not in store.explain_vector_search("big", query)
    store.hnsw_threshold = 2000
    assert store.ensure_vector_index("big") is True
    plan = store.explain_vector_search("big", query)
    assert "Index Scan using entry_vectors_hnsw_" in plan
    approximate = store.vector_search("big", grandbo.space, query, 10, -1.0)
    overlap = len({h.entry_id for h in exact} & {h.entry_id for h in approximate})
    assert overlap >= 9
    small = grandbo.org("small", create=True)
    small.remember({"title": "one entry", "body": "only"})
    assert "entry_vectors_hnsw" not in store.explain_vector_search("small", query)  # the index is partial


def test_a_bulk_load_with_the_index_check_off_asks_for_no_index_until_it_is_back_on(grandbo, url, store):
    """A write never builds the index (tests/test_index_maintenance.py): it asks the worker for it."""
    import numpy as np

    def wanted():
        with app_conn(url) as conn:
            return conn.execute("SELECT vector_index_wanted_at FROM orgs WHERE org_id = 'bulk'").fetchone()[0]

    memory = grandbo.org("bulk", create=True)
    store.hnsw_threshold = 300
    vectors = list(np.random.default_rng(5).standard_normal((400, grandbo.space.dimension)).astype(np.float32))
    entries = [{"id": f"b{n}", "title": f"bulk entry {n}"} for n in range(400)]
    store.auto_index = False
    memory.remember_many(entries[:350], vectors=vectors[:350])
    assert wanted() is None  # past the threshold, and not asked for
    store.auto_index = True
    memory.remember_many(entries[350:], vectors=vectors[350:])
    assert wanted() is not None


def _worker_env(url, home, fake_url, **extra):
    return {
        **os.environ,
        "GRANDBO_DATABASE_URL": url,
        "GRANDBO_HOME": str(home),
        "GRANDBO_OPENAI_BASE_URL": fake_url,
        "GRANDBO_OPENAI_MODEL": "fake-embed",
        "GRANDBO_OPENAI_DIMENSION": "8",
        "GRANDBO_OPENAI_API_KEY": "k",
        "GRANDBO_EMBED_BATCH_SIZE": "10",
        **extra,
    }


def _queue(url, tmp_path, fake, count):
    """Write `count` entries without embedding them (as if every inline embedding had failed)."""
    settings = Settings(
        home=tmp_path,
        database_url=url,
        openai_base_url=fake.url,
        openai_model="fake-embed",
        openai_dimension=8,
        openai_api_key="k",
    )
    with Grandbo.init(settings, embedding="openai") as grandbo:
        grandbo.org("acme", create=True)
        fake.behaviour.status = 503
        grandbo.org("acme", create=True).remember_many(
            [{"title": f"queued entry {n}", "body": f"body {n}"} for n in range(count)]
        )
        grandbo._store.retry_failed()  # claimable at once, by the workers below
        fake.behaviour.status = 200
        fake.behaviour.requests.clear()
        return settings


def _two_workers_drain(url, tmp_path):  # type: ignore[no-untyped-def]
    """120 queued entries drained by two `grandbo worker --once` processes: each one's count, the texts the
    provider was sent, the store's settings, and what the workers printed (for a failure's message)."""
    with FakeEmbeddings(dimension=8) as fake:
        settings = _queue(url, tmp_path, fake, 120)
        fake.behaviour.delay_s = 0.05
        fake.behaviour.gather = 2  # the first worker's first batch waits until the second worker has one too
        fake.behaviour.gather_s = 180
        env = _worker_env(url, tmp_path, fake.url, GRANDBO_HTTP_TIMEOUT_SECONDS="240")  # the client outwaits it

        def start() -> subprocess.Popen[str]:
            return subprocess.Popen([sys.executable, "-m", "grandbo", "worker", "--once"], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip

        # The second starts once the first holds its claim (its first batch waiting at the provider).
        first = start()
        deadline = time.monotonic() + 240
        while not fake.behaviour.requests and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = [first, start()]
        finished = [w.communicate(timeout=300) for w in workers]
        embedded = [int(out.split()[1].rstrip(",")) for out, _ in finished]
        texts = [t for r in fake.behaviour.requests for t in r["body"]["input"]]
        arrivals = [(round(r["at"], 2), len(r["body"]["input"])) for r in fake.behaviour.requests]
    return embedded, texts, settings, (finished, arrivals)


@pytest.mark.timeout(900)  # up to three rounds, each bounded for a loaded machine; on a quiet one, seconds
def test_two_workers_drain_the_outbox_without_double_work(url, tmp_path):
    """Every round must embed each entry exactly once. A round only shows the workers side by side when both
    embedded something; on a loaded machine one process now and then drained the outbox before the other
    claimed a job (seen in CI after every earlier attempt to pace them), and then the round is run again on a
    fresh store, at most three times: the test fails on double work in any round, or when no round had both."""
    for _ in range(3):
        embedded, texts, settings, seen = _two_workers_drain(url, tmp_path)
        assert sum(embedded) == 120 and len(texts) == len(set(texts)) == 120, seen  # each entry exactly once
        with Grandbo.open(settings) as grandbo:
            assert grandbo.org("acme", create=True).stats().readable == 120
        if all(n > 0 for n in embedded):
            return
        reset_postgres(url)
    pytest.fail(f"in three rounds one worker always drained the outbox alone: {seen}")


def test_worker_killed_mid_batch_loses_nothing(url, tmp_path):
    with FakeEmbeddings(dimension=8) as fake:
        settings = _queue(url, tmp_path, fake, 30)
        fake.behaviour.delay_s = 30
        env = _worker_env(url, tmp_path, fake.url, GRANDBO_EMBED_LEASE_SECONDS="1", GRANDBO_HTTP_TIMEOUT_SECONDS="60")
        worker = subprocess.Popen(
            [sys.executable, "-m", "grandbo", "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while not fake.behaviour.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.behaviour.requests, "the worker never called the provider"
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        fake.behaviour.delay_s = 0
        time.sleep(1.2)  # the dead worker's lease runs out
        again = subprocess.run(
            [sys.executable, "-m", "grandbo", "worker", "--once"], env=env, capture_output=True, text=True, timeout=120
        )
        assert "embedded 30" in again.stdout, again.stderr
    with Grandbo.open(settings) as grandbo:
        stats = grandbo.org("acme", create=True).stats()
    assert stats.readable == 30 and stats.pending == 0


def test_a_server_without_a_worker_leaves_embedding_to_the_worker_processes(url, tmp_path):
    """`grandbo serve --no-worker` (the production layout: API processes, and `grandbo worker` ones): a write
    in the API process embeds nothing there and starts no embed worker, yet its write-behinds still run on
    threads; a worker process embeds the entry, and the API process's recall then finds it by vector."""
    with FakeEmbeddings(dimension=8) as fake:
        settings = Settings(home=tmp_path, database_url=url, openai_base_url=fake.url, openai_model="fake-embed",
                            openai_dimension=8, openai_api_key="k", vector_min_similarity=-1.0)  # fmt: skip
        with Grandbo.init(settings, embedding="openai"):
            pass
        with Grandbo.open(settings, background=True, embed_here=False) as api:
            memory = api.org("acme", create=True)
            entry = memory.remember({"title": "walrus-cache stampede after a cold start", "body": "cold start"})
            assert memory.stats().pending == 1 and api._worker is None
            sent = [text for request in fake.behaviour.requests for text in request["body"]["input"]]
            assert not any("walrus" in text for text in sent)  # the entry was not embedded here
            assert api.pools.behind is not None  # write-behinds (an incident's close) still leave the request
            done = subprocess.run([sys.executable, "-m", "grandbo", "worker", "--once"], capture_output=True,
                                  text=True, timeout=120, env=_worker_env(url, tmp_path, fake.url))  # fmt: skip
            assert "embedded 1" in done.stdout, done.stderr
            assert memory.stats().readable == 1
            found = memory.recall("walrus-cache stampede after a cold start", arm="vector")
        assert [hit.entry.id for hit in found.hits] == [entry.id]
        assert api._worker is None  # recall embedded its query; no embed worker ever started here


def test_vector_distance_matches_numpy(grandbo, store):
    memory = grandbo.org("acme", create=True)
    memory.remember_many([{"title": f"entry about topic {n}", "body": f"words {n} {n * 7}"} for n in range(40)])
    query = grandbo.provider().embed(["entry about topic 12 words"], "query")[0]
    hits = store.vector_search("acme", grandbo.space, query, 10, -1.0)
    vectors = {
        e.id: v
        for e, v in zip(
            store.entries("acme"),
            grandbo.provider().embed([f"entry about topic {n}\nwords {n} {n * 7}" for n in range(40)]),
            strict=True,
        )
    }
    for hit in hits:
        assert hit.similarity == pytest.approx(float(np.dot(vectors[hit.entry_id], query)), abs=1e-5)


def test_eval_and_bench_run_inside_the_configured_postgres_and_clean_up(url, tmp_path):
    from grandbo.eval.bench import bench_recall
    from grandbo.eval.runner import evaluate, shipped_set

    settings = Settings(home=tmp_path, database_url=url)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("resident", create=True).remember({"title": "an org that must survive the eval", "body": "x"})
    report = evaluate(shipped_set(), settings, "deterministic", cache=False)
    assert [line["arm"] for line in report.lines] == ["lexical", "vector", "hybrid", "reranked"]
    embedded = evaluate(shipped_set(), Settings(home=tmp_path / "embedded"), "deterministic", cache=False)
    quality = ("nDCG@10", "R@5", "R@10", "MRR@10")
    assert [[line[m] for m in quality] for line in report.lines] == [
        [line[m] for m in quality] for line in embedded.lines
    ]
    figures = bench_recall(settings, entries=1_200, queries=10)
    assert figures["backend"] == "postgres" and figures["write_per_s"] > 0
    assert figures["hnsw_recall_at_10"] >= 0.9 and figures["exact_vector_p50_ms"] > 0
    with Grandbo.open(settings) as grandbo:
        assert grandbo.orgs() == ["resident"]  # the temporary eval and bench orgs are gone
        with psycopg.connect(url) as conn:
            assert conn.execute(
                "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'entry_vectors_hnsw_%'"
            ).fetchone() == (0,)
