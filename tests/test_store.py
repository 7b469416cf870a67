"""The store's contracts: an append-only log, a rebuildable projection, migrations, the outbox."""

import sqlite3

import pytest

from grandbo.errors import EntryStateError, InvalidInputError, MigrationError, NotFoundError
from grandbo.model import EventType, Status, utcnow
from grandbo.ports import NewEvent
from grandbo.retrieval.text import index_terms
from grandbo.store.base import Given
from grandbo.store.sqlite.migrations import MIGRATIONS
from grandbo.store.sqlite.store import SQLiteStore
from tests.conftest import RAW_ERRORS
from tests.test_server_errors import file_locked


def test_event_log_is_append_only(memory, raw):
    memory.remember({"title": "first memory", "body": "text"})
    with pytest.raises(RAW_ERRORS, match="append-only"):
        raw("UPDATE memory_events SET actor = 'tamper'", org="acme")


def test_every_write_lands_in_the_log_with_actor_and_order(memory):
    entry = memory.remember({"title": "checkout-api timeouts", "body": "pool exhausted"}, actor="alice")
    fixed = memory.correct(entry.id, {"body": "pool exhausted by a retry storm"}, reason="root cause", actor="bob")
    memory.retire(fixed.id, reason="obsolete", actor="carol")
    old_history = memory.history(entry.id)
    assert [(e.type, e.actor) for e in old_history] == [(EventType.REMEMBERED, "alice"), (EventType.CORRECTED, "bob")]
    assert old_history[1].payload["superseded_by"] == fixed.id
    assert [e.type for e in memory.history(fixed.id)] == [EventType.REMEMBERED, EventType.RETIRED]
    assert memory.get(entry.id).status is Status.SUPERSEDED
    assert memory.get(fixed.id).status is Status.RETIRED and memory.get(fixed.id).supersedes == entry.id


def test_rebuild_reproduces_the_projection_exactly(grandbo, memory, raw, store):
    for n in range(20):
        memory.remember({"title": f"incident {n} on checkout-api", "body": f"body {n}", "tags": [f"INC-{n:03d}"]})
    first = memory.remember({"title": "to correct", "body": "wrong"})
    memory.correct(first.id, {"body": "right"}, reason="typo")
    memory.retire(memory.entries()[3].id, reason="dup")
    before = store.entries("acme", include_inactive=True)
    raw("DELETE FROM memory_entries", org="acme")  # lose the projection entirely
    assert store.entries("acme", include_inactive=True) == []
    result = store.rebuild("acme")
    assert result.missing == sorted(e.id for e in before) and not result.replaced  # compared, nothing written
    assert store.entries("acme", include_inactive=True) == []
    result = store.rebuild("acme", replace=True)
    assert result.entries == len(before) and result.replaced
    assert store.entries("acme", include_inactive=True) == before
    assert store.rebuild("acme").identical


@pytest.mark.brief_lock_waits
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the embedded store's one write lock
def test_a_rebuilds_compare_holds_no_write_lock_and_its_replacement_keeps_a_write_made_meanwhile(
    memory, raw, store, settings, backend
):
    """Under the embedded store's one write lock, the compare of an org of 40,000 entries held every org's writes for
    15 s, and another org's write through a server was refused `store_busy` (probe 24). The compare reads a snapshot
    now: it answers while another process holds the file's write lock. A replacement is written under the lock, from
    the log as it is then: an entry written after the snapshot is kept."""
    kept = [memory.remember({"title": f"incident {n} on checkout-api", "body": f"body {n}"}) for n in range(5)]
    raw("DELETE FROM memory_entries WHERE entry_id = %s", (kept[0].id,), org="acme")
    with file_locked(settings):
        compared = store.rebuild("acme")
    assert compared.missing == [kept[0].id] and not compared.replaced
    meanwhile: list[str] = []

    def write_once_the_log_is_read(statement: str) -> None:
        if "FROM memory_events WHERE org_id" in statement and "ORDER BY seq" in statement and not meanwhile:
            meanwhile.append(memory.remember({"title": "written during the replay", "body": "kept"}).id)

    store.trace(write_once_the_log_is_read)
    try:
        replaced = store.rebuild("acme", replace=True)
    finally:
        store.trace(None)
    assert replaced.replaced and meanwhile
    assert {entry.id for entry in store.entries("acme")} == {entry.id for entry in kept} | set(meanwhile)
    assert store.rebuild("acme").identical


