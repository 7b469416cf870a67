"""The read seam: hybrid recall, its explanations, single arms, slicing after fusion, honesty."""

import pytest
import structlog

from grandbo.errors import InvalidInputError, InvalidTopicError
from grandbo.model import Arm
from tests.serving import BOUND

INCIDENTS = [
    {
        "id": "INC-044-F1",
        "title": "Eviction storm on redis-sessions",
        "kind": "finding",
        "body": "maxmemory reached; keys evicted under allkeys-lru; auth-service p99 above 1200ms.",
        "tags": ["INC-044", "maxmemory-policy"],
        "services": ["redis-sessions", "auth-service"],
        "severity": "sev2",
    },
    {
        "id": "INC-012-F1",
        "title": "Redis network partition",
        "kind": "finding",
        "body": "Connection reset between auth-service and redis-sessions after a switch failure; ERR_CONN_RESET.",
        "tags": ["INC-012", "ERR_CONN_RESET"],
        "services": ["redis-sessions"],
        "severity": "sev1",
    },
    {
        "id": "INC-090-F1",
        "title": "Kafka consumer lag on orders",
        "kind": "finding",
        "body": "Consumer group rebalanced in a loop after a broker upgrade; lag grew to two hours.",
        "tags": ["INC-090"],
        "services": ["kafka-events"],
        "severity": "sev3",
    },
]


@pytest.fixture
def seeded(memory):
    memory.remember_many(INCIDENTS, strict=True)
    return memory


def test_hybrid_hit_explains_both_arms_and_the_fused_score(seeded):
    result = seeded.recall(
        "Redis connection reset during key eviction spike; auth-service latency > 1200ms", k=3, arm="hybrid"
    )
    top = result.hits[0]
    assert top.why.method == "rrf" and top.why.rrf_k == 60
    assert top.why.lexical is not None and top.why.vector is not None
    expected = 1 / (60 + top.why.lexical.rank) + 1 / (60 + top.why.vector.rank)
    assert top.score == pytest.approx(expected) == pytest.approx(top.why.fused)
    assert sum(top.why.lexical.terms.values()) == pytest.approx(top.why.lexical.score)
    assert top.why.vector.distance == pytest.approx(1 - top.why.vector.similarity)
    assert [hit.rank for hit in result.hits] == list(range(1, len(result.hits) + 1))
    assert result.timings.total_ms > 0


def test_hybrid_is_the_fusion_of_the_two_arms_run_at_once(seeded):
    """Hybrid recall runs the lexical arm on a helper thread beside the vector arm; its answer is the RRF of
    what each arm answers alone (here every lexical match clears the floor), and each arm's own time is
    reported."""
    topic = "Redis connection reset during key eviction spike; auth-service latency > 1200ms"
    lexical = [hit.entry.id for hit in seeded.recall(topic, k=25, arm="lexical").hits]
    vector = [hit.entry.id for hit in seeded.recall(topic, k=25, arm="vector").hits]
    fused = {}
    for ranking in (lexical, vector):
        for rank, entry_id in enumerate(ranking, start=1):
            fused[entry_id] = fused.get(entry_id, 0.0) + 1 / (60 + rank)
    for _ in range(20):  # the same answer every time
        result = seeded.recall(topic, k=25, arm="hybrid")
        assert [(hit.entry.id, hit.sort_score) for hit in result.hits] == sorted(
            fused.items(), key=lambda item: -item[1]
        )
        assert result.timings.lexical_ms > 0 and result.timings.vector_ms > 0


