"""Reads of one organization's documents made together (`OrgDocuments.reading`): on Postgres one read-only
transaction of the org for them all, the org set and the schema fence checked once; writes stay out of it, a
read that fails ends it, and a lost connection is read again on a fresh one.

Transactions are counted at psycopg (each `Connection.transaction()` begun on an idle connection, and each statement
that begins one, `store.postgres.begun`), never timed; the
documents read together are converted once the transaction gave its connection back to the pool (seen in the pool's
own counts, and in the order of the connection's return and of what the conversion logs).
"""

from __future__ import annotations

import threading
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import pq
from psycopg_pool import ConnectionPool
from structlog.testing import capture_logs

from grandbo.config import Settings
from grandbo.ports import Document, DocumentWrite
from grandbo.service import Grandbo
from grandbo.tiers.operations import SERVICES, Snapshots
from grandbo.tiers.topology import Service
from tests.conftest import reads_after_the_search, reset_postgres

NOTE = "note"  # a collection recall's facts are not made of


def _recorded(monkeypatch: pytest.MonkeyPatch, *, here: bool) -> list[list[str]]:
    """The transactions begun through psycopg from now on, each as the statements sent in it: this thread's (`here`),
    else the other threads'."""
    begun: list[list[str]] = []
    current: dict[int, list[str]] = {}  # by connection: the statements of its transaction begun last
    thread = threading.get_ident()
    enter, execute = psycopg.Transaction.__enter__, psycopg.Cursor.execute

    def entered(self):  # type: ignore[no-untyped-def]
        idle = self.connection.info.transaction_status == pq.TransactionStatus.IDLE
        if (threading.get_ident() == thread) == here and idle:  # not a savepoint
            begun.append([])
            current[id(self.connection)] = begun[-1]
        return enter(self)

    def executed(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        mine = (threading.get_ident() == thread) == here
        if mine and str(query).startswith("BEGIN; "):  # begun with its first statement (`store.postgres.begun`)
            begun.append([])
            current[id(self.connection)] = begun[-1]
        if mine and id(self.connection) in current and str(query):  # not the pool's check
            current[id(self.connection)].append(str(query))
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Transaction, "__enter__", entered)
    monkeypatch.setattr(psycopg.Cursor, "execute", executed)
    return begun


