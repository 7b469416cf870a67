"""An entry is never lost because embedding misbehaved; the provider contract is enforced."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import structlog

from grandbo.config import Settings
from grandbo.errors import ProviderMismatchError, StrictModeError, UnknownProviderError
from grandbo.model import Arm, parse_entry, utcnow
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings, fake_embed_calibration, vector_for
from tests.serving import serving

TOPIC = "checkout-api connection pool exhausted under retry storm"


@pytest.fixture
def hosted(database_url):
    """Settings for the openai provider pointed at a fake server, on the backend under test."""

    def make(tmp_path, url, **extra):
        return _hosted(tmp_path, url, database_url=database_url, **extra)

    return make


def _hosted(tmp_path, url, **extra):
    values = {
        "home": tmp_path / "home",
        "openai_base_url": url,
        "openai_model": "fake-embed",
        "openai_dimension": 8,
        "openai_api_key": "test-key",
        "http_timeout_seconds": 0.5,
        "embed_retry_seconds": 0,
        "vector_min_similarity": -1.0,  # the fake's vectors are not semantic
    }
    return Settings(**{**values, **extra})


def closed_port_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def remember_one(grandbo):
    return grandbo.org("acme", create=True).remember(
        {"title": "checkout-api pool exhausted", "body": "retry storm from clients"}
    )


@pytest.fixture
def fake():
    with FakeEmbeddings(dimension=8) as server:
        yield server


def test_entry_survives_an_unreachable_provider_and_backfill_embeds_it(tmp_path, fake, hosted):
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai"):
        pass
    with structlog.testing.capture_logs() as logs, Grandbo.open(hosted(tmp_path, closed_port_url())) as down:
        entry = remember_one(down)
        stats = down.org("acme", create=True).stats()
        result = down.org("acme", create=True).recall(TOPIC)
    assert stats.total == 1 and stats.unreadable == 1 and stats.pending == 1
    assert [hit.entry.id for hit in result.hits] == [entry.id]  # still found, lexically
    assert any(note.startswith("vector arm skipped") for note in result.notes)
    assert any(log["event"] == "memory.embedding_failed" for log in logs)
    with Grandbo.open(hosted(tmp_path, fake.url)) as up:
        report = up.backfill()
        stats = up.org("acme", create=True).stats()
        vector = up.org("acme", create=True).recall(TOPIC, arm=Arm.VECTOR)
    assert report.embedded == 1 and stats.readable == 1 and stats.pending == 0
    assert [hit.entry.id for hit in vector.hits] == [entry.id]


def test_with_the_provider_down_recall_ranks_lexically_and_gives_no_verdict(tmp_path, fake, hosted, capsys):
    """The verdict weighs the best cosine; with the vector arm skipped there is none, so an org's own
    calibration must not turn every recall into "no similar past incident" (it did: cosine read as 0)."""
    from grandbo.cli.memory import _print_recall
    from grandbo.model import NO_VECTOR_VERDICT

    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        entry = remember_one(grandbo)
        grandbo.org("acme").org_settings.set_calibration(fake_embed_calibration())
        judged = grandbo.org("acme").recall(TOPIC, arm=Arm.RERANKED)
    assert judged.calibration.startswith("organization") and judged.seen_before is not None
    with Grandbo.open(hosted(tmp_path, closed_port_url())) as down:
        result = down.org("acme").recall(TOPIC, arm=Arm.RERANKED)
        block = down.org("acme").context(topic=TOPIC)
    assert block.verdict.startswith("no verdict (no cosine to weigh: the query could not be embedded")
    assert "no similar past incident" not in block.recall.lower()
    assert [hit.entry.id for hit in result.hits] == [entry.id]
    assert result.seen_before is None and result.evidence is None and result.calibration == NO_VECTOR_VERDICT
    assert all(hit.label is None for hit in result.hits)
    assert any(note.startswith("no seen-before verdict: the vector arm was skipped") for note in result.notes)
    assert not any(note.startswith("no similar past incident") for note in result.notes)
    _print_recall(result)  # what `grandbo recall` prints of it
    assert "answer: no verdict (no cosine to weigh: the query could not be embedded" in capsys.readouterr().out


def test_with_no_vector_stored_yet_recall_gives_no_verdict(tmp_path, fake, hosted):
    """Entries written while the provider failed have no vector; a query the provider embeds again finds
    no vector to compare, so there is no cosine for the verdict either."""
    from grandbo.model import NO_VECTOR_VERDICT

    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        fake.behaviour.status = 503
        entry = remember_one(grandbo)
        fake.behaviour.status = 200
        memory = grandbo.org("acme")
        memory.org_settings.set_calibration(fake_embed_calibration())
        result = memory.recall(TOPIC, arm=Arm.RERANKED)
        assert memory.stats().readable == 0
    assert [hit.entry.id for hit in result.hits] == [entry.id]
    assert result.seen_before is None and result.calibration == NO_VECTOR_VERDICT
    assert any(note.startswith("no seen-before verdict: no memory has a vector yet") for note in result.notes)


def test_with_no_vector_stored_yet_recall_ranks_as_the_lexical_arm_alone_and_says_why(tmp_path, fake, hosted, capsys):
    """With nothing embedded yet (written while the provider failed, or before `grandbo worker` got to it) the
    lexical list has no vector answer to be fused with: it was still floored, so a long topic's match that the
    lexical arm alone ranks was dropped, and the faces said the embedding was unavailable (it embedded the query)."""
    from grandbo.cli.memory import _print_recall
    from tests.test_recall import INCIDENTS

    long_topic = (
        "During the evening peak the warehouse scanners froze, drivers waited at depots, the dispatch board "
        "showed stale parcels and the broker restarted twice"
    )
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        fake.behaviour.status = 503
        memory.remember_many(INCIDENTS)
        fake.behaviour.status = 200
        alone = memory.recall(long_topic, arm=Arm.LEXICAL)
        result = memory.recall(long_topic, arm=Arm.RERANKED)
        hybrid = memory.recall(long_topic, arm=Arm.HYBRID)
        block = memory.context(topic="Kafka consumer lag on orders after a broker upgrade")
        assert memory.stats().readable == 0
    assert [hit.entry.id for hit in alone.hits] == ["INC-090-F1"]
    assert [hit.entry.id for hit in result.hits] == ["INC-090-F1"]  # was []: floored beside an empty vector arm
    assert [hit.entry.id for hit in hybrid.hits] == ["INC-090-F1"]
    assert result.seen_before is None and any(note.startswith("no seen-before verdict: no memory has a vector yet")
                                              for note in result.notes)  # fmt: skip
    assert block.verdict.startswith("no verdict") and "no memory has a vector yet" in block.verdict
    assert "unavailable" not in block.verdict  # the query did embed
    _print_recall(result)
    printed = capsys.readouterr().out
    assert "answer: no verdict" in printed and "no memory has a vector yet" in printed
    assert "note: no seen-before verdict: no memory has a vector yet" in printed


def test_entry_survives_a_provider_answering_503(tmp_path, fake, hosted):
    fake.behaviour.status = 503
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        remember_one(grandbo)
        assert grandbo.org("acme", create=True).stats().pending == 1
        fake.behaviour.status = 200
        assert grandbo.backfill().embedded == 1


def test_entry_survives_a_slow_provider(tmp_path, fake, hosted):
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        fake.behaviour.delay_s = 1.5  # past the 0.5 s timeout
        entry = remember_one(grandbo)
        stats = grandbo.org("acme", create=True).stats()
        assert stats.pending == 1 and grandbo.org("acme").find(entry.id) is not None
        fake.behaviour.delay_s = 0
        assert grandbo.backfill().embedded == 1


def test_wrong_vector_count_writes_no_vector_at_all(tmp_path, fake, hosted):
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        fake.behaviour.drop_one = True
        with structlog.testing.capture_logs() as logs:
            grandbo.org("acme", create=True).remember_many([{"title": f"entry {n}", "body": "text"} for n in range(3)])
        stats = grandbo.org("acme", create=True).stats()
        assert stats.readable == 0 and stats.pending == 3
        assert any(log.get("code") == "embedding_count_mismatch" for log in logs)


FAULTS = {
    "a vector of the wrong dimension": lambda behaviour: behaviour.wrong_dimension_for.add("poison"),
    "a NaN": lambda behaviour: behaviour.value_for.update(poison=float("nan")),
    "an Infinity": lambda behaviour: behaviour.value_for.update(poison=float("inf")),
}


@pytest.mark.parametrize(
    ("provider", "fault"),
    [("openai", fault) for fault in FAULTS] + [("bedrock", "a vector of the wrong dimension"), ("bedrock", "a NaN")],
)
def test_an_answer_with_one_bad_vector_files_nothing_of_it_and_its_batch_mates_are_embedded_apart(
    tmp_path, fake, hosted, monkeypatch, provider, fault
):
    """A provider answer is used only when every vector has the declared dimension and is finite: else nothing of
    it is written, a log line says what was wrong, and the batch is asked again in halves (`EmbedWorker._apart`),
    so that its other texts get vectors of answers of their own and only the text at fault stays queued, with an
    attempt counted; once the provider answers well it gets its own vector. Before, a bad vector failed only its
    own job, for good, and the others of the answer were written; then, every job of the batch failed with it."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    dimension = 8 if provider == "openai" else 256
    settings = hosted(tmp_path, fake.url, bedrock_region="us-east-1", bedrock_endpoint_url=fake.url,
                      bedrock_dimension=256)  # fmt: skip
    texts = ["alpha pool exhausted on checkout-api", "beta poison eviction on redis", "gamma disk full on ledger-db"]
    with Grandbo.init(settings, embedding=provider) as grandbo:
        memory = grandbo.org("acme", create=True)
        FAULTS[fault](fake.behaviour)
        with structlog.testing.capture_logs() as logs:
            entries = memory.remember_many([{"title": text} for text in texts])
        stats = memory.stats()
        assert (stats.total, stats.readable, stats.pending, stats.failed) == (3, 2, 1, 0)
        assert memory.embedding(entries[1].id).attempts == 1
        said = [log for log in logs if log["event"] in ("embedding.unusable_answer", "embedding.malformed_answer")]
        assert said and any(word in said[0]["problem"] for word in ("shape", "NaN", "finite")), said
        assert any(log["event"] == "memory.embedding_failed" and log["error"] for log in logs)
        fake.behaviour.wrong_dimension_for, fake.behaviour.value_for = set(), {}
        report = grandbo.backfill()
        vectors = memory.vectors([entry.id for entry in entries])
    assert report.errors == [] and report.embedded == 1
    for entry, text in zip(entries, texts, strict=True):
        assert vectors[entry.id].tolist() == pytest.approx(vector_for(text, dimension), abs=1e-6), text