def test_the_lexical_arm_alone_keeps_the_matches_the_fusion_floors(settings):
    """Beside the vector arm a lexical match must clear the evidence floor; asked alone there is no vector
    answer to drown, so a long topic's one-word match is still ranked (the floor dropped it before)."""
    from grandbo import Grandbo

    topic = (
        "During the evening peak the warehouse scanners froze, drivers waited at depots, the dispatch board "
        "showed stale parcels and the broker restarted twice"
    )
    every_vector = settings.model_copy(update={"vector_min_similarity": -1.0})  # the vector arm ranks all three
    with Grandbo.init(every_vector, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember_many(INCIDENTS, strict=True)
        alone = memory.recall(topic, k=10, arm="lexical")
        hybrid = memory.recall(topic, k=10, arm="hybrid")
    assert [hit.entry.id for hit in alone.hits] == ["INC-090-F1"]  # "broker" alone: under the floor
    assert alone.hits[0].why.lexical.terms == {"broker": pytest.approx(alone.hits[0].why.lexical.score)}
    assert sorted(hit.entry.id for hit in hybrid.hits) == sorted(i["id"] for i in INCIDENTS)
    assert all(hit.why.lexical is None and hit.why.vector is not None for hit in hybrid.hits)  # floored out


def test_the_helper_thread_logs_with_the_callers_bound_context(seeded, monkeypatch, backend):
    import threading

    from grandbo.retrieval import arms, lexical
    from grandbo.retrieval.search import OrgSearch

    seen, begun = [], threading.Event()
    search, vector = lexical.LexicalIndex.top, OrgSearch.vector

    def logged(self, *args, **kwargs):  # the real search, observed: which thread, and what context?
        seen.append((threading.current_thread().name, structlog.contextvars.get_contextvars().get("request_id")))
        begun.set()
        return search(self, *args, **kwargs)

    def after_the_helper_began(self, *args, **kwargs):  # a beside still queued when this ends runs on the caller
        begun.wait(10)
        return vector(self, *args, **kwargs)

    for _ in range(2):  # on Postgres the vectors a first read leaves to pgvector are fetched after a second
        seeded.recall("Redis connection reset during key eviction spike", arm="hybrid")
    seeded._search._keeper.settle()
    monkeypatch.setattr(lexical.LexicalIndex, "top", logged)
    monkeypatch.setattr(OrgSearch, "vector", after_the_helper_began)
    monkeypatch.setattr(arms.handoff, "seconds", {})  # nothing measured yet: at once first
    monkeypatch.setattr(arms.handoff, "count", {})
    with structlog.contextvars.bound_contextvars(request_id="req-7"):
        seeded.recall("Redis connection reset during key eviction spike", arm="hybrid")
    [(thread, request_id)] = seen
    assert request_id == "req-7"
    assert thread.startswith("grandbo-recall")  # both arms at once: the vector arm computes in process on both


def test_a_forked_child_recalls_with_helper_threads_of_its_own(seeded, settings):
    import multiprocessing

    topic = "Redis connection reset during key eviction spike"
    expected = [hit.entry.id for hit in seeded.recall(topic, arm="hybrid").hits]  # the parent's helpers exist now
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_recall_in_child, args=(settings, topic, send), daemon=True)
    child.start()
    send.close()  # the child's copy stays open: a child that dies closes it, and poll returns at once
    try:
        assert receive.poll(60), "the forked child gave no answer"
        assert receive.recv() == expected
        child.join(10)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)


def _recall_in_child(settings, topic, send):
    from grandbo.service import Grandbo

    with Grandbo.open(settings) as grandbo:
        send.send([hit.entry.id for hit in grandbo.org("acme", create=True).recall(topic, arm="hybrid").hits])


def test_exact_identifier_finds_its_entry_first(seeded):
    result = seeded.recall("have we seen ERR_CONN_RESET between services before", k=3)
    assert result.hits[0].entry.id == "INC-012-F1"
    assert "err_conn_reset" in result.hits[0].why.lexical.terms


def test_single_arms_score_with_their_own_scale(seeded):
    lexical = seeded.recall("consumer lag after broker upgrade", arm=Arm.LEXICAL)
    vector = seeded.recall("consumer lag after broker upgrade", arm="vector")
    assert lexical.hits[0].score == lexical.hits[0].why.lexical.score and lexical.hits[0].why.vector is None
    assert vector.hits[0].score == vector.hits[0].why.vector.similarity and vector.hits[0].why.lexical is None


def test_k_slices_after_fusion_not_before(memory, settings):
    # 30 entries match lexically; k=2 must still be the two best of the fused list of both arms' top 25.
    memory.remember_many(
        [{"title": f"disk full on node {n}", "body": f"disk full alert number {n}"} for n in range(30)]
    )
    full = memory.recall("disk full alert on a node", k=40)
    assert 25 <= len(full.hits) <= 50  # each arm returns at most 25; fusion keeps their union
    two = memory.recall("disk full alert on a node", k=2)
    assert [h.entry.id for h in two.hits] == [h.entry.id for h in full.hits[:2]]


def test_retired_and_superseded_entries_leave_recall(seeded):
    topic = "kafka consumer group rebalancing in a loop"
    assert seeded.recall(topic).hits[0].entry.id == "INC-090-F1"
    fixed = seeded.correct("INC-090-F1", {"body": "Consumer group rebalanced because of a session timeout."})
    ids = [hit.entry.id for hit in seeded.recall(topic).hits]
    assert "INC-090-F1" not in ids and fixed.id in ids
    seeded.retire(fixed.id)
    assert fixed.id not in [hit.entry.id for hit in seeded.recall(topic).hits]


def test_slug_topics_are_refused(seeded):
    with pytest.raises(InvalidTopicError, match="Describe the problem"):
        seeded.recall("redis-sessions")


@pytest.mark.parametrize("k", [0, 101])
def test_k_out_of_range_is_refused(seeded, k):
    with pytest.raises(InvalidInputError, match="between 1 and 100"):
        seeded.recall("redis connection reset on auth", k=k)


