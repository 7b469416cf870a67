"""The write path never loses or poisons data: checks at the write seam alike on both backends, one org's bad
row never stops the worker for others, committed writes never raise, strict mode judges its own batch,
the logs refuse DELETE, and rebuild compares before it replaces anything."""

from __future__ import annotations

import json
import sqlite3
import threading
from urllib.parse import urlsplit

import numpy as np
import psycopg
import pytest

from grandbo.config import Settings
from grandbo.embeddings.local import DIMENSION, MODEL_NAME
from grandbo.errors import ConflictError, InvalidInputError, StrictModeError
from grandbo.model import EventType, utcnow
from grandbo.ports import NewEvent
from grandbo.service import Grandbo
from tests.conftest import RAW_ERRORS
from tests.fakes import FakeEmbeddings
from tests.test_embedding_faults import _hosted


@pytest.fixture
def behind_triggers(settings, backend, request):
    """Run SQL as nobody should: past the append-only triggers (on Postgres as the superuser)."""

    def run(statement: str) -> None:
        if backend == "sqlite":
            with sqlite3.connect(settings.home / "grandbo.db") as conn:
                for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
                    conn.execute(f"DROP TRIGGER {name}")
                conn.execute(statement)
            return
        server = request.getfixturevalue("pg_server")
        with psycopg.connect(server.url(urlsplit(settings.database_url).path.lstrip("/")), autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")  # no triggers fire
            conn.execute(statement)

    return run


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"])
def test_a_timestamp_outside_what_both_backends_keep_is_refused_with_the_field_named(memory, stamp):
    with pytest.raises(InvalidInputError, match="occurred_at") as caught:
        memory.remember({"id": "past-1", "title": "far past redis eviction storm", "occurred_at": stamp})
    assert caught.value.detail["errors"][0]["field"] == "occurred_at"
    assert memory.find("past-1") is None
    memory.remember({"title": "redis eviction storm on the session cache", "occurred_at": "0100-01-01T00:00:00Z"})
    assert memory.recall("redis eviction storm on the sessions").hits  # the org still reads
    with pytest.raises(InvalidInputError, match="started_at"):
        memory.incidents.open("checkout outage in the far past", started_at=stamp)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tags", ["ERR\x00RESET"]),
        ("services", ["checkout\x00api"]),
        ("meta", {"k": "\udfff"}),
        ("meta", {"\udfff": "v"}),
        ("body", "half a pair \ud800 here"),
        ("title", "nul \x00 in the title"),
    ],
)
def test_text_a_backend_cannot_keep_is_refused_alike_on_both(memory, field, value):
    entry = {"title": "checkout-api pool exhausted", field: value}
    with pytest.raises(InvalidInputError, match=field):
        memory.remember(entry)
    assert memory.stats().total == 0


def test_a_document_with_text_a_backend_cannot_keep_is_refused_alike_on_both(memory):
    with pytest.raises(InvalidInputError, match="NUL"):
        memory.incidents.open("checkout outage", symptoms=["timeouts \x00 everywhere"])
    with pytest.raises(InvalidInputError, match=r"surrogate|unicode"):
        memory.profile.update({"facts": {"team": "payments \udfff"}})
    assert memory.incidents.find() == []


def _pending(store, org, entry_id):
    payload = {"title": f"{entry_id} on {org}", "body": "b", "kind": "fact", "source": "admin",
               "occurred_at": utcnow().isoformat()}  # fmt: skip
    store.append(org, [NewEvent(entry_id, EventType.REMEMBERED, payload, "test", utcnow())])


def test_one_orgs_unreadable_row_never_stops_the_worker_for_other_orgs(grandbo, store, raw, backend):
    for org in ("a-poisoned", "b-healthy"):
        store.ensure_org(org)
    _pending(store, "a-poisoned", "bad")
    _pending(store, "a-poisoned", "fine")
    _pending(store, "b-healthy", "good")
    # A row the driver cannot read back, as rows written before the write seam checked timestamps are.
    if backend == "sqlite":
        raw("UPDATE memory_entries SET tags = 'not json' WHERE entry_id = 'bad'")
    else:
        raw("UPDATE memory_entries SET occurred_at = '0001-01-01 00:00:00+00 BC' WHERE entry_id = 'bad'",
            org="a-poisoned")  # fmt: skip
    report = grandbo.worker().drain()
    assert report.embedded == 2
    assert store.corpus_stats("b-healthy", 5).readable == 1
    poisoned = store.corpus_stats("a-poisoned", 5)
    assert poisoned.failed == 1 and poisoned.pending == 0  # failed for good, never in the way again
    assert grandbo.worker().drain().claimed == 0


def test_a_committed_write_never_raises_when_the_background_worker_cannot_be_built(tmp_path, database_url):
    class NotLoaded:  # the recorded space of the local model, never asked to embed
        name, model, dimension = "local", MODEL_NAME, DIMENSION
        min_similarity = 0.25

        def embed(self, texts, purpose="document"):  # pragma: no cover - never called
            raise AssertionError

    settings = Settings(home=tmp_path / "home", database_url=database_url, local_model_dir=tmp_path / "no-model")
    Grandbo.init(settings, provider=NotLoaded()).close()  # type: ignore[arg-type]
    with Grandbo.open(settings, background=True) as grandbo:
        memory = grandbo.org("acme", create=True)
        entry = memory.remember({"title": "checkout-api pool exhausted", "body": "retry storm"})
        memory.correct(entry.id, {"body": "retry storm from the mobile clients"}, reason="cause")
        assert memory.stats().total == 1 and memory.stats().unreadable == 1  # stored, waiting for the model