def test_entry_and_its_embed_job_commit_together(grandbo, raw, store):
    store.ensure_org("acme")
    payload = {"title": "t", "body": "b", "kind": "fact", "source": "admin", "occurred_at": utcnow().isoformat()}
    store.append("acme", [NewEvent("e1", EventType.REMEMBERED, payload, "test", utcnow())])
    assert raw("SELECT org_id, entry_id FROM embed_outbox", org="acme") == [("acme", "e1")]
    assert store.corpus_stats("acme", 5).pending == 1


def test_a_failed_write_leaves_no_trace(grandbo, memory, store):
    memory.remember({"id": "dup", "title": "first", "body": "b"})
    with pytest.raises(EntryStateError, match="already exists"):
        memory.remember_many([{"id": "fresh", "title": "fresh"}, {"id": "dup", "title": "again"}])
    assert store.get_many("acme", ["fresh"]) == {}
    assert len(store.events("acme")) == 1


def test_corrections_only_apply_to_active_entries(memory):
    entry = memory.remember({"title": "a memory", "body": "b"})
    newer = memory.correct(entry.id, {"title": "a better memory"})
    with pytest.raises(EntryStateError, match=f"successor '{newer.id}'"):
        memory.correct(entry.id, {"title": "again"})
    memory.retire(newer.id)
    with pytest.raises(EntryStateError, match="retired"):
        memory.retire(newer.id)
    with pytest.raises(NotFoundError):
        memory.retire("no-such-entry")


def test_a_correction_that_changes_nothing_is_refused_and_keeps_the_entry(memory):
    entry = memory.remember({"id": "RB-1", "title": "Flush the cache", "body": "1. flush", "services": ["Auth"]})
    for same in ({}, {"title": "Flush the cache"}, {"services": ["auth"]}, {"body": "1. flush", "tags": []}):
        with pytest.raises(InvalidInputError, match="Nothing to correct"):
            memory.correct(entry.id, same, reason="root cause found")
    assert memory.get("RB-1").status.value == "active" and memory.stats().total == 1
    assert memory.correct(entry.id, {"body": "1. flush\n2. scale"}).supersedes == "RB-1"


def test_correct_many_corrects_every_entry_in_one_transaction_or_none(memory):
    # A re-import's corrections of a chunk go in one transaction (one each was two thirds of its time).
    a, b, c = (memory.remember({"id": f"e{n}", "title": f"entry {n}", "body": "old"}) for n in range(3))
    done = memory.correct_many([(a.id, {"body": "new a"}, "re-import"), (b.id, {"body": "new b"}, "other")],
                               actor="import")  # fmt: skip
    assert [(entry.supersedes, entry.body) for entry in done] == [("e0", "new a"), ("e1", "new b")]
    assert memory.history("e1")[-1].payload == {"superseded_by": done[1].id, "reason": "other"}
    with pytest.raises(EntryStateError, match="superseded"):  # e0 is no longer active: nothing written
        memory.correct_many([(c.id, {"body": "new c"}, ""), (a.id, {"body": "again"}, "")], actor="import")
    assert memory.get("e2").status.value == "active" and memory.get("e2").body == "old"
    with pytest.raises(NotFoundError, match="no-such"):
        memory.correct_many([(c.id, {"body": "new c"}, ""), ("no-such", {"body": "x"}, "")], actor="import")
    assert memory.correct_many([], actor="import") == []


def test_migrations_are_recorded_and_run_once_on_sqlite(tmp_path):
    store = SQLiteStore(tmp_path / "g.db", index_terms)
    assert store.schema_versions() == [version for version, _, _ in MIGRATIONS]
    store.close()
    again = SQLiteStore(tmp_path / "g.db", index_terms)  # re-opening applies nothing twice
    assert again.schema_versions() == [version for version, _, _ in MIGRATIONS]
    again.close()