def test_a_text_with_no_vector_is_marked_unembeddable_once_and_found_by_its_words(tmp_path, fake, hosted):
    """An all-zero vector (no direction) is the provider's answer for a text it cannot embed: that entry is
    settled as unembeddable once (counted in stats, never retried, never a backfill error) and found by the
    lexical arm; its batch mates get their vectors; another provider (`reembed`) tries it again. Before, its job
    failed for good, and every backfill retried it and reported an error."""
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        fake.behaviour.zero_for = {"walrus"}
        blank, _ = memory.remember_many(
            [{"title": "walrus cache stampede after a cold start"}, {"title": "checkout-api pool exhausted"}]
        )
        stats = memory.stats()
        assert (stats.readable, stats.unembeddable, stats.failed, stats.pending) == (1, 1, 0, 0)
        state = memory.embedding(blank.id)
        assert state.state == "unembeddable" and "all zeros" in (state.last_error or "")
        asked = len(fake.behaviour.requests)
        for _ in range(2):
            report = grandbo.backfill()
            assert (report.claimed, report.errors, report.unembeddable) == (0, [], 0)
        assert len(fake.behaviour.requests) == asked  # marked once: never sent again
        hits = memory.recall("walrus cache stampede", arm=Arm.HYBRID).hits
        assert hits[0].entry.id == blank.id and hits[0].why.vector is None and hits[0].why.lexical is not None
        _, key = memory.keys.create("read")
        with serving(grandbo) as served, served.client(key) as client:  # the REST stats route counts it too
            assert client.get("/v1/stats").json()["unembeddable"] == 1
        count, report = grandbo.reembed("deterministic")
        assert count >= 1 and report.embedded >= 1
        assert memory.embedding(blank.id).state == "embedded" and memory.stats().unembeddable == 0