def test_empty_result_over_a_non_empty_corpus_is_logged_with_count_and_remedy(seeded):
    with structlog.testing.capture_logs() as logs:
        result = seeded.recall("quantum flux capacitor misaligned entirely", k=5)
    assert result.hits == []
    assert any("no match among 3 entries" in note for note in result.notes)
    event = next(log for log in logs if log["event"] == "recall.empty_result")
    assert event["total"] == 3 and "remedy" in event


def test_empty_org_says_it_is_empty(memory):
    result = memory.recall("anything at all here")
    assert result.hits == [] and result.notes == ["this organization has no memories yet"]


def test_recall_still_answers_while_the_interpreter_shuts_down(tmp_path):
    """At exit no new thread may start: the lexical arm then runs in the caller's thread instead."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import atexit
        from grandbo import Grandbo, Settings

        grandbo = Grandbo.init(Settings(home={str(tmp_path)!r}), embedding="deterministic")
        memory = grandbo.org("acme", create=True)
        memory.remember({{"id": "e1", "title": "redis evicted session keys under memory pressure"}})

        def at_exit():
            hits = memory.recall("redis evicted session keys under pressure", arm="hybrid").hits
            print("hits", [hit.entry.id for hit in hits], bool(hits[0].why.lexical), bool(hits[0].why.vector))
            grandbo.close()

        atexit.register(at_exit)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hits ['e1'] True True"


def test_an_identifier_alone_gets_an_exact_lookup_and_a_slug_is_still_refused(memory):
    from grandbo.errors import InvalidTopicError

    memory.catalog.import_text("services:\n  - name: checkout-api\n    depends_on: []\n", actor="t")
    memory.remember_many(
        [
            {"id": "A1", "title": "payments resets", "body": "clients saw ERR_CONN_RESET from the gateway"},
            {"id": "A2", "title": "connection reset storm", "body": "err conn reset words, no identifier"},
            {"id": "A3", "title": "INC-044 eviction storm", "body": "see checkout-api runbook"},
        ]
    )
    result = memory.recall("ERR_CONN_RESET", 5)
    assert result.lookup == "identifier" and [h.entry.id for h in result.hits] == ["A1"]
    assert result.hits[0].why.method == "identifier" and result.hits[0].why.vector is None
    assert "exact-identifier lookup" in result.notes[0]
    assert [h.entry.id for h in memory.recall("INC-044", 5).hits] == ["A3"]
    assert [h.entry.id for h in memory.recall("checkout-api", 5).hits] == ["A3"]  # a catalog service
    assert memory.recall("  OOMKilled ", 5).hits == [] and memory.recall("OOMKilled", 5).lookup == "identifier"
    for slug in ("redis-timeout", "connection"):
        with pytest.raises(InvalidTopicError):
            memory.recall(slug, 5)
    assert memory.recall("payments gateway resets connections", 5).lookup is None


def test_a_recall_whose_vector_arm_finds_nothing_reads_no_corpus_count(settings, monkeypatch):
    """Whether any vector was searched decides the verdict; it was the corpus count (70 ms at 20,000 entries
    on either backend, four to seventeen times the recall) on every recall whose vector arm found nothing. The
    in-process index knows its own count, and pgvector's store answers one probe."""
    from grandbo import Grandbo
    from grandbo.model import NO_VECTOR_VERDICT

    nothing_close = settings.model_copy(update={"vector_min_similarity": 0.9999})
    with Grandbo.init(nothing_close, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember_many(INCIDENTS, strict=True)
        counted = []
        real = grandbo._store.corpus_stats
        monkeypatch.setattr(grandbo._store, "corpus_stats", lambda *args: counted.append(args) or real(*args))
        result = memory.recall("Redis connection reset during key eviction spike; auth-service latency > 1200ms")
    assert result.hits and all(hit.why.vector is None for hit in result.hits)  # the vector arm found nothing
    assert result.calibration != NO_VECTOR_VERDICT  # there were vectors: the verdict is judged
    assert counted == []


def test_the_verdicts_backlog_check_does_not_wait_for_another_recalls_vector_search(seeded):
    """Every re-ranked recall asks how many entries wait for a vector; it read the index's vector count under the
    lock a vector search holds, so under one org's concurrent recalls it queued behind another's search. A refresh
    that moves vectors holds the index's main lock too, which the count is read under."""
    import threading

    search = seeded._search
    view = search.view()
    answered = []
    with view.vector_lock:  # as another recall's vector search holds it
        asking = threading.Thread(target=lambda: answered.append(search.waiting(view, view.space, 0.5)))
        asking.start()
        asking.join(timeout=BOUND)  # one that waits on the lock waits past this join: it is held until after
        finished = not asking.is_alive()
    asking.join()
    assert finished and answered == [None]  # every entry has its vector: nothing waits