def test_strict_mode_judges_its_own_batch_not_an_old_failure_of_the_org(tmp_path, database_url):
    with (
        FakeEmbeddings(dimension=8) as fake,
        Grandbo.init(
            _hosted(tmp_path, fake.url, database_url=database_url, embed_max_attempts=1), embedding="openai"
        ) as grandbo,
    ):
        memory = grandbo.org("acme", create=True)
        fake.behaviour.status = 400
        memory.remember({"title": "poison entry from last month"})  # its job failed (one attempt is the limit)
        assert memory.stats().failed == 1
        fake.behaviour.status = 200
        stored = memory.remember_many([{"title": f"healthy entry {n}"} for n in range(3)], strict=True)
        assert len(stored) == 3  # no StrictModeError: every entry of this batch has its vector
        fake.behaviour.zero_for = {"zero"}
        with pytest.raises(StrictModeError, match="1 of the 2 entries") as caught:
            memory.remember_many([{"title": "zero entry"}, {"title": "fine entry"}], strict=True)
        assert caught.value.detail["missing"] == [stored_id(memory, "zero entry")]
        assert "1 unembeddable" in caught.value.message


def stored_id(memory, title):
    return next(entry.id for entry in memory.entries() if entry.title == title)


def test_an_all_zero_vector_is_not_counted_readable_and_never_stored(tmp_path, database_url):
    with (
        FakeEmbeddings(dimension=8) as fake,
        Grandbo.init(_hosted(tmp_path, fake.url, database_url=database_url), embedding="openai") as grandbo,
    ):
        memory = grandbo.org("acme", create=True)
        fake.behaviour.zero_for = {"blank"}
        memory.remember_many([{"title": "blank vector entry"}, {"title": "normal entry"}])
        stats = memory.stats()
        assert stats.readable == 1 and stats.unreadable == 1 and stats.unembeddable == 1 and stats.failed == 0
        with pytest.raises(InvalidInputError, match="zeros"):
            memory.remember_many([{"title": "given"}], vectors=[np.zeros(8, dtype=np.float32)])


def test_the_logs_refuse_delete_as_they_refuse_update(memory, raw):
    memory.remember({"title": "first memory", "body": "text"})
    memory.incidents.open("checkout outage")
    for table in ("memory_events", "document_events"):
        with pytest.raises(RAW_ERRORS, match="append-only"):
            raw(f"DELETE FROM {table}", org="acme")
        with pytest.raises(RAW_ERRORS, match="append-only"):
            raw(f"UPDATE {table} SET actor = 'tamper'", org="acme")
    assert len(memory.history(memory.entries()[0].id)) == 1


def test_dropping_an_org_still_erases_its_logs(grandbo, memory, raw):
    memory.remember({"title": "first memory", "body": "text"})
    memory.incidents.open("checkout outage")
    grandbo.drop_org("acme")
    for table in ("memory_events", "document_events", "memory_entries"):
        assert raw(f"SELECT count(*) FROM {table} WHERE org_id = 'acme'", org="acme") == [(0,)]


def test_rebuild_on_a_damaged_log_reports_and_destroys_nothing(memory, behind_triggers):
    for n in range(5):
        memory.remember({"id": f"e{n}", "title": f"incident {n} on checkout-api", "body": f"body {n}"})
    behind_triggers("DELETE FROM memory_events WHERE entry_id = 'e3'")  # a damaged log
    result = memory.rebuild()
    assert result.extra == ["e3"] and not result.identical and not result.replaced
    assert len(memory.entries()) == 5  # nothing was destroyed
    assert memory.get("e3").title == "incident 3 on checkout-api"


def test_a_retry_with_the_same_idempotency_key_returns_the_first_result(memory):
    first = memory.remember({"title": "checkout-api pool exhausted", "body": "retry storm"}, idempotency_key="k-1")
    again = memory.remember({"title": "checkout-api pool exhausted", "body": "retry storm"}, idempotency_key="k-1")
    assert again.id == first.id and memory.stats().total == 1 and len(memory.history(first.id)) == 1
    with pytest.raises(ConflictError, match="another write"):
        memory.remember({"title": "something else entirely"}, idempotency_key="k-1")
    other = memory.remember({"title": "checkout-api pool exhausted", "body": "retry storm"}, idempotency_key="k-2")
    assert other.id != first.id and memory.stats().total == 2  # a new key is a new write
    with pytest.raises(InvalidInputError, match="idempotency key"):
        memory.remember({"title": "x"}, idempotency_key=" ")


def test_concurrent_retries_with_one_key_write_once(grandbo, memory):
    results: list[str] = []

    def attempt() -> None:
        handle = grandbo.org("acme")
        results.append(handle.remember({"title": "redis eviction storm", "body": "b"}, idempotency_key="same").id)

    threads = [threading.Thread(target=attempt) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 4 and len(set(results)) == 1 and memory.stats().total == 1


def test_idempotency_keys_are_per_org(grandbo, memory):
    mine = memory.remember({"title": "checkout-api pool exhausted"}, idempotency_key="k")
    theirs = grandbo.org("other", create=True).remember({"title": "checkout-api pool exhausted"}, idempotency_key="k")
    assert mine.org_id == "acme" and theirs.org_id == "other"


def test_the_cli_takes_an_idempotency_key(cli):
    args = ("remember", "--title", "checkout-api pool exhausted", "--idempotency-key", "run-42")
    first, again = cli(*args).stdout, cli(*args).stdout
    assert first == again and json.loads(cli("stats", "--json").stdout)["total"] == 1