def test_strict_mode_refuses_anything_short_of_full_embedding(tmp_path, fake, hosted):
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        fake.behaviour.status = 503
        with pytest.raises(StrictModeError, match="1 of the 1 entries just written have no vector") as caught:
            grandbo.org("acme", create=True).remember_many([{"title": "seed entry"}], strict=True)
        assert "grandbo backfill" in caught.value.message
        assert grandbo.org("acme", create=True).stats().total == 1  # stored all the same


def test_store_opened_with_another_provider_is_refused_with_the_remedy(tmp_path, fake, hosted):
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai"):
        pass
    with pytest.raises(ProviderMismatchError, match="grandbo reembed --embedding deterministic"):
        Grandbo.open(hosted(tmp_path, fake.url), embedding="deterministic")
    with pytest.raises(ProviderMismatchError):
        Grandbo.init(hosted(tmp_path, fake.url), embedding="deterministic")
    changed = hosted(tmp_path, fake.url).model_copy(update={"openai_dimension": 16})
    with pytest.raises(ProviderMismatchError, match="configured as"):
        Grandbo.open(changed)  # a changed dimension is refused at open, before any write


def test_reembed_migrates_every_vector_to_the_new_space(tmp_path, fake, hosted):
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        grandbo.org("acme", create=True).remember_many(
            [{"title": f"entry number {n}", "body": "text"} for n in range(4)]
        )
        count, report = grandbo.reembed("deterministic")
        stats = grandbo.org("acme", create=True).stats()
    assert count == 4 and report.embedded == 4
    assert stats.space.provider == "deterministic" and stats.readable == 4 and stats.stale == 0


