"""An org's first recall in a process on Postgres, loaded from its index image without its vectors: the topic is
embedded and its vector searched by the store on a helper thread, begun before the image is read
(`OrgSearch.ahead`), on a pooled connection the recall lends it (`VectorSearch.lend_search`), which comes back
whatever happens; a statement's error there is the recall's, a lost connection is searched again. Connections are
lent without a round trip while the server has said nothing on them (`reach.check`).

Statements and connections are observed at psycopg and the pool, never timed; the server's own sessions
(`pg_stat_activity`) show what waits.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from grandbo.config import Settings
from grandbo.embeddings.base import space_of
from grandbo.errors import StoreUnavailableError
from grandbo.retrieval.arms import helpers
from grandbo.service import Grandbo
from tests.conftest import reads_after_the_search, reset_postgres

TOPIC = "auth-service sessions dropped after the redis failover"
pytestmark = pytest.mark.postgres


@pytest.fixture
def saved(pg_database: str, tmp_path: Path) -> Settings:
    """A Postgres store whose org has a few memories and its index image saved (with its vectors: the store searches
    them at the org's first recall of a process)."""
    reset_postgres(pg_database)
    settings = Settings(home=tmp_path, database_url=pg_database)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo._keeper.save_min = 1  # its index saved after its first recall builds it
        memory = grandbo.org("acme", create=True)
        for title in ("auth-service sessions dropped after a redis failover", "redis failover left stale sessions",
                      "checkout latency after a deploy"):  # fmt: skip
            memory.remember({"title": title, "kind": "finding", "services": ["auth-service"]})
        memory.recall(TOPIC, 5)
    return settings


def _answer(settings: Settings) -> list[tuple[str, float]]:
    """The org's recall of `TOPIC` as a process that keeps its index (with its vectors) answers it."""
    with Grandbo.open(settings) as grandbo:
        memory = grandbo.org("acme")
        memory.recall(TOPIC, 5)
        memory.recall(TOPIC, 5)  # a later read: the org's vectors are fetched
        grandbo._keeper.settle()  # and searched in process from now on
        assert grandbo._keeper._indexes["acme"].space is not None
        return [(h.entry.id, h.composite) for h in memory.recall(TOPIC, 5).hits]


def test_the_vector_search_is_answered_before_the_image_is_read(saved, monkeypatch):
    """The first recall's vector search begins before the org's view is made: the store answers it while the recall
    reads the image. Here the image's read waits for that answer; before, the search began once the view was made,
    and the image's read waited in vain. The answer is the same as in process."""
    expected = _answer(saved)
    waited = reads_after_the_search(monkeypatch, lambda sql: "JOIN index_images" in sql)
    with Grandbo.open(saved) as grandbo:
        loaded = grandbo.org("acme").recall(TOPIC, 5)
        assert grandbo._keeper.counts["loaded"] == 1
    assert waited == [True], waited
    assert [(h.entry.id, h.composite) for h in loaded.hits] == expected


def test_a_connection_lent_again_sends_no_statement_to_check_it(saved, monkeypatch):
    """A pooled connection the server has said nothing on is lent without a round trip: an org's first recall sends
    no empty statement. Before, each connection lent sent one and waited for it (four in a first recall)."""
    sent, execute = [], psycopg.Cursor.execute

    def executed(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(str(query))
        return execute(self, query, params, **kwargs)

    with Grandbo.open(saved) as grandbo:
        monkeypatch.setattr(psycopg.Cursor, "execute", executed)
        assert grandbo.org("acme").recall(TOPIC, 5).hits
    assert any("<=>" in sql for sql in sent) and "" not in sent, sent


def test_a_connection_the_server_closed_is_still_replaced_before_it_is_lent(saved, pg_server):
    """A connection the server ended (`pg_terminate_backend`, as a restart does) is found by the pool's check and
    replaced: the reads after it are answered, none retried."""
    with Grandbo.open(saved.model_copy(update={"pg_pool_size": 1})) as grandbo:
        memory = grandbo.org("acme")
        assert memory.recall(TOPIC, 5).hits
        with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'grandbo_app'")
        time.sleep(0.2)  # the server's word reaches the idle connection's socket
        with pytest.MonkeyPatch.context() as patch:
            lost: list[str] = []
            retrying = grandbo._store._retrying  # type: ignore[attr-defined]
            patch.setattr(grandbo._store, "_retrying", lambda read: retrying(lambda: _noted(read, lost)))
            assert [h.entry.id for h in memory.recall(TOPIC, 5).hits]
        assert not lost, lost


def _noted(read, lost):  # type: ignore[no-untyped-def]
    try:
        return read()
    except psycopg.OperationalError as error:
        lost.append(str(error))
        raise


def test_a_lent_search_gives_its_connection_back_once(saved):
    """The connection lent for a search comes back by the first of its search and its close; a later call finds
    none (the search answers None: search by `vector_search`). On a pool of one, each read after it is answered."""
    with Grandbo.open(saved.model_copy(update={"pg_pool_size": 1})) as grandbo:
        store, provider = grandbo._store, grandbo.provider()
        space, vector = space_of(provider), provider.embed([TOPIC], "query")[0]
        lent = store.lend_search("acme")  # type: ignore[attr-defined]
        lent.close()
        lent.close()
        assert lent.search(space, vector, 5, 0.0) is None
        found = store.vector_search("acme", space, vector, 5, 0.0)  # type: ignore[attr-defined]
        lent = store.lend_search("acme")  # type: ignore[attr-defined]
        assert lent.search(space, vector, 5, 0.0) == found and found
        lent.close()
        assert lent.search(space, vector, 5, 0.0) is None
        assert store.vector_search("acme", space, vector, 5, 0.0) == found  # type: ignore[attr-defined]


def _blocked_search(pg_server, pg_database: str, then: str, held: threading.Event) -> list[str]:  # type: ignore[no-untyped-def]
    """Hold the org's vectors locked (`held` set then) until the recall's vector search waits for them, then `then`
    its backend (a cancel or a termination), and let the lock go; ["waited"] if it did."""
    database = pg_database.rsplit("/", 1)[1]
    with psycopg.connect(pg_server.url(database)) as holder, psycopg.connect(pg_server.admin_url, autocommit=True) as a:
        holder.execute("LOCK TABLE entry_vectors IN ACCESS EXCLUSIVE MODE")
        held.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            waiting = a.execute(
                "SELECT pid FROM pg_stat_activity WHERE usename = 'grandbo_app' AND wait_event_type = 'Lock' "
                "AND query LIKE '%%<=>%%'"
            ).fetchall()
            if waiting:
                a.execute(f"SELECT {then}(%s)", (waiting[0][0],))
                return ["waited"]
            time.sleep(0.02)
    return []


@pytest.mark.parametrize("then", ["pg_cancel_backend", "pg_terminate_backend"])
def test_a_statement_error_of_the_lent_search_is_the_recalls_and_a_lost_connection_is_searched_again(
    saved, pg_server, pg_database, then
):
    """A first recall's vector search cancelled on a connection that still works fails the recall with its error,
    searched once: searched again, it would fail again (a timeout, an operator's cancel). Before, it was taken for
    a lost connection and sent again. A search whose connection was lost (terminated) is searched again on another,
    and answers as in process."""
    expected = _answer(saved)
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def executed(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        if str(query).startswith("SELECT entry_id, distance"):  # the vector arm's
            sent.append(str(query))
        return execute(self, query, params, **kwargs)

    with Grandbo.open(saved) as grandbo, pytest.MonkeyPatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", executed)
        memory, outcome, held = grandbo.org("acme"), [], threading.Event()
        blocker = threading.Thread(target=lambda: outcome.extend(_blocked_search(pg_server, pg_database, then, held)))
        blocker.start()
        assert held.wait(10)
        try:
            if then == "pg_cancel_backend":
                with pytest.raises(StoreUnavailableError) as ended:  # a 503 with its remedy, as a warm recall's
                    memory.recall(TOPIC, 5)
                assert isinstance(ended.value.__cause__, psycopg.errors.QueryCanceled)
            else:
                assert [(h.entry.id, h.composite) for h in memory.recall(TOPIC, 5).hits] == expected
        finally:
            blocker.join()
        assert outcome == ["waited"]
        assert len(sent) == (1 if then == "pg_cancel_backend" else 2), sent
        assert memory.recall(TOPIC, 5).hits  # the pool's connections came back


def test_a_first_recall_that_builds_the_index_gives_the_lent_connection_back(pg_database, tmp_path):
    """An org with no image is built with its vectors at its first recall (searched in process): the search begun
    before its view is let go, and its connection comes back to a pool of one, whose next reads are answered."""
    reset_postgres(pg_database)
    settings = Settings(home=tmp_path, database_url=pg_database)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).remember({"title": "auth-service sessions dropped after a redis failover"})
    with Grandbo.open(settings.model_copy(update={"pg_pool_size": 1})) as grandbo:
        memory = grandbo.org("acme")
        assert memory.recall(TOPIC, 5).hits
        assert grandbo._keeper.counts["built"] == 1 and grandbo._keeper._indexes["acme"].space is not None
        pool: ConnectionPool = grandbo._store._pool  # type: ignore[attr-defined]
        deadline = time.monotonic() + 10
        while pool.get_stats()["pool_available"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # the helper's search, if it took the connection, gives it back as it ends
        assert pool.get_stats()["pool_available"] == 1
        assert memory.recall(TOPIC, 5).hits


def test_a_search_still_queued_behind_other_helper_tasks_is_run_by_the_recall(saved):
    """With every helper thread busy (a busy server), the first recall's embedding and search, still queued, run on
    the recall's own thread, once, on the connection lent for them: it answers as in process, and again."""
    expected = _answer(saved)
    release = threading.Event()
    busy = [helpers.submit(release.wait, 10) for _ in range(max(2, os.cpu_count() or 2))]
    try:
        with Grandbo.open(saved.model_copy(update={"pg_pool_size": 1})) as grandbo:
            memory = grandbo.org("acme")
            assert [(h.entry.id, h.composite) for h in memory.recall(TOPIC, 5).hits] == expected
            assert grandbo._keeper.counts["loaded"] == 1
            assert [(h.entry.id, h.composite) for h in memory.recall(TOPIC, 5).hits] == expected
    finally:
        release.set()
        for each in busy:
            each.result()


def test_a_connection_on_a_descriptor_past_1024_is_checked_and_lent(saved, pg_server):
    """A server holds thousands of client sockets (`api.connections.open_files` raises its limit), so its pooled
    connections get descriptors past 1,024, where `select()` cannot look: each check raised ValueError, the pool
    retried it until its timeout, and every org's reads failed. Checked by poll(), they are lent."""
    import resource

    from grandbo.store.postgres.reach import check

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"open files hard limit {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    filler = []
    try:
        while (fd := os.open(os.devnull, os.O_RDONLY)) < 1030:
            filler.append(fd)
        os.close(fd)
        with psycopg.connect(saved.database_url, autocommit=True) as conn:
            assert conn.fileno() >= 1024
            check(conn)  # nothing said on it: lent without a statement
            with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
            time.sleep(0.2)  # the server's word reaches the socket
            with pytest.raises(psycopg.OperationalError):  # seen, and the connection replaced
                check(conn)
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_provider_slow_to_embed_the_topic_holds_no_pooled_connection_nor_helper(pg_database, tmp_path):
    """A first recall's topic is embedded on the recall's own thread, and the connection for its search is lent
    once the vector is in: a hosted provider slow to answer held, before (review 29), one of the helpers every
    recall of the process shares and a pooled connection, so on a pool of one another org's reads waited for the
    provider. Here they are answered while the provider holds the topic."""
    from tests.fakes import FakeEmbeddings

    reset_postgres(pg_database)
    with FakeEmbeddings(dimension=8) as fake:
        settings = Settings(home=tmp_path, database_url=pg_database, openai_base_url=fake.url,
                            openai_model="fake-embed", openai_dimension=8, openai_api_key="test-key",
                            vector_min_similarity=-1.0)  # fmt: skip
        with Grandbo.init(settings, embedding="openai") as grandbo:
            grandbo._keeper.save_min = 1
            grandbo.org("beta", create=True).remember({"title": "beta's own finding", "kind": "finding"})
            memory = grandbo.org("acme", create=True)
            memory.remember({"title": "auth-service sessions dropped", "kind": "finding"})
            assert memory.recall(TOPIC, 5).hits  # its image saved, with its vectors
        fake.behaviour.hold, fake.behaviour.hold_for = threading.Event(), {TOPIC}
        with Grandbo.open(settings.model_copy(update={"pg_pool_size": 1})) as grandbo:
            answered: list[int] = []
            recalling = threading.Thread(target=lambda: answered.append(len(grandbo.org("acme").recall(TOPIC, 5).hits)))
            recalling.start()
            try:
                deadline = time.monotonic() + 10
                while not any(TOPIC in str(r["body"]) for r in fake.behaviour.requests) and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert any(TOPIC in str(r["body"]) for r in fake.behaviour.requests)  # the provider holds the topic
                assert grandbo.org("beta").stats().total == 1  # the pool's one connection is free meanwhile
            finally:
                fake.behaviour.hold.set()
                recalling.join()
            assert answered == [1]