def test_a_sqlite_store_from_a_newer_release_is_refused(tmp_path):
    SQLiteStore(tmp_path / "g.db", index_terms).close()
    with sqlite3.connect(tmp_path / "g.db") as raw:
        raw.execute("INSERT INTO schema_migrations VALUES (999, 'future', 'now')")
    with pytest.raises(MigrationError, match="newer release"):
        SQLiteStore(tmp_path / "g.db", index_terms)


def test_vectors_carry_provider_model_and_dimension(memory, raw, backend):
    memory.remember({"title": "vector stamped", "body": "b"})
    assert raw("SELECT provider, model, dimension FROM entry_vectors", org="acme") == [
        ("deterministic", "feature-hash-v1", 384)
    ]
    if backend == "sqlite":
        assert raw("SELECT length(vector) FROM entry_vectors") == [(384 * 4,)]
        with pytest.raises(RAW_ERRORS):
            raw("UPDATE entry_vectors SET dimension = 5")  # vector bytes and dimension must agree
    else:
        assert raw("SELECT vector_dims(embedding) FROM entry_vectors", org="acme") == [(384,)]
        with pytest.raises(RAW_ERRORS, match="expected 384 dimensions"):
            raw("UPDATE entry_vectors SET embedding = '[1,2,3]'", org="acme")


def test_an_index_warm_in_one_process_sees_another_process_drop_and_recreate_the_org(grandbo, settings):
    from grandbo.service import Grandbo

    memory = grandbo.org("acme", create=True)
    memory.remember({"id": "old", "title": "ghost memory about disk pressure", "body": "disk full"})
    topic = "memory about disk pressure and a full disk"
    assert [h.entry.id for h in memory.recall(topic, arm="lexical").hits] == ["old"]
    at_once = settings.model_copy(update={"key_cache_seconds": 0})  # made again at once, not 2.25 s after
    with Grandbo.open(at_once) as other:  # another process, as far as the first store can tell
        other.drop_org("acme")
        other.org("acme", create=True).remember(
            {"id": "new", "title": "fresh memory about disk pressure", "body": "disk full"}
        )
    assert [h.entry.id for h in memory.recall(topic, arm="lexical").hits] == ["new"]


def test_a_nul_character_is_refused_with_the_field_named_and_nothing_is_written(memory):
    from grandbo.errors import InvalidInputError

    for bad in ({"title": "disk\x00full"}, {"title": "disk full", "body": "a\x00b"},
                {"title": "disk full", "meta": {"notes": ["ok", "a\x00b"]}}):  # fmt: skip
        with pytest.raises(InvalidInputError, match="NUL character") as caught:
            memory.remember_many([{"title": "a fine memory"}, bad])
        assert caught.value.detail["errors"][0]["field"] in ("title", "body", "meta")
    assert memory.stats().total == 0


def test_a_large_append_applies_every_event_in_order_or_none(grandbo, raw, store):
    """Thousands of events in one append (Postgres writes them in steps, building the next step while the
    server inserts the last): later events see earlier ones, and a failure anywhere writes nothing."""
    import numpy as np

    store, now = store, utcnow()
    store.ensure_org("acme")

    def remembered(n):
        payload = {
            "title": f"memory {n}",
            "body": "b",
            "kind": "fact",
            "source": "import",
            "occurred_at": now.isoformat(),
        }
        return NewEvent(f"e{n}", EventType.REMEMBERED, payload, "test", now)

    events = [remembered(n) for n in range(2500)]
    events += [NewEvent(entry_id, EventType.RETIRED, {"reason": "dup"}, "test", now) for entry_id in ("e5", "e1500")]
    vectors = {f"e{n}": np.full(grandbo.space.dimension, 0.1 + n, dtype=np.float32) for n in range(0, 2500, 2)}
    entries = store.append("acme", events, Given(vectors, grandbo.space))
    assert len(entries) == 2500 and {e.id for e in entries if e.status is Status.RETIRED} == {"e5", "e1500"}
    assert [seq for (seq,) in raw("SELECT seq FROM memory_events ORDER BY seq", org="acme")] == list(range(1, 2503))
    assert raw("SELECT count(*) FROM entry_vectors", org="acme") == [(1249,)]  # e1500's went with it
    assert raw("SELECT count(*) FROM embed_outbox", org="acme") == [(1249,)]  # the odd ones but e5
    stats = store.corpus_stats("acme", 5)
    assert (stats.total, stats.readable, stats.pending) == (2498, 1249, 1249)

    with pytest.raises(EntryStateError, match="already exists"):
        store.append("acme", [remembered(n) for n in range(2500, 4600)] + [remembered(7)])
    assert raw("SELECT count(*) FROM memory_events", org="acme") == [(2502,)]
    assert store.get_many("acme", ["e2600"]) == {}