def test_unknown_or_missing_provider_lists_the_valid_ones(tmp_path):
    with pytest.raises(UnknownProviderError, match="bedrock, deterministic, local, openai, voyage"):
        Grandbo.init(Settings(home=tmp_path), embedding="word2vec")
    with pytest.raises(UnknownProviderError, match="no default"):
        Grandbo.init(Settings(home=tmp_path))


def test_process_killed_between_commit_and_embedding_loses_nothing(tmp_path, fake, hosted, raw):
    settings = hosted(tmp_path, fake.url, http_timeout_seconds=30)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        grandbo.create_org("acme")
    fake.behaviour.delay_s = 20  # the child commits, then blocks in the embedding call
    env = {
        **os.environ,
        "GRANDBO_HOME": str(settings.home),
        "GRANDBO_OPENAI_BASE_URL": fake.url,
        "GRANDBO_OPENAI_MODEL": "fake-embed",
        "GRANDBO_OPENAI_DIMENSION": "8",
        "GRANDBO_OPENAI_API_KEY": "k",
        "GRANDBO_HTTP_TIMEOUT_SECONDS": "30",
        **({"GRANDBO_DATABASE_URL": settings.database_url} if settings.database_url else {}),
    }
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grandbo",
            "--verbose",
            "remember",
            "--org",
            "acme",
            "--title",
            "killed mid-embedding",
            "--body",
            "the process dies before its vector is written",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if fake.behaviour.requests:  # the embedding call started: the entry is committed
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL
    assert raw("SELECT title FROM memory_entries", org="acme") == [("killed mid-embedding",)]
    fake.behaviour.delay_s = 0
    with Grandbo.open(settings) as grandbo:
        assert grandbo.org("acme", create=True).stats().unreadable == 1
        assert grandbo.backfill().embedded == 1
        assert grandbo.org("acme", create=True).stats().readable == 1