@pytest.fixture
def transactions(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The transactions this thread begins through psycopg from now on, each as the statements sent in it."""
    return _recorded(monkeypatch, here=True)


@pytest.fixture
def elsewhere(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The transactions other threads begin through psycopg from now on (a recall's helper threads)."""
    return _recorded(monkeypatch, here=False)


def _reads_documents(statements: list[str]) -> bool:
    """Whether a transaction read documents of a collection, or a collection's version (not the feed's marks: the
    org's newest document event)."""
    return any("collection = %s" in sql for sql in statements)


@pytest.fixture
def postgres(pg_database: str, tmp_path: Path) -> Settings:
    """A Postgres store whose org has an entry and each of the facts recall reads: a catalog, weights, an outcome."""
    reset_postgres(pg_database)
    settings = Settings(home=tmp_path, database_url=pg_database)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember({"title": "auth-service sessions dropped after a redis failover", "kind": "finding",
                         "services": ["auth-service"]})  # fmt: skip
        memory.catalog.put([Service(name="auth-service", depends_on=["redis-sessions"])], actor="test")
        memory.org_settings.set_rerank({"similarity": 0.5}, actor="test")
        memory.runbooks.add("RB-1", "fail the sessions over to the replica", ["promote the replica"])
        memory.ledger.record("RB-1", "succeeded", service="auth-service")
    return settings


@pytest.mark.postgres
def test_a_first_recall_reads_the_orgs_facts_in_one_transaction(postgres, transactions):
    """The first recall of an org in a process reads its catalog, weights, calibration and incidents, and the stamps
    of each, in one transaction of their own before the recall's reads together (converted once it is over: no
    pooled connection is held while they become objects); before, each read was a transaction of its own (eight)."""
    with Grandbo.open(postgres) as grandbo:
        memory = grandbo.org("acme")
        transactions.clear()
        result = memory.recall("auth-service sessions dropped after the redis failover", 5)
        recalled = list(transactions)
        transactions.clear()
        again = memory.recall("auth-service sessions dropped after the redis failover", 5)
    assert result.hits and [h.entry.id for h in again.hits] == [h.entry.id for h in result.hits]
    reading = [statements for statements in recalled if _reads_documents(statements)]
    # The facts; then the recall's reads together: its entries and, re-ranking, the results of the candidates'
    # runbooks counted by the store in one statement (`tiers.ledger_source`: the ledger is not read whole).
    assert len(reading) == 2, recalled
    facts, counts = reading
    # One first statement: the org and READ ONLY set, the schema fence read; the facts' stamp read once (each kept
    # collection read it again before); the settings' two documents (weights, calibration) in one statement.
    assert facts[0].count("set_config") == 2 and "max(version) FROM schema_migrations" in facts[0]
    assert sum("set_config" in sql for sql in facts) == 1, facts
    assert sum("SELECT (SELECT epoch FROM orgs" in sql for sql in facts) == 1, facts
    assert len([sql for sql in facts if "doc_id = ANY" in sql]) == 1, facts
    assert not [sql for sql in facts if "AND doc_id = %s" in sql], facts
    assert len(facts) == 5, facts
    # The counts, then the odd outcomes an older release left (on their partial index, read with the model:
    # `ledger_odd`), sent together in one round trip; then the ledger's version after the count (counts made at a
    # known version are kept after an outcome written, `LedgerSource.carried`).
    assert [sql for sql in counts if "entry_id = ANY" in sql], counts
    counted, odd = counts[-2].split("; ")
    assert "GROUP BY" in counted and "ref = ANY" in counted and "FROM orgs" in counts[-1], counts
    assert "ref = ANY" in odd and "outcome_odd" in odd, counts
    assert len(counts) == 4, counts
    assert not any(_reads_documents(statements) for statements in transactions)  # kept: not read again


@pytest.mark.postgres
def test_a_first_recall_from_an_image_reads_the_store_in_two_transactions(postgres, transactions, elsewhere):
    """An org loaded from its image (without its vectors: the store searches them) is recalled in two transactions,
    on a pool of one connection: the index's marks, image and embed jobs' count in one statement, then the facts
    (their stamp read once, the settings' two documents in one statement), converted once it is over; one read-only
    transaction for the entries and the runbooks' counts. Before, three (the facts in one of their own: its BEGIN,
    settings and COMMIT three more round trips), the backlog counted by a statement of its own: 13 statements, now 11;
    six transactions and 39 statements before that. A read of them that did not join would wait for the pool's only
    connection, which the block holds. The vector arm is searched in a third, of its own, on a helper thread, while the
    image and the facts are read (`OrgSearch.ahead`)."""
    topic = "auth-service sessions dropped after the redis failover"
    with Grandbo.open(postgres) as grandbo:
        grandbo._keeper.save_min = 1  # its index saved after its first recall builds it
        built = grandbo.org("acme").recall(topic, 5)
    with Grandbo.open(postgres.model_copy(update={"pg_pool_size": 1})) as grandbo:
        memory = grandbo.org("acme")
        transactions.clear()
        elsewhere.clear()
        loaded = memory.recall(topic, 5)
        recalled = list(transactions)
        assert grandbo._keeper.counts["loaded"] == 1 and grandbo._keeper._indexes["acme"].awaiting is not None
    assert loaded.hits and [h.entry.id for h in loaded.hits] == [h.entry.id for h in built.hits]
    assert len(recalled) == 2, recalled
    feed, reads = recalled
    # One first statement: the org and READ ONLY set, the schema fence read; then the marks, the image's head and the
    # embed jobs' count in one statement (before: in two transactions, the count in the third).
    assert feed[0].count("set_config") == 2 and "max(version) FROM schema_migrations" in feed[0], feed
    assert sum("set_config" in sql for sql in feed) == 1, feed
    assert "JOIN index_images" in feed[1] and "FROM memory_entries" in feed[1] and "FROM embed_outbox" in feed[1], feed
    facts = feed[2:]
    assert len([sql for sql in facts if "SELECT (SELECT epoch FROM orgs" in sql]) == 1, facts
    assert len([sql for sql in facts if "FROM documents" in sql and "doc_id = ANY" in sql]) == 1, facts  # settings
    assert len(facts) == 4, facts
    assert "max(version) FROM schema_migrations" in reads[0] and reads[0].count("set_config") == 2, reads[0]
    assert sum("set_config" in sql for sql in reads) == 1, reads
    assert not [sql for sql in reads if "<=>" in sql or "FROM embed_outbox" in sql], reads
    assert [sql for sql in reads if "GROUP BY" in sql and "outcome_odd" in sql]
    (entries,) = [sql for sql in reads if "entry_id = ANY" in sql]
    assert "content_hash" in entries and "terms" not in entries, entries  # what an Entry is made of, not the index's
    stamps = [sql for sql in reads if "SELECT (SELECT epoch FROM orgs" in sql]
    assert len(stamps) == 1, reads  # the ledger's version after its count
    assert len(reads) == 4, reads  # the odd outcomes' read (`ledger_odd`) sent with the count, in one round trip
    # The vector arm's: its settings (the org, the HNSW scan's) and the schema fence, then the search.
    (vector,) = elsewhere
    assert len(vector) == 2 and vector[0].count("set_config") == 3 and "<=>" in vector[1], vector


@pytest.mark.postgres
def test_a_first_recall_searches_the_vectors_while_it_reads_the_orgs_facts(postgres, monkeypatch):
    """An org's first recall in a process, loaded from its image without its vectors, begins their search in the store
    on a helper thread once the index is made, and the store answers it while the recall reads the org's facts: each
    read of them here waits for that answer. Before, the search was sent after them, and they waited in vain. The
    answer is the same."""
    topic = "auth-service sessions dropped after the redis failover"
    with Grandbo.open(postgres) as grandbo:
        grandbo._keeper.save_min = 1  # its index saved after its first recall builds it
        built = grandbo.org("acme").recall(topic, 5)
    waited = reads_after_the_search(monkeypatch, lambda sql: _reads_documents([sql]))
    with Grandbo.open(postgres) as grandbo:
        loaded = grandbo.org("acme").recall(topic, 5)
        assert grandbo._keeper.counts["loaded"] == 1
    assert waited and all(waited), waited
    assert [(h.entry.id, h.composite) for h in loaded.hits] == [(h.entry.id, h.composite) for h in built.hits]


@pytest.mark.postgres
def test_a_first_recall_s_helper_waits_for_no_connection_while_the_recall_holds_one(postgres, monkeypatch):
    """A first recall's vector search, begun on a helper thread, runs on a pooled connection the recall took for it
    before its own reads: the helper asks the pool for none. Here the pool's only connection, once the recall reads
    the org's facts on it, is held until the helper's search answered (as a recall waiting for its helper holds
    one): it answers. Before, the helper asked the pool (here once the recall held the connection), and waited for
    the one the recall held: with every connection held by a recall waiting for its helper, each waited until the
    pool's timeout (30 s, then a 503); here the recall waited in vain. The answer is the same."""
    topic = "auth-service sessions dropped after the redis failover"
    with Grandbo.open(postgres) as grandbo:
        grandbo._keeper.save_min = 1  # its index saved after its first recall builds it
        built = grandbo.org("acme").recall(topic, 5)
    held, answered, waited, asked = threading.Event(), threading.Event(), [], []
    execute, getconn, thread = psycopg.Cursor.execute, ConnectionPool.getconn, threading.get_ident()

    def executed(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        if threading.get_ident() == thread and _reads_documents([str(query)]) and not waited:
            held.set()  # the recall reads the facts on the pool's only connection
            waited.append(answered.wait(10))
        cursor = execute(self, query, params, **kwargs)
        if "<=>" in str(query):
            answered.set()
        return cursor

    def lent(self, timeout=None):  # type: ignore[no-untyped-def]
        if threading.get_ident() != thread:
            asked.append(threading.current_thread().name)
            held.wait(10)  # another thread asks once the recall holds the connection
        return getconn(self, timeout)

    with Grandbo.open(postgres.model_copy(update={"pg_pool_size": 1})) as grandbo:
        monkeypatch.setattr(psycopg.Cursor, "execute", executed)
        monkeypatch.setattr(ConnectionPool, "getconn", lent)
        loaded = grandbo.org("acme").recall(topic, 5)
        assert grandbo._keeper.counts["loaded"] == 1 and grandbo._keeper._indexes["acme"].awaiting is not None
    assert waited == [True] and not asked, (waited, asked)
    assert [(h.entry.id, h.composite) for h in loaded.hits] == [(h.entry.id, h.composite) for h in built.hits]


@pytest.mark.postgres
def test_first_recalls_of_as_many_orgs_as_pooled_connections_at_once_all_answer(postgres):
    """As many first recalls at once as the pool has connections, each of another org loaded from its image (the
    store searches its vectors, begun on a helper thread while it reads the org's facts), all answer as a process
    that knew the orgs answers them: none waits for the pool's timeout (30 s, then a 503 `overloaded`)."""
    topic = "auth-service sessions dropped after the redis failover"
    names = ["acme", "bolt", "crux"]
    with Grandbo.open(postgres) as grandbo:
        grandbo._keeper.save_min = 1  # each index saved after its first recall builds it
        for name in names[1:]:
            grandbo.org(name, create=True).remember({"title": f"{name}: redis failover dropped the sessions"})
        built = {name: grandbo.org(name).recall(topic, 5) for name in names}
    answers: dict[str, list[tuple[str, float]]] = {}
    with Grandbo.open(postgres.model_copy(update={"pg_pool_size": len(names)})) as grandbo:
        memories, start = {name: grandbo.org(name) for name in names}, threading.Barrier(len(names))

        def recall(name: str) -> None:
            start.wait()
            answers[name] = [(h.entry.id, h.composite) for h in memories[name].recall(topic, 5).hits]

        threads = [threading.Thread(target=recall, args=(name,)) for name in names]
        for each in threads:
            each.start()
        for each in threads:
            each.join()
        assert grandbo._keeper.counts["loaded"] == len(names)
    assert answers == {name: [(h.entry.id, h.composite) for h in built[name].hits] for name in names}


@pytest.mark.postgres
def test_a_first_recall_without_an_image_looks_for_it_once_per_snapshot(postgres, transactions):
    """The marks' statement that found no image is not followed by a read of the image; the snapshot made with the
    vectors then (the index built from the rows) reads it once more, in a transaction of its own."""
    with Grandbo.open(postgres) as grandbo:
        memory = grandbo.org("acme")
        transactions.clear()
        assert memory.recall("auth-service sessions dropped after the redis failover", 5).hits
        assert grandbo._keeper.counts["built"] == 1
    looked = [sum("index_images" in sql for sql in statements) for statements in transactions]
    assert [count for count in looked if count] == [1, 1], transactions


@pytest.mark.postgres
def test_a_read_with_settings_of_its_own_joins_the_reads_together_and_sets_them(postgres, transactions):
    """A read that sets transaction-local settings (the vector search's HNSW ones) joins the org's read transaction
    opened by another read, setting them there; before, it took a transaction (and a pooled connection) of its own."""
    with Grandbo.open(postgres) as grandbo:
        store = grandbo._store
        transactions.clear()
        with store.reading_documents("acme"):
            assert store.documents_stamp("acme", [NOTE])[1] == [0]  # begins the transaction, without them
            with store._tx("acme", join=True, hnsw__ef_search="77") as conn:  # type: ignore[attr-defined]
                assert conn.execute("SELECT current_setting('hnsw.ef_search')").fetchone() == ("77",)
    assert len(transactions) == 1, transactions


@pytest.mark.postgres
def test_a_connection_lost_between_reads_together_is_read_again_on_a_fresh_one(postgres, pg_server):
    with Grandbo.open(postgres) as grandbo:
        documents = grandbo.org("acme")._documents
        with documents.reading():
            assert [d.doc_id for d in documents.find(SERVICES)] == ["auth-service"]
            with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:  # the one left idle in it
                cut = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'grandbo_app' "
                    "AND state = 'idle in transaction' AND datname = %s",
                    (urlsplit(str(postgres.database_url)).path.lstrip("/"),),
                ).fetchall()
            assert cut == [(True,)]
            assert [d.doc_id for d in documents.find(SERVICES)] == ["auth-service"]  # on a fresh connection
            assert documents.get(SERVICES, "auth-service") is not None
        assert documents.stamp([SERVICES])[1][0] > 0  # and after it, as ever


def test_a_write_inside_reads_together_commits_on_its_own(grandbo, raw, backend):
    """Writes are not made part of the read transaction: one within the block is committed when it returns (another
    connection reads it), and a read after it in the block sees it."""
    memory = grandbo.org("acme", create=True)
    documents = memory._documents
    with documents.reading():
        assert documents.find(NOTE) == []
        documents.put([DocumentWrite(NOTE, "n-1", {"text": "written inside"}, "put")], "test")
        outside = raw("SELECT doc_id FROM documents WHERE org_id = %s AND collection = %s", ("acme", NOTE), org="acme")
        assert outside == [("n-1",)]
        assert [d.doc_id for d in documents.find(NOTE)] == ["n-1"]


@pytest.mark.postgres
def test_a_recall_after_an_outcome_needs_no_second_connection(postgres):
    """The outcomes' histories the next snapshot reads (`LedgerSource.carried`) are read in the block's transaction:
    read on a connection of their own, a pool of one (GRANDBO_PG_POOL_SIZE=1) waited for the connection its own
    thread held, and the recall failed 503 (OverloadedError) after the pool's busy wait."""
    with Grandbo.open(postgres.model_copy(update={"pg_pool_size": 1})) as grandbo:
        memory = grandbo.org("acme")
        topic = "auth-service sessions dropped after the redis failover"
        memory.recall(topic, 5, services=["auth-service"])  # the ledger's runbooks counted, not read whole
        memory.ledger.record("RB-1", "failed", service="auth-service")
        assert memory.recall(topic, 5, services=["auth-service"]).hits


@pytest.mark.postgres
def test_a_kept_collection_is_converted_with_its_connection_back_in_the_pool(postgres):
    """The documents are read in the block's transaction and converted once it is over: with a pool of one
    connection, another org's write completes while the conversion runs (before, the reading thread held the pool's
    only connection while Python converted each document, and the write waited for it)."""
    with Grandbo.open(postgres.model_copy(update={"pg_pool_size": 1})) as grandbo:
        grandbo.org("beta", create=True)
        acme, beta = grandbo.org("acme")._documents, grandbo.org("beta")._documents
        pool = grandbo._store._pool  # type: ignore[attr-defined]
        idle: list[int] = []

        def convert(doc: Document) -> str:
            idle.append(pool.get_stats()["pool_available"])  # the pool's one connection, idle in it
            assert idle[-1] == 1, "the reading thread holds the pool's connection while it converts"
            beta.put([DocumentWrite(NOTE, f"during-{doc.doc_id}", {"text": "beta's write"}, "put")], "test")
            return doc.doc_id

        assert Snapshots().kept("acme", acme, SERVICES, convert) == ["auth-service"]
        assert idle == [1] and [d.doc_id for d in beta.find(NOTE)] == ["during-auth-service"]


@pytest.mark.postgres
def test_a_snapshot_is_converted_once_its_transaction_gave_the_connection_back(postgres, monkeypatch):
    """An org's facts (`Snapshots.get`, a first recall's read) are read in one transaction, and the catalog converted
    only once its connection is back in the pool: a service that cannot be read is logged by the conversion, after
    the connection's return, not before."""
    with Grandbo.open(postgres) as grandbo:
        documents = grandbo.org("acme")._documents
        documents.put([DocumentWrite(SERVICES, "unreadable", {"depends_on": 5}, "put")], "test")
        version = documents.version()
        thread, putconn = threading.get_ident(), ConnectionPool.putconn
        with capture_logs() as events:

            def returned(self, conn):  # type: ignore[no-untyped-def]
                if threading.get_ident() == thread:
                    events.append({"event": "pool.returned"})
                return putconn(self, conn)

            monkeypatch.setattr(ConnectionPool, "putconn", returned)
            snapshot = Snapshots().get("acme", documents, version)
        assert [s.name for s in snapshot.topology.services.values()] == ["auth-service"]
        said = [e["event"] for e in events if e["event"] in ("pool.returned", "records.unreadable")]
        assert said == ["pool.returned", "records.unreadable"], said


@pytest.mark.postgres
def test_a_first_recall_converts_the_orgs_facts_holding_no_connection(postgres, monkeypatch):
    """A first recall's facts become objects with no pooled connection held: the reads together that came after
    them held their transaction open while the catalog was converted (a service that cannot be read was logged with
    the recall's connection out of the pool). The connection it lends its vector search (taken by the recall, given
    back by the helper thread that searches) is not the recall's to hold."""
    with Grandbo.open(postgres) as grandbo:
        memory = grandbo.org("acme")
        memory._documents.put([DocumentWrite(SERVICES, "unreadable", {"depends_on": 5}, "put")], "test")
        thread, getconn, putconn = threading.get_ident(), ConnectionPool.getconn, ConnectionPool.putconn
        with capture_logs() as events:

            def taken(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                conn = getconn(self, *args, **kwargs)
                if threading.get_ident() == thread:
                    events.append({"event": "pool.taken", "conn": id(conn)})
                return conn

            def returned(self, conn):  # type: ignore[no-untyped-def]
                here = threading.get_ident() == thread
                events.append({"event": "pool.returned" if here else "pool.returned_elsewhere", "conn": id(conn)})
                return putconn(self, conn)

            monkeypatch.setattr(ConnectionPool, "getconn", taken)
            monkeypatch.setattr(ConnectionPool, "putconn", returned)
            assert memory.recall("auth-service sessions dropped after the redis failover", 5).hits
    out: dict[int, dict[str, object]] = {}  # by connection: its take not given back yet
    for event in events:
        if event["event"] == "pool.taken":
            out[event["conn"]] = event
        elif event["event"] == "pool.returned_elsewhere" and event["conn"] in out:
            out.pop(event["conn"])["event"] = "pool.lent"  # the vector search's, given back by its helper
        elif event["event"] == "pool.returned":
            out.pop(event["conn"], None)
    said = [e["event"] for e in events if e["event"] in ("pool.taken", "pool.returned", "records.unreadable")]
    held = said[: said.index("records.unreadable")]
    assert held.count("pool.taken") == held.count("pool.returned") > 0, said


@pytest.mark.postgres
def test_a_key_not_verified_a_moment_ago_is_read_in_two_transactions(postgres, transactions):
    """A key this process has not verified within GRANDBO_KEY_CACHE_SECONDS (under many orgs served at random, most
    requests' keys) is checked in two transactions: the org's incarnation, then its generation and the key's record
    together (one first statement for both). Before, three: a Postgres server serving 200 orgs at random spent more
    on its requests' keys than on their recalls' index refreshes."""
    with Grandbo.open(postgres) as grandbo:
        keys = grandbo.org("acme").keys
        first, second = keys.create("read", name="first")[1], keys.create("read", name="second")[1]
    with Grandbo.open(postgres) as grandbo:
        grandbo.authenticate(first)  # what a process reads once (the org set, the schema fence)
        transactions.clear()
        memory, record = grandbo.authenticate(second)
        checked = list(transactions)
    assert memory.org == "acme" and record.name == "second"
    assert len(checked) == 2, checked
    incarnation, together = checked
    assert any("SELECT incarnation FROM orgs" in sql for sql in incarnation), incarnation
    assert sum("set_config" in sql for sql in together) == 1, together
    assert any("SELECT (SELECT epoch FROM orgs" in sql for sql in together), together  # the generation
    assert any("FROM documents" in sql for sql in together), together  # the key's record


@pytest.mark.postgres
def test_a_first_recall_s_read_transactions_begin_in_their_first_statement_s_round_trip(
    postgres, transactions, elsewhere, monkeypatch, tmp_path
):
    """A first recall loaded from an image makes one round trip to the server per statement of its two read
    transactions and of its vector search's (on a helper thread), and one per COMMIT: the BEGIN goes in each
    transaction's first statement (`store.postgres.begun`). Before, psycopg sent each BEGIN on its own, a round
    trip more per transaction (of a first recall's 19 round trips, 15 on its thread and 4 on the helper's), each
    a wait for the server's process to be scheduled on a busy machine. Round trips counted in libpq's own trace
    of the connections the recall's thread takes (the helper's is one: `OrgSearch.ahead`), each simple Query and
    each Sync of the extended protocol, never timed; the answer is the same."""
    topic = "auth-service sessions dropped after the redis failover"
    with Grandbo.open(postgres) as grandbo:
        grandbo._keeper.save_min = 1  # its index saved after its first recall builds it
        built = grandbo.org("acme").recall(topic, 5)
    trace, getconn, thread = (tmp_path / "libpq.trace").open("w"), ConnectionPool.getconn, threading.get_ident()
    tracing = [True]

    def taken(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        conn = getconn(self, *args, **kwargs)
        if threading.get_ident() == thread and tracing[0]:
            conn.pgconn.trace(trace.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        return conn

    with Grandbo.open(postgres) as grandbo:
        memory = grandbo.org("acme")
        transactions.clear()
        elsewhere.clear()
        monkeypatch.setattr(ConnectionPool, "getconn", taken)
        loaded = memory.recall(topic, 5)
        tracing[0] = False
        for conn in grandbo._store._pool._pool:  # type: ignore[attr-defined]
            conn.pgconn.untrace()
        assert grandbo._keeper.counts["loaded"] == 1
    trace.close()
    sent = [line.split("\t") for line in (tmp_path / "libpq.trace").read_text().splitlines()]
    round_trips = sum(1 for part in sent if part[0] == "F" and part[2].split()[0] in ("Query", "Sync"))
    searched = [statements for statements in elsewhere if any("<=>" in sql for sql in statements)]
    assert len(transactions) == 2 and len(searched) == 1, (transactions, elsewhere)
    made = [*transactions, *searched]
    assert round_trips == sum(len(statements) + 1 for statements in made), (round_trips, made)
    assert [(h.entry.id, h.composite) for h in loaded.hits] == [(h.entry.id, h.composite) for h in built.hits]