def test_an_index_warm_in_one_process_drops_vectors_another_process_re_embeds(grandbo, settings):
    from grandbo.service import Grandbo

    memory = grandbo.org("acme", create=True)
    memory.remember_many([{"id": f"e{n}", "title": f"memory number {n} about disks"} for n in range(3)])
    assert len(memory.recall("memory about disks filling up", arm="vector").hits) == 3
    with Grandbo.open(settings) as other:
        other._store.switch_space(other.space, every_entry=True)  # vectors dropped, jobs queued, none embedded yet
    assert memory.recall("memory about disks filling up", arm="vector").hits == []


def test_an_index_warm_in_one_process_serves_entries_as_another_process_left_them(grandbo, settings):
    """The index caches entries as it refreshes; several changes to one entry between two refreshes
    must leave only its last state in the cache."""
    from grandbo.service import Grandbo

    memory = grandbo.org("acme", create=True)
    memory.remember_many(
        [
            {"id": "a", "title": "disk pressure on the ledger database", "body": "the disk filled up"},
            {"id": "b", "title": "disk pressure on the search cluster", "body": "the disk filled up"},
        ]
    )
    topic = "disk pressure after the disk filled up"
    assert {h.entry.id for h in memory.recall(topic, arm="lexical").hits} == {"a", "b"}
    with Grandbo.open(settings) as other:
        theirs = other.org("acme", create=True)
        theirs.remember({"id": "c", "title": "disk pressure on the queue brokers", "body": "the disk filled up"})
        theirs.correct("c", {"id": "c2", "body": "the disk filled up with dead letters"})
        theirs.retire("b")
        theirs.remember({"id": "d", "title": "disk pressure on the build farm", "body": "the disk filled up"})
        theirs.retire("d")
    hits = {h.entry.id: h.entry for h in memory.recall(topic, arm="lexical").hits}
    assert set(hits) == {"a", "c2"}
    assert hits["c2"].body == "the disk filled up with dead letters"
    read = memory.get_many(["a", "b", "c", "c2", "d"])
    assert {entry_id: entry.status for entry_id, entry in read.items()} == {
        "a": Status.ACTIVE, "b": Status.RETIRED, "c": Status.SUPERSEDED, "c2": Status.ACTIVE, "d": Status.RETIRED
    }  # fmt: skip


def test_vectors_of_the_wrong_count_are_refused_before_anything_is_written(memory):
    from grandbo.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="3 vectors for 1000 entries"):
        memory.remember_many([{"title": f"memory {n} about disks"} for n in range(1000)], vectors=[None] * 3)
    assert memory.stats().total == 0


def test_re_ranking_sees_weights_another_process_changed(grandbo, settings):
    from grandbo.model import RerankWeights
    from grandbo.service import Grandbo

    memory = grandbo.org("acme", create=True)
    memory.remember({"title": "disk pressure on the ledger database", "body": "the disk filled up"})
    topic = "disk pressure after the disk filled up"
    before = memory.recall(topic).hits[0].why.rerank
    assert before.similarity.weight == 0.40
    with Grandbo.open(settings) as other:
        other.org("acme", create=True).org_settings.set_rerank(RerankWeights(similarity=0.9, service=0.0, severity=0.0))
    after = memory.recall(topic).hits[0].why.rerank
    assert (after.similarity.weight, after.service.weight) == (0.9, 0.0)


# ------------------------------------------------------------------------------------ documents read as changes


