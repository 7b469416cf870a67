"""An org's corpus counts (`stats`: `/v1/stats`, `grandbo stats`) are kept by the database as every write changes
them (migration 34, `store/sql/corpus_counts.py`), and must be what counting every row again finds, after every
kind of write, on both backends: a writer the triggers missed shows here as a count apart."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from grandbo.model import EmbeddingSpace, utcnow
from grandbo.service import Grandbo
from grandbo.store.base import REDERIVE_BATCH

# `corpus_stats` before migration 34: every active entry joined with its vector, every read.
_FROM_SCRATCH = (
    "SELECT (SELECT count(*) FROM memory_entries WHERE org_id = %s AND status = 'active'), "
    "count(*) FILTER (WHERE v.provider = %s AND v.model = %s AND v.dimension = %s "
    "AND v.content_hash = e.content_hash), "
    "count(*) FILTER (WHERE NOT (v.provider = %s AND v.model = %s AND v.dimension = %s)) "
    "FROM memory_entries e JOIN entry_vectors v USING (org_id, entry_id) WHERE e.org_id = %s AND e.status = 'active'"
)
_OTHER = EmbeddingSpace(provider="another", model="model-b", dimension=384)


def _check(grandbo: Grandbo, raw: Any, *orgs: str) -> None:
    """Each org's stats, and the counts the database keeps, equal to a count of every row, in the store's space."""
    space = grandbo._store.space()
    assert space is not None
    for org in orgs:
        where = (space.provider, space.model, space.dimension)
        total, readable, stale = raw(_FROM_SCRATCH, (org, *where, *where, org), org)[0]
        kept = raw("SELECT active_entries FROM orgs WHERE org_id = %s", (org,), org)
        read = "SELECT provider, model, dimension, vectors, readable FROM vector_counts WHERE org_id = %s"
        spaces = {(row[0], row[1], row[2]): (row[3], row[4]) for row in raw(read, (org,), org)}
        counted = raw(
            "SELECT v.provider, v.model, v.dimension, count(*), "
            "count(*) FILTER (WHERE v.content_hash = e.content_hash) FROM memory_entries e "
            "JOIN entry_vectors v USING (org_id, entry_id) WHERE e.org_id = %s AND e.status = 'active' "
            "GROUP BY v.provider, v.model, v.dimension",
            (org,),
            org,
        )
        assert (kept[0][0] if kept else 0) == total, org
        assert spaces == {(row[0], row[1], row[2]): (row[3], row[4]) for row in counted}, org
        stats = grandbo.org(org).stats() if kept else None
        if stats is not None:
            assert (stats.total, stats.readable, stats.unreadable, stats.stale) == (
                total, readable, total - readable, stale
            ), org  # fmt: skip


def _fail(grandbo: Grandbo, raw: Any, org: str, limit: int, times: int) -> None:
    """`limit` of the org's embed jobs claimed and failed, as a worker fails them under its lease, then counted as
    failed `times` times in all (a failure is recorded only under the lease it was claimed with)."""
    store = grandbo._store
    jobs = store.claim_jobs(limit, grandbo.settings.embed_max_attempts, org)
    store.fail_jobs(jobs, "provider down", utcnow())
    for job in jobs if times > 1 else []:
        raw("UPDATE embed_outbox SET attempts = %s WHERE org_id = %s AND job_id = %s", (times, org, job.job_id), org)


def test_the_kept_counts_are_what_a_count_of_every_row_finds_after_every_kind_of_write(grandbo, raw, tmp_path):
    store, attempts = grandbo._store, grandbo.settings.embed_max_attempts
    acme, beta = grandbo.org("acme", create=True), grandbo.org("beta", create=True)
    written = acme.remember_many([{"title": f"replica lag number {n}", "body": "orders db"} for n in range(8)])
    beta.remember({"title": "beta's own entry", "body": "never counted in acme"})
    _check(grandbo, raw, "acme", "beta")
    # With their vectors, as an import writes them: 200 and more rows go through Postgres's staging tables.
    batch = [{"title": f"imported finding {n}", "body": "cache stampede"} for n in range(210)]
    vectors = grandbo.provider().embed([f"{e['title']}\n{e['body']}" for e in batch])
    acme.remember_many(batch, vectors=list(vectors))
    _check(grandbo, raw, "acme")
    space = store.space()
    store.switch_space(_OTHER)  # every vector of the old space stale, every entry queued again
    assert acme.stats().stale == 218 and acme.stats().pending == 218
    _check(grandbo, raw, "acme", "beta")
    _fail(grandbo, raw, "acme", 2, 1)
    _fail(grandbo, raw, "acme", 1, attempts)
    store.mark_unembeddable(store.claim_jobs(1, attempts, "acme"), "all zeros")
    stats = acme.stats()
    assert (stats.failed, stats.unembeddable) == (1, 1)
    store.switch_space(space)  # back: the old vectors readable again
    _check(grandbo, raw, "acme", "beta")
    acme.backfill()  # complete_jobs, retry_failed
    _check(grandbo, raw, "acme", "beta")
    first = sorted(acme.entries(), key=lambda entry: entry.id)
    acme.correct(first[0].id, {"body": "orders db, corrected"}, actor="api")  # supersedes: a new pending entry
    acme.retire(first[1].id, reason="wrong")
    acme.purge(first[2].id, reason="secret", actor="admin")
    _check(grandbo, raw, "acme")
    acme.backfill()
    _check(grandbo, raw, "acme")
    grandbo.reembed("deterministic", every_entry=True)  # every vector deleted and embedded again
    _check(grandbo, raw, "acme", "beta")
    acme.org_settings.set_language("german")  # every entry's terms derived again
    _check(grandbo, raw, "acme")
    acme.erasure.purge_text("replica lag number 4", reason="leaked", actor="admin")
    _check(grandbo, raw, "acme")
    acme.rebuild(replace=True)
    _check(grandbo, raw, "acme")
    exported = tmp_path / "acme.jsonl"
    acme.export_log(exported)
    gamma = grandbo.org("gamma", create=True)
    gamma.import_log(exported, reembed=True)
    _check(grandbo, raw, "gamma")
    assert gamma.stats().total == acme.stats().total
    grandbo.drop_org("beta")
    _check(grandbo, raw, "beta")
    assert raw("SELECT count(*) FROM vector_counts WHERE org_id = %s", ("beta",), "beta") == [(0,)]
    again = grandbo.org("beta", create=True)  # a same-named org starts from nothing
    again.remember({"title": "the new beta's entry"})
    again.backfill()
    _check(grandbo, raw, "acme", "beta", "gamma")
    assert again.stats().total == 1 and len(written) == 8


def test_a_write_of_an_entry_and_one_of_its_vector_in_two_transactions_are_counted_one_after_the_other(
    grandbo, raw, settings, backend
):
    """Each trigger counts the other table's rows after the org's writer lock: the second of two overlapping
    writes waits for the first to commit and sees its rows. Without it, each counted the entry as the other had
    not changed it yet, and its vector was taken off twice."""
    if backend == "sqlite":
        pytest.skip("SQLite's one writer holds the whole database: two writes never overlap")
    entries = grandbo.org("acme", create=True).remember_many([{"title": f"queue backlog on host {n}"} for n in (1, 2)])
    retire = "UPDATE memory_entries SET status = 'retired' WHERE org_id = 'acme' AND entry_id = %s"
    unvector = "DELETE FROM entry_vectors WHERE org_id = 'acme' AND entry_id = %s"
    for (first, second), entry in zip([(retire, unvector), (unvector, retire)], entries, strict=True):
        with psycopg.connect(settings.database_url) as one, psycopg.connect(settings.database_url) as two:
            for conn in (one, two):
                conn.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
            one.execute(first, (entry.id,))
            waiting = threading.Thread(target=lambda: (two.execute(second, (entry.id,)), two.commit()))
            waiting.start()
            for _ in range(200):  # until the second waits for the first's lock (a bounded look, no timing)
                if raw("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")[0][0]:
                    break
                time.sleep(0.02)
            one.commit()
            waiting.join()
        _check(grandbo, raw, "acme")


_ENTRY_WRITE = re.compile(r"\s*(?:UPDATE|INSERT INTO|DELETE FROM) memory_entries\b")


def _entry_writes(monkeypatch: pytest.MonkeyPatch, work: Callable[[], object]) -> int:
    """How many statements writing `memory_entries` psycopg sends while `work` runs: an `executemany` sends one a
    row, and each runs migration 34's statement-level triggers."""
    sent: list[str] = []
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def on_execute(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(str(query))
        return execute(self, query, params, **kwargs)

    def on_executemany(self, query, params_seq, **kwargs):  # type: ignore[no-untyped-def]
        rows = list(params_seq)
        sent.extend([str(query)] * len(rows))
        return executemany(self, query, rows, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(psycopg.Cursor, "execute", on_execute)
        patched.setattr(psycopg.Cursor, "executemany", on_executemany)
        work()
    return sum(1 for sql in sent if _ENTRY_WRITE.match(sql))


@pytest.fixture
def acme(grandbo, backend):  # type: ignore[no-untyped-def]
    """Two batches of `rederive` of entries in acme, and an entry in beta."""
    if backend == "sqlite":
        pytest.skip("SQLite's triggers run once a row, whatever the statement")
    acme = grandbo.org("acme", create=True)
    acme.remember_many([{"title": f"consumer lag on partition {n}", "body": "the orders topic fell behind"}
                        for n in range(_MANY)])  # fmt: skip
    grandbo.org("beta", create=True).remember({"title": "consumer lag on beta's own partition"})
    return acme


_MANY = REDERIVE_BATCH + 500


def test_a_language_change_writes_the_terms_a_batch_at_a_time(grandbo, raw, acme, monkeypatch):
    """A language change derives every entry's terms again, holding the org's writer lock: a batch of rows is one
    statement, not one a row (each with the triggers' three statements), and the terms and answers are the same."""
    hits = [hit.entry.id for hit in acme.recall("consumer lagging behind").hits]
    writes = _entry_writes(monkeypatch, lambda: acme.org_settings.set_language("german"))
    assert writes == math.ceil(_MANY / REDERIVE_BATCH)
    assert acme.rebuild().identical and acme.recall("consumer lagging behind").hits
    _check(grandbo, raw, "acme", "beta")
    assert _entry_writes(monkeypatch, lambda: acme.org_settings.set_language("auto")) == 2
    assert [hit.entry.id for hit in acme.recall("consumer lagging behind").hits] == hits
    assert _entry_writes(monkeypatch, lambda: acme.org_settings.set_language("auto")) == 0  # nothing changed


def test_a_replacing_rebuild_writes_the_entries_a_step_at_a_time(grandbo, raw, acme, monkeypatch):
    """`rebuild --replace` writes every row again, holding the org's writer lock: a step of rows is one
    statement, and the rows are those the log replays to."""
    before = sorted(acme.entries(), key=lambda entry: entry.id)
    raw("UPDATE memory_entries SET title = 'tampered', status = 'retired' WHERE org_id = %s", ("acme",), "acme")
    assert acme.stats().total == 0
    writes = _entry_writes(monkeypatch, lambda: acme.rebuild(replace=True))
    assert writes == 1 + math.ceil(_MANY / 500)  # the delete, then a statement a step
    assert sorted(acme.entries(), key=lambda entry: entry.id) == before and acme.rebuild().identical
    _check(grandbo, raw, "acme", "beta")
