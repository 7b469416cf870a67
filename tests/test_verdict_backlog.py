"""A backfill under way: with a meaningful share of an organization's memories still waiting for their vector,
the verdict's best cosine is taken over the few that have one, so "no similar past incident" could be said
while the matching memory simply has no vector yet. Recall withholds the verdict then, every face says why,
and finding it out costs no corpus count per recall."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from grandbo.model import PENDING_VERDICT, Arm
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.retrieval.search import OrgSearch
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings, fake_embed_calibration
from tests.serving import serving
from tests.test_console_http import signed_in
from tests.test_embedding_faults import _hosted

TOPIC = "checkout-api connection pool exhausted under a retry storm"
MATCH = {"id": "POOL-1", "title": "checkout-api connection pool exhausted", "body": "a retry storm from clients"}


def unrelated(n: int, start: int = 0) -> list[dict[str, str]]:
    return [{"id": f"DISK-{i}", "title": f"disk {i} full on a batch node", "body": "logs filled the disk"}
            for i in range(start, start + n)]  # fmt: skip


@pytest.fixture
def fake():
    with FakeEmbeddings(dimension=8) as server:
        yield server


@pytest.fixture
def hosted(tmp_path, database_url, fake):
    """The openai provider on the fake server, on the backend under test."""
    return _hosted(tmp_path, fake.url, database_url=database_url)


def test_a_partly_embedded_org_gets_no_verdict_and_every_face_says_why(hosted, fake, capsys):
    from grandbo.cli.memory import _print_recall
    from grandbo.mcp.answers import compact
    from grandbo.tiers.context import WAITING_WORDS

    with Grandbo.init(hosted, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember_many(unrelated(4))
        memory.org_settings.set_calibration(fake_embed_calibration())
        judged = memory.recall(TOPIC, arm=Arm.RERANKED)
        fake.behaviour.status = 503  # an outage: what is written now waits for its vector
        memory.remember(MATCH)
        memory.remember_many(unrelated(5, start=4))
        memory.incidents.open("checkout-api connection pool exhausted again", incident_id="INC-9")
        fake.behaviour.status = 200  # the query embeds again; the backlog is not drained yet
        stats = memory.stats()
        result = memory.recall(TOPIC, arm=Arm.RERANKED)
        block = memory.context(topic=TOPIC)
        plan = memory.triage({"summary": "quokka ledger drift on payouts overnight", "severity": "sev2"})
        key = memory.keys.create("read", name="reader")[1]
        with serving(grandbo) as running:
            page = signed_in(running, key).get("/ui/triage?incident=INC-9").text
    assert judged.seen_before is not None and judged.calibration.startswith("organization")
    assert (stats.total, stats.readable) == (10, 4)
    assert "POOL-1" in [hit.entry.id for hit in result.hits]  # found by its words
    assert any(hit.why.vector for hit in result.hits)  # the vector arm ran over the four that have a vector
    assert result.seen_before is None and result.evidence is None and result.calibration == PENDING_VERDICT
    assert all(hit.label is None for hit in result.hits)
    (note,) = [n for n in result.notes if n.startswith("no seen-before verdict")]
    assert "6 of 10 memories are still waiting for their vector" in note
    assert "grandbo worker" in note and "grandbo backfill" in note
    assert not any(n.startswith("no similar past incident") for n in result.notes)
    assert block.verdict == f"no verdict ({WAITING_WORDS}; matches by both arms)"
    assert "no similar past incident" not in block.recall.lower()
    assert compact(result, "redis").verdict == block.verdict  # MCP's query_org_memory
    assert plan.seen_before is None and plan.no_precedent is not None  # no memory qualifies
    assert "wait for their vector" in plan.no_precedent.reason and "not a verdict" in plan.no_precedent.reason
    _print_recall(result)  # what `grandbo recall` prints
    printed = capsys.readouterr().out
    assert f"answer: no verdict ({WAITING_WORDS}" in printed and "NO SIMILAR PAST INCIDENT" not in printed
    assert "No verdict (memories still being embedded)" in page and WAITING_WORDS in page
    assert "6 of 10 memories are still waiting" in page and "No similar past incident" not in page

    with Grandbo.open(hosted) as up:  # `grandbo backfill`, as another process runs it
        assert up.backfill().embedded == 6
        after = up.org("acme").recall(TOPIC, arm=Arm.RERANKED)
    assert after.seen_before is not None and after.calibration.startswith("organization")


def test_the_verdict_is_withheld_from_a_tenth_of_the_memories_waiting(hosted, fake):
    """One memory in flight among twenty keeps the verdict; once a tenth or more wait, it is withheld."""
    with Grandbo.init(hosted, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember_many(unrelated(18))
        memory.org_settings.set_calibration(fake_embed_calibration())
        fake.behaviour.status = 503
        memory.remember(MATCH)
        fake.behaviour.status = 200
        one_waiting = memory.recall(TOPIC, arm=Arm.RERANKED)  # 1 of 19
        fake.behaviour.status = 503
        memory.remember_many(unrelated(2, start=18))
        fake.behaviour.status = 200
        three_waiting = memory.recall(TOPIC, arm=Arm.RERANKED)  # 3 of 21
    max_waiting = DEFAULT_POLICY.verdict.max_waiting
    assert max_waiting == 0.10 and 1 / 19 < max_waiting <= 3 / 21
    assert one_waiting.seen_before is not None and one_waiting.calibration.startswith("organization")
    assert three_waiting.seen_before is None and three_waiting.calibration == PENDING_VERDICT
    assert any("3 of 21 memories are still waiting" in note for note in three_waiting.notes)


def _jobs_counted(monkeypatch: pytest.MonkeyPatch, counted: list[str]) -> None:
    """A "jobs" in `counted` for each statement that counts the org's embed jobs: the store's count of them
    (`embed_backlog`), or the one an org's first read makes with its marks and image (`FeedMixin.snapshot`)."""
    execute, alone = psycopg.Cursor.execute, "SELECT count(*) FROM embed_outbox WHERE org_id = %s"

    def executed(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        if str(query) == alone or "(SELECT count(*) FROM embed_outbox WHERE org_id = %(org)s)" in str(query):
            counted.append("jobs")
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", executed)


def test_whether_too_many_memories_wait_is_no_corpus_count_per_recall(grandbo, monkeypatch, backend):
    """Recall latency is a product number: the in-process index knows its own counts, and where the store
    searches vectors (a Postgres org with its HNSW index) its count of the embed jobs is read again only when
    the answer may change."""
    from tests.test_recall import INCIDENTS

    memory = grandbo.org("acme", create=True)
    memory.remember_many([*INCIDENTS, *unrelated(40)], strict=True)
    store, counted = grandbo._store, []
    real_stats = store.corpus_stats
    monkeypatch.setattr(store, "corpus_stats", lambda *args: counted.append("stats") or real_stats(*args))
    if backend == "postgres":
        store.hnsw_threshold = 10
        assert store.ensure_vector_index("acme")  # pgvector searches the org's vectors from now on
        _jobs_counted(monkeypatch, counted)
    topic = "Redis connection reset during key eviction spike; auth-service latency > 1200ms"
    first = [memory.recall(topic).seen_before for _ in range(3)]
    memory.remember_many(unrelated(2, start=40), strict=True)  # 0 jobs + 2 events since < a tenth of 45
    then = [memory.recall(topic).seen_before for _ in range(3)]
    memory.remember_many(unrelated(5, start=42), strict=True)  # 0 + 7 events >= a tenth of 50: counted again
    last = memory.recall(topic).seen_before
    assert None not in [*first, *then, last]
    assert counted == ([] if backend == "sqlite" else ["jobs", "jobs"])


NONSENSE = "quokka ledger drift on payouts overnight"  # no memory's words


def test_an_empty_answer_says_what_waits_for_a_vector_without_counting_the_corpus(hosted, fake, backend, monkeypatch):
    """An empty answer explained itself with the org's corpus stats, a join of every active entry with its vector
    (0.4-1.7 s of the shared database at 150,000 entries on SQLite): any read key's nonsense topics cost a corpus
    count each. The index knows the total and the vectors it holds; the store counts only the org's embed jobs."""
    with Grandbo.init(hosted, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        store, counted = grandbo._store, []
        real_stats = store.corpus_stats
        monkeypatch.setattr(store, "corpus_stats", lambda *args: counted.append(args) or real_stats(*args))
        empty = memory.recall(NONSENSE, arm=Arm.LEXICAL)
        memory.remember_many(unrelated(4))
        fake.behaviour.zero_for = {"blank"}  # its text has no vector: settled, never retried
        memory.remember({"id": "BLANK-1", "title": "blank page printed", "body": "blank"})
        fake.behaviour.status = 503  # an outage: what is written now waits for its vector
        memory.remember_many(unrelated(3, start=4))
        fake.behaviour.status = 200
        waiting = [memory.recall(NONSENSE, arm=Arm.LEXICAL)]  # (the fake's vectors are near any topic's)
        if backend == "postgres":
            store.hnsw_threshold = 1
            assert store.ensure_vector_index("acme")  # pgvector searches the org's vectors from now on
            waiting.append(memory.recall(NONSENSE, arm=Arm.LEXICAL))
        with Grandbo.open(hosted) as up:  # `grandbo backfill`, as another process runs it
            assert up.backfill().embedded == 3
        done = memory.recall(NONSENSE, arm=Arm.LEXICAL)
        assert counted == []
        stats = memory.stats()
    assert empty.hits == [] and empty.notes == ["this organization has no memories yet"]
    assert (stats.total, stats.readable, stats.unembeddable) == (8, 7, 1)
    for result in waiting:
        assert result.hits == []
        assert "no match among 8 entries; 3 of 8 entries have no vector yet: run `grandbo backfill`" in result.notes
    assert done.hits == [] and any(
        n.startswith("no match among 8 entries; nothing matched closely") for n in done.notes
    )


def test_empty_answers_over_a_backlog_read_no_queued_job_each(hosted, fake, backend, monkeypatch):
    """An empty answer's note counted every embed job of the org, filtered by `attempts` (no index holds it): a
    read of each queued job's row per answer, 10-26 ms at 50,000 jobs. Where the index holds the vectors, the store
    now seeks only the settled unembeddable jobs; where the store searches them, a count of a large backlog stands
    for a few seconds (`OrgSearch.KEPT_BACKLOG`, set low here)."""
    monkeypatch.setattr(OrgSearch, "KEPT_BACKLOG", 3)
    with Grandbo.init(hosted, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        store, counted = grandbo._store, []
        memory.remember_many(unrelated(4))
        fake.behaviour.status = 503  # an outage: what is written now waits for its vector
        memory.remember_many(unrelated(5, start=4))
        fake.behaviour.status = 200
        if backend == "postgres":
            store.hnsw_threshold = 1
            assert store.ensure_vector_index("acme")  # pgvector searches the org's vectors from now on
            _jobs_counted(monkeypatch, counted)
        answers = [memory.recall(NONSENSE, arm=Arm.LEXICAL) for _ in range(3)]
    for result in answers:
        assert result.hits == []
        assert "no match among 9 entries; 5 of 9 entries have no vector yet: run `grandbo backfill`" in result.notes
    assert counted == ([] if backend == "sqlite" else ["jobs"])


def test_the_unembeddable_jobs_an_empty_answer_counts_are_sought_by_an_index(grandbo, backend, settings):
    """Migration 28: the settled jobs alone, not every queued job's row (the statement the store runs)."""
    statement = "SELECT count(*) FROM embed_outbox WHERE org_id = {p} AND attempts = 2000000"
    grandbo.org("acme", create=True).remember_many(unrelated(50))
    if backend == "sqlite":
        with sqlite3.connect(settings.home / "grandbo.db") as db:
            plan = " ".join(str(s[-1]) for s in db.execute("EXPLAIN QUERY PLAN " + statement.format(p="?"), ("acme",)))
        db.close()
    else:
        with psycopg.connect(settings.database_url) as conn:  # as the runtime role, under row-level security
            conn.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
            conn.execute("SET enable_seqscan = off")  # the outbox is empty here: whether an index serves it
            plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + statement.format(p="%s"), ("acme",)))
    # (migration 34's index of every job by its attempts, which the corpus counts read, serves it as well)
    assert "embed_outbox_unembeddable" in plan or "embed_outbox_by_attempts" in plan, plan
    from grandbo.store.sql.unembeddable import COUNT

    assert statement == COUNT