def test_documents_changed_since_a_version_per_collection(grandbo):
    """Both backends: a collection's own version, and what changed in it after a version (deleted ids apart);
    another organization's writes are neither."""
    from grandbo.ports import DocumentWrite

    docs, other = grandbo.org("acme", create=True)._documents, grandbo.org("other", create=True)._documents
    docs.put([DocumentWrite("alert", f"a{n}", {"n": n}, "received") for n in range(3)], "test")
    docs.put([DocumentWrite("service", "auth", {"name": "auth"}, "put")], "test")
    alerts_at, services_at = docs.version(["alert"]), docs.version(["service"])
    assert services_at == docs.version() > alerts_at > 0 and docs.version(["nothing"]) == 0
    docs.put([DocumentWrite("alert", "a1", {"n": 10}, "updated"), DocumentWrite("alert", "a3", {"n": 3}, "received")],
             "test")  # fmt: skip
    docs.put([DocumentWrite("alert", "a0", None, "deleted")], "test")
    other.put([DocumentWrite("alert", "a2", {"n": 99}, "received")], "test")
    changed, gone = docs.changed("alert", alerts_at)
    assert {d.doc_id: d.data["n"] for d in changed} == {"a1": 10, "a3": 3} and gone == ["a0"]
    assert docs.changed("alert", docs.version(["alert"])) == ([], [])
    assert docs.version(["service"]) == services_at  # the alerts' writes are not the catalog's
    assert [d.data["n"] for d in other.changed("alert", 0)[0]] == [99]


def test_a_write_of_many_documents_checks_and_numbers_them_in_order(grandbo):
    """Both backends: one call's writes are checked against the versions stored before it and numbered in the
    order given (a document written twice in one call: versions 1 and 2; deleted and written again: 1), with
    one time; a write expecting another version refuses the whole call, before anything is written, whatever
    its place; more documents than one read of their versions takes are numbered as well."""
    from grandbo.errors import ConflictError
    from grandbo.ports import DocumentWrite
    from grandbo.store.sql.dialect import CHUNK

    docs = grandbo.org("acme", create=True)._documents
    docs.put([DocumentWrite("alert", "kept", {"n": 0}, "received")], "test")
    written = docs.put([
        DocumentWrite("alert", "twice", {"n": 1}, "received"),
        DocumentWrite("group", "twice", {"n": 1}, "opened"),  # the same id in another collection: its own
        DocumentWrite("alert", "twice", {"n": 2}, "updated", expected_version=1),
        DocumentWrite("alert", "kept", {"n": 1}, "updated", expected_version=1),
        DocumentWrite("alert", "kept", None, "deleted"),
        DocumentWrite("alert", "kept", {"n": 2}, "received", expected_version=0),
    ], "test")  # fmt: skip
    assert [(d.collection, d.doc_id, d.version, d.data["n"]) for d in written] == [
        ("alert", "twice", 1, 1), ("group", "twice", 1, 1), ("alert", "twice", 2, 2), ("alert", "kept", 2, 1),
        ("alert", "kept", 1, 2),
    ]  # fmt: skip
    assert len({d.updated_at for d in written}) == 1
    stored = docs.get("alert", "twice")
    assert stored is not None and (stored.version, stored.data, stored.updated_at) == (
        2,
        {"n": 2},
        written[0].updated_at,
    )
    assert [event["type"] for event in docs.history("alert", "kept")] == ["received", "updated", "deleted", "received"]
    before = docs.version()
    with pytest.raises(ConflictError):
        docs.put([DocumentWrite("alert", "new", {"n": 1}, "received"),
                  DocumentWrite("alert", "twice", {"n": 3}, "updated", expected_version=1)], "test")  # fmt: skip
    assert docs.get("alert", "new") is None and docs.version() == before
    many = [DocumentWrite("alert", f"m{n:04d}", {"n": n}, "received") for n in range(CHUNK + 3)]
    docs.put(many, "test")
    again = docs.put([DocumentWrite(w.collection, w.doc_id, {"n": -1}, "updated", expected_version=1) for w in many],
                     "test")  # fmt: skip
    assert {d.version for d in again} == {2}