def test_empty_answer_over_an_unreadable_corpus_names_backfill(tmp_path, hosted):
    with Grandbo.init(hosted(tmp_path, closed_port_url()), embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember({"title": "checkout-api pool exhausted", "body": "retry storm from clients"})
        with structlog.testing.capture_logs() as logs:
            result = memory.recall("kafka consumers rebalancing in a loop after a broker upgrade")
    assert result.hits == []
    assert any("1 of 1 entries have no vector yet: run `grandbo backfill`" in note for note in result.notes)
    event = next(log for log in logs if log["event"] == "recall.empty_result")
    assert event["waiting"] == 1 and event["readable"] == 0 and "backfill" in event["remedy"]


def queue_unembedded(grandbo, memory, titles):
    """Write entries through the store, without the in-process drain, so that one worker run sees them all."""
    grandbo._store.append(
        memory.org, [memory._writes._remembered(parse_entry({"title": title}), utcnow(), "test") for title in titles]
    )


@pytest.mark.parametrize("status", [401, 400])
def test_a_rejected_batch_counts_an_attempt_and_the_untried_ones_go_back_untouched(tmp_path, fake, hosted, raw,
                                                                                   status):  # fmt: skip
    """Refused for the account (401), the batch counts an attempt and the claim stops, its untried batches given
    back; refused for one text (400), the batch is embedded again in halves down to that text, and the claim goes
    on (`EmbedWorker._apart`)."""
    fake.behaviour.reject_for, fake.behaviour.reject_status = {"poison"}, status
    settings = hosted(tmp_path, fake.url, embed_batch_size=2, embed_claim_seconds=100)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        titles = ["disk full on node a", "disk full on node b", "disk full on node c", "disk full on node d"]
        titles += ["poison pill in the queue", "disk full on node e", "disk full on node f", "disk full on node g"]
        queue_unembedded(grandbo, memory, titles)
        worker = grandbo.worker()
        assert worker.run_once().embedded == 2  # one batch while the provider is not timed yet
        report = worker.run_once()
        outbox = raw("SELECT attempts, claimed_until FROM embed_outbox ORDER BY job_id", org="acme")
        if status == 401:
            assert (report.claimed, report.embedded, report.failed) == (4, 2, 2)  # batches 1 and 2 tried, 3 released
            assert memory.stats().readable == 4
            assert [attempts for attempts, _ in outbox] == [1, 1, 0, 0]
        else:
            assert (report.claimed, report.embedded, report.failed) == (6, 5, 1)  # only the poison failed
            assert memory.stats().readable == 7
            assert [attempts for attempts, _ in outbox] == [1]
        assert [claimed for _, claimed in outbox] == [None] * len(outbox)
        fake.behaviour.reject_for = set()
        grandbo.backfill()
        assert memory.stats().readable == 8


def test_a_worker_gives_back_what_it_cannot_send_within_half_its_lease(tmp_path, fake, hosted, raw):
    fake.behaviour.delay_s = 0.05  # each provider call outlasts half of the lease below
    settings = hosted(tmp_path, fake.url, embed_batch_size=2, embed_lease_seconds=0.04)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        queue_unembedded(grandbo, memory, [f"disk full on node {n}" for n in "abcdef"])
        report = grandbo.worker().run_once()
        assert (report.claimed, report.embedded) == (2, 2)  # the first batch is always sent
        outbox = raw("SELECT attempts, claimed_until FROM embed_outbox ORDER BY job_id", org="acme")
        assert outbox == [(0, None)] * 4  # the rest is claimable at once, no attempt counted
        fake.behaviour.delay_s = 0
        assert grandbo.worker().drain().embedded == 4


def test_each_entry_says_where_its_vector_stands(tmp_path, fake, hosted):
    """Pending (with its attempts and error), failed, unembeddable, embedded: per entry, not per org."""
    with Grandbo.init(hosted(tmp_path, fake.url, embed_max_attempts=2), embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        fake.behaviour.status = 503
        waiting = memory.remember({"title": "checkout-api pool exhausted", "body": "retry storm"})
        state = memory.embedding(waiting.id)
        assert state.state == "pending" and state.attempts == 1 and state.next_try is not None
        assert "503" in (state.last_error or "")
        fake.behaviour.status = 200
        fake.behaviour.wrong_dimension_for = {"poison"}
        poisoned = memory.remember({"title": "poison entry"})  # its batch (with the waiting one) fails a 2nd time
        assert memory.embedding(poisoned.id).state == "pending"
        grandbo.worker().drain()
        assert memory.embedding(poisoned.id).state == "failed"
        assert memory.embedding(poisoned.id).next_try is None
        fake.behaviour.wrong_dimension_for = set()
        fake.behaviour.zero_for = {"walrus"}
        blank = memory.remember({"title": "walrus entry"})
        assert memory.embedding(blank.id).state == "unembeddable"
        grandbo.backfill()
        assert memory.embedding(waiting.id).state == "embedded"
        assert memory.embedding(poisoned.id).state == "embedded"
        assert memory.embedding(blank.id).state == "unembeddable"
        assert grandbo.org("other", create=True).embedding(waiting.id).state == "unqueued"  # not another org's


def test_a_process_that_leaves_embedding_to_workers_embeds_a_strict_write_itself_and_starts_no_worker(
    tmp_path, fake, hosted
):
    """`serve --no-worker` opens Grandbo with background threads but no embed worker. Building the worker for
    a write that must be embedded now (strict) or a backfill started its background thread there: it raced
    the write's own drain (StrictModeError, 'last error: none') and then embedded in the API process for good."""
    settings = hosted(tmp_path, fake.url)
    with Grandbo.init(settings, embedding="openai"):
        pass
    with Grandbo.open(settings, background=True, embed_here=False) as api:
        memory = api.org("acme", create=True)
        later = memory.remember({"title": "walrus-cache stampede after a cold start", "body": "cold start"})
        assert memory.stats().pending == 1  # left to `grandbo worker`
        assert memory.backfill().embedded == 1 and memory.stats().readable == 1
        assert api._worker is not None and api._worker._thread is None  # drained here, no thread left running
        (strict,) = memory.remember_many([{"title": "checkout-api pool exhausted", "body": "retry storm"}], strict=True)
        assert set(memory._entries.vectors([strict.id])) == {strict.id} and memory.stats().readable == 2
        assert api._worker._thread is None
        assert later.id in {hit.entry.id for hit in memory.recall(TOPIC, arm=Arm.VECTOR).hits}


def test_with_the_provider_down_a_triage_with_no_word_match_says_it_is_no_verdict(tmp_path, fake, hosted):
    """The plan's 'no precedent' reason said 'no memory matched closely enough' while the vector arm never
    looked: an on-call reader took it for the verdict that nothing like this happened before."""
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        remember_one(grandbo)
    with Grandbo.open(hosted(tmp_path, closed_port_url())) as down:
        plan = down.org("acme").triage({"summary": "quokka ledger drift on payouts overnight", "severity": "sev2"})
    assert plan.no_precedent is not None and plan.seen_before is None
    assert "words" in plan.no_precedent.reason and "not a verdict" in plan.no_precedent.reason


@pytest.mark.parametrize(
    "index_of",
    [
        lambda i, n: 0,  # reverse order, every index 0: one server's answer, which filed vectors under other entries
        lambda i, n: i + 1,  # one past the end
        lambda i, n: min(i, n - 2),  # one index twice, one missing
        lambda i, n: str(i),  # not a number
    ],
)
def test_an_answer_whose_indexes_are_not_each_text_once_files_no_vector(tmp_path, fake, hosted, index_of):
    """The vector at index i is filed under the i-th entry: an answer that does not name each text exactly once
    files no vector (the batch is asked again in halves, whose answers are checked alike), and the next good answer
    files each vector under its own entry. Before, the first and the third of three entries got each other's
    vectors, and backfill kept them."""
    texts = ["alpha pool exhausted on checkout-api", "beta eviction storm on redis", "gamma disk full on ledger-db"]
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        fake.behaviour.index_of = index_of
        with structlog.testing.capture_logs() as logs:
            entries = memory.remember_many([{"title": text} for text in texts])
        stats, filed = memory.stats(), memory.vectors([entry.id for entry in entries])
        assert stats.readable == len(filed) and stats.pending == 3 - len(filed)
        for entry, text in zip(entries, texts, strict=True):  # only from an answer of a text alone ("every index 0")
            if entry.id in filed:
                assert filed[entry.id].tolist() == pytest.approx(vector_for(text, 8), abs=1e-6), text
        assert any(log["event"] == "embedding.malformed_answer" for log in logs)
        fake.behaviour.index_of = None
        grandbo.backfill()
        vectors = memory.vectors([entry.id for entry in entries])
    for entry, text in zip(entries, texts, strict=True):
        assert vectors[entry.id].tolist() == pytest.approx(vector_for(text, 8), abs=1e-6), text


def test_an_upstream_error_body_goes_to_the_log_not_to_the_tenant(tmp_path, fake, hosted):
    """A recall's notes show the provider's error to whichever organization asked; the upstream's body (which can
    quote another tenant's input or name the account) goes to the operator's log only."""
    with Grandbo.init(hosted(tmp_path, fake.url), embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember({"title": "checkout-api pool exhausted after a deploy"})
        fake.behaviour.status = 500
        with structlog.testing.capture_logs() as logs:
            result = memory.recall("checkout-api connection pool exhausted after the deploy")
    said = " ".join(result.notes)
    assert "HTTP 500" in said and "fake failure" not in said
    assert any(log["event"] == "embedding.provider_error" and "fake failure" in log["body"] for log in logs)


def test_a_provider_that_goes_bad_after_a_healthy_start_makes_the_process_degraded_until_a_probe_finds_it_well(
    tmp_path, fake, hosted
):
    """`/readyz` said ready while every recall noted vectors of the wrong dimension: only a failed warm-up made a
    process degraded. Now recall's own failure does, and the probe (checked as recall checks) clears it."""
    settings = hosted(tmp_path, fake.url, provider_probe_seconds=0.01)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        entry = remember_one(grandbo)
        assert grandbo.health.warm_up() and grandbo.health.state() == {"ok": True}
        fake.behaviour.wrong_dimension_for = {"checkout"}  # its answers to recall's topic: 9 numbers, 8 declared
        noted = grandbo.org("acme").recall(TOPIC)
        assert any(note.startswith("vector arm skipped") for note in noted.notes)
        state = grandbo.health.state()
        assert state["ok"] is False and state["error"] in ("embedding_dimension_mismatch", "embedding_unusable")
        fast = grandbo.org("acme").recall(TOPIC)  # lexical at once, the entry still found
        assert [hit.entry.id for hit in fast.hits] == [entry.id]
        fake.behaviour.wrong_dimension_for = set()
        deadline = time.monotonic() + 10
        while not grandbo.health.report()["ok"] and time.monotonic() < deadline:  # /readyz's: a probe when due
            time.sleep(0.05)
        assert grandbo.health.state() == {"ok": True}