def test_the_oldest_documents_come_by_write_time_a_page_at_a_time_with_only_the_keys_asked(grandbo, raw, backend):
    """Both backends: the documents last written before a time, the oldest first (ties by id), paged past the
    last one a caller has; with `keys`, each one's data holds only those keys that are set (data that is not an
    object comes whole). On SQLite a time kept with another UTC offset (as a document loaded from an export
    keeps it) sorts by its instant, not by its text."""
    from datetime import timedelta, timezone

    from grandbo.ports import DocumentWrite

    docs, other = grandbo.org("acme", create=True)._documents, grandbo.org("other", create=True)._documents
    held = {"recall": {"ranked": ["a long explanation"] * 50}, "error": None}
    docs.put([DocumentWrite("alert", i, {"alert": {"id": i}, **held}, "received") for i in "abcde"], "test")
    docs.put([DocumentWrite("service", "s", {"name": "s"}, "put")], "test")
    other.put([DocumentWrite("alert", "o", {"alert": {"id": "o"}}, "received")], "test")
    now = utcnow()
    written = {"d": now - timedelta(days=40), "a": now - timedelta(days=30), "c": now - timedelta(days=30),
               "e": now - timedelta(days=1)}  # fmt: skip
    # An hour after a and c, written as a time 5 hours behind UTC: its text sorts before theirs.
    written["b"] = (written["a"] + timedelta(hours=1)).astimezone(timezone(timedelta(hours=-5)))
    for doc_id, when in written.items():
        raw("UPDATE documents SET updated_at = %s WHERE org_id = 'acme' AND collection = 'alert' AND doc_id = %s",
            (when.isoformat(), doc_id), org="acme")  # fmt: skip
    raw("UPDATE documents SET updated_at = %s WHERE org_id = 'other' AND collection = 'alert'",
        (written["d"].isoformat(),), org="other")  # fmt: skip
    cast = "::jsonb" if backend == "postgres" else ""
    raw(f"UPDATE documents SET data = %s{cast} WHERE org_id = 'acme' AND doc_id = 'd'", ('["not", "an", "object"]',),
        org="acme")  # fmt: skip
    before = now - timedelta(days=10)
    assert [d.doc_id for d in docs.oldest("alert", before, 10)] == ["d", "a", "c", "b"]
    pages, after = [], None
    while page := docs.oldest("alert", before, 2, after=after):
        pages.append([d.doc_id for d in page])
        after = (page[-1].updated_at, page[-1].doc_id)
    assert pages == [["d", "a"], ["c", "b"]]  # the page boundary falls inside the tie of a and c
    picked = {d.doc_id: d.data for d in docs.oldest("alert", before, 10, keys=("alert", "error", "missing"))}
    assert picked == {"d": ["not", "an", "object"], **{i: {"alert": {"id": i}} for i in "acb"}}
    assert docs.oldest("alert", before, 10)[1].data == {"alert": {"id": "a"}, **held}  # without keys: whole
    assert {d.doc_id: d.data for d in docs.find("alert", keys=("alert",))}["e"] == {"alert": {"id": "e"}}
    assert [d.doc_id for d in other.oldest("alert", before, 10)] == ["o"]


def test_the_newest_and_ranged_documents_come_with_only_the_keys_asked(grandbo):
    """Both backends: `newest` and `ranged` with `keys` give each document's data with those keys only (an org's
    alerts read for a triage without the recall and plan kept with each), matched as without."""
    from grandbo.ports import DocumentWrite

    docs = grandbo.org("acme", create=True)._documents
    held = {"recall": {"ranked": ["a long explanation"] * 50}, "plan": None}
    docs.put([DocumentWrite("alert", f"a{n}", {"id": f"a{n}", "alert": {"service": f"s{n % 2}"}, **held}, "received",
                            ref="manual") for n in range(5)], "test")  # fmt: skip
    found = docs.newest("alert", 10, match={("alert", "service"): "s1"}, keys=("id", "alert", "plan"))
    assert [d.data for d in found] == [{"id": f"a{n}", "alert": {"service": "s1"}} for n in (3, 1)]
    assert docs.newest("alert", 1, keys=("id",))[0].data == {"id": "a4"}
    assert [d.data for d in docs.ranged("alert", None, None, 2, keys=("id",))] == [{"id": "a0"}, {"id": "a1"}]
