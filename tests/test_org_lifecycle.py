"""An organization's lifecycle: a drop takes every write in flight with it, and an org created again under the
same name is a new org, which sees none of the old one's rows, entries, cached entries, keys or console pages,
in this process or another."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from grandbo.errors import NotAuthorizedError, NotFoundError
from grandbo.ports import EmbedResult
from grandbo.service import Grandbo
from grandbo.store.base import DROPPED, ORG_TABLES
from tests.conftest import owner_url
from tests.serving import serving
from tests.test_console_http import signed_in

OLD = {"id": "OLD-1", "title": "walrus-cache stampede after a cold start", "body": "the old org's finding"}


def _rows_of(url: str, org: str) -> dict[str, int]:
    """Every org table's rows of `org`, counted by the owner inside a transaction scoped to `org`."""
    with psycopg.connect(owner_url(url)) as conn:
        conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
        return {
            t: conn.execute(f"SELECT count(*) FROM {t} WHERE org_id = %s", (org,)).fetchone()[0] for t in ORG_TABLES
        }


class _Blocker:
    """An owner's transaction holding `memory_entries` in SHARE mode: an append (which inserts entry rows after
    taking its org's row and writing its events) and a drop (which deletes them) wait for it, in the middle of
    their transactions, until it ends."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(owner_url(url))
        self._conn.execute("LOCK TABLE memory_entries IN SHARE MODE")
        self._url = url

    def wait_for_waiters(self, count: int) -> None:
        _wait_for_waiters(self._url, count)

    def release(self) -> None:
        self._conn.rollback()
        self._conn.close()


def _wait_for_waiters(url: str, count: int) -> None:
    """Until `count` sessions of this database wait on a lock (bounded; the threads' state is what counts)."""
    _until(lambda: _waiters(url) >= count, f"{count} sessions waiting on a lock")


def _waiters(url: str) -> int:
    """How many sessions of this database wait on a lock."""
    with psycopg.connect(owner_url(url), autocommit=True) as conn:
        (waiting,) = conn.execute(
            "SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.datname = current_database()"
        ).fetchone()
    return int(waiting)


def _until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    """Until `condition()` holds (bounded)."""
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"never came: {what}")
        time.sleep(0.02)


def _run(target, outcome: dict[str, object], name: str) -> threading.Thread:  # type: ignore[no-untyped-def]
    def body() -> None:
        try:
            outcome[name] = target()
        except Exception as error:
            outcome[name] = error

    thread = threading.Thread(target=body, name=name)
    thread.start()
    return thread


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_write_in_flight_when_the_org_is_dropped_is_deleted_with_it(grandbo, database_url):
    """The write holds the org's row (it is mid-transaction, its events written, its entries waiting); the drop
    waits for it and then deletes what it wrote. Before, the drop passed its rows by and deleted the org's row
    last, after the write committed: its event, entry and embed job outlived the org."""
    memory = grandbo.org("acme", create=True)
    blocker, outcome = _Blocker(database_url), {}
    write = _run(lambda: memory.remember(OLD), outcome, "write")
    blocker.wait_for_waiters(1)  # the write holds the org's row, waiting to insert its entry
    drop = _run(lambda: grandbo.drop_org("acme"), outcome, "drop")
    blocker.wait_for_waiters(2)  # the drop waits too
    blocker.release()
    write.join(60)
    drop.join(60)
    assert not isinstance(outcome["drop"], Exception), outcome
    assert _rows_of(database_url, "acme") == dict.fromkeys(ORG_TABLES, 0), outcome
    again = grandbo.org("acme", create=True)
    assert again.stats().total == 0 and again.find("OLD-1") is None
    assert again.recall("walrus-cache stampede after a cold start").hits == []


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_write_that_comes_while_the_org_is_being_dropped_fails_cleanly(grandbo, database_url):
    """The drop holds the org's row (mid-transaction); a write waits for it and is then refused with
    NotFoundError, writing nothing. Before, the write took the row the drop had not locked yet, and committed
    after the drop's deletes."""
    memory = grandbo.org("acme", create=True)
    memory.remember({"title": "an entry the drop has to delete", "body": "so the drop waits on the blocker"})
    blocker, outcome = _Blocker(database_url), {}
    drop = _run(lambda: grandbo.drop_org("acme"), outcome, "drop")
    blocker.wait_for_waiters(1)  # the drop holds the org's row, waiting to delete its entries
    write = _run(lambda: memory.remember(OLD), outcome, "write")
    blocker.wait_for_waiters(2)  # the write waits too
    blocker.release()
    drop.join(60)
    write.join(60)
    assert isinstance(outcome["write"], NotFoundError), outcome
    assert _rows_of(database_url, "acme") == dict.fromkeys(ORG_TABLES, 0)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_workers_vectors_for_an_org_being_dropped_go_with_it(settings, database_url):
    """A worker completes its jobs while the drop is mid-transaction (its vectors deleted, its entries not yet):
    the completion waits for the drop and writes nothing. Before, it wrote the vectors (the entries were still
    there to read) after the drop had deleted the org's vectors, and they outlived the org."""
    with Grandbo.init(settings, embedding="deterministic"):
        pass
    with Grandbo.open(settings, background=True, embed_here=False) as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember(OLD)  # left to the workers: its job waits in the outbox
        store, space = grandbo._store, grandbo.space
        jobs = store.claim_jobs(10, 5)
        assert [job.entry_id for job in jobs] == ["OLD-1"]
        vectors = grandbo.provider().embed([job.text for job in jobs], "document")
        blocker, outcome = _Blocker(database_url), {}
        drop = _run(lambda: grandbo.drop_org("acme"), outcome, "drop")
        blocker.wait_for_waiters(1)  # the drop holds the org's row, waiting to delete its entries
        results = [EmbedResult(job, vector) for job, vector in zip(jobs, vectors, strict=True)]
        complete = _run(lambda: store.complete_jobs(space, results), outcome, "complete")
        blocker.wait_for_waiters(2)  # the completion waits for the drop
        blocker.release()
        drop.join(60)
        complete.join(60)
        assert outcome["complete"] == 0, outcome
        assert _rows_of(database_url, "acme") == dict.fromkeys(ORG_TABLES, 0)


def test_a_write_after_the_drop_is_refused_on_both(grandbo):
    """A handle taken before the drop writes nothing after it, entries or documents, on either backend (the
    embedded store has one writer at a time: each write checks the org inside its own transaction)."""
    memory = grandbo.org("acme", create=True)
    grandbo.drop_org("acme")
    with pytest.raises(NotFoundError):
        memory.remember(OLD)
    with pytest.raises(NotFoundError):
        memory.keys.create("admin", name="late")
    assert grandbo.org("acme", create=True).stats().total == 0


def test_an_org_created_again_sees_nothing_of_the_one_dropped(grandbo, settings):
    """Another process drops the org and creates it again; this one had it warm (its index, its entries, a
    verified key, its snapshot). The new org is a new generation: none of those are served to it."""
    old = grandbo.org("acme", create=True)
    old.remember(OLD)
    key = old.keys.create("read", name="old")[1]
    assert old.recall("walrus-cache stampede after a cold start").hits  # warm: index and entries
    assert grandbo.authenticate(key)[1].name == "old"  # the key is verified and kept
    assert grandbo.settings.key_cache_seconds > 0
    generation = old.generation()
    with Grandbo.open(settings) as other:
        other.drop_org("acme")
        other.org("acme", create=True).remember({"title": "the new org's own entry", "body": "nothing else"})
    new = grandbo.org("acme")
    assert new.generation() not in (None, generation)
    # Reading the new org (its recall reads its marks) tells this process of the new generation: from then on
    # the old org's key, verified a moment ago and within the cache's window, is not trusted for it.
    assert new.recall("walrus-cache stampede after a cold start").hits == []
    assert new.find("OLD-1") is None and [e.title for e in new.entries()] == ["the new org's own entry"]
    with pytest.raises(NotAuthorizedError):  # within the key cache's window: the old org's key is not the new one's
        grandbo.authenticate(key)


def test_the_console_never_shows_a_dropped_orgs_entries_to_its_successor(grandbo, settings):
    """The console keeps each org's entries between pages. Another process drops the org and creates it again
    with as many entries (so a count cannot tell them apart) and a key; the new org's listing shows only its
    own. Before, the kept entries were keyed by the org's name and sequence number, both the same again."""
    old = grandbo.org("alpha", create=True)
    old.remember({**OLD, "title": "alpha-old walrus-cache stampede"})
    key = old.keys.create("read", name="old")[1]
    with serving(grandbo) as served:
        session = signed_in(served, key)
        assert "alpha-old" in session.get("/ui/memory").text  # the console keeps them now
        with Grandbo.open(settings) as other:
            other.drop_org("alpha")
            new = other.org("alpha", create=True)
            new.remember({"title": "alpha-new zebra-queue poison message", "body": "the successor's"})
            new_key = new.keys.create("read", name="new")[1]
        page = signed_in(served, new_key).get("/ui/memory").text
        stale = session.get("/ui/memory")  # the old org's session: its key is not the new org's
    assert "alpha-new" in page and "alpha-old" not in page
    assert stale.status_code == 303 and "/ui/sign-in" in stale.headers["location"]


def test_an_org_created_again_right_after_its_drop_waits_out_every_process_s_key_cache(settings):
    """A process trusts a key it verified for GRANDBO_KEY_CACHE_SECONDS without reading the store. An org dropped and
    created again within that window (a scripted reset, 0.08 s) let the old org's key read and write the new org in
    a process that had verified it (probe 16). The new org is now created only once that window has passed since the
    drop, in whichever process asks, so no process trusts an old key any more."""
    window = 1.0
    settings = settings.model_copy(update={"key_cache_seconds": window})
    with Grandbo.init(settings, embedding="deterministic") as server:
        old = server.org("acme", create=True)
        key = old.keys.create("write", name="old")[1]
        assert server.authenticate(key)[1].name == "old"  # verified, and trusted for the window
        with Grandbo.open(settings) as operator:
            operator.drop_org("acme")
            operator.create_org("acme")  # at once, as a script resetting the org would
            operator.org("acme").remember({"title": "the new org's own entry"})
        # The key this server trusted is read again (its window is over): the new org has no such key.
        with pytest.raises(NotAuthorizedError):
            server.authenticate(key)


def test_only_a_drop_of_an_org_that_had_a_key_makes_the_next_one_of_its_name_wait(grandbo, store):
    """The wait for every process's key cache (above) is for a dropped org's keys: an org that never had one (the
    demo's own, `grandbo demo` run again) is made again at once, and one whose only key was revoked still waits (a
    revoked key's document stays, and another process may trust it till its window ends). Before, every drop was
    recorded, and the demo slept 2.25 s to replace its keyless org."""
    keyless = grandbo.org("keyless", create=True)
    keyless.remember(OLD)
    keyed = grandbo.org("keyed", create=True)
    record, _ = keyed.keys.create("read", name="old")
    keyed.keys.revoke(record.id)
    for name in ("keyless", "keyed", "never-made"):
        grandbo.drop_org(name)
    assert store.since_dropped("keyless") is None and store.since_dropped("never-made") is None
    assert store.since_dropped("keyed") is not None
    grandbo.org("keyless", create=True)  # at once, and empty
    assert grandbo.org("keyless").find("OLD-1") is None


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_create_racing_a_drop_waits_out_the_key_caches_after_it(settings, database_url):
    """A create that read no drop of the name, and then made the org once a drop committed (its insert waited for
    the drop's delete of the row), waits out every process's key cache from that drop, as one that read it does.
    Before, it returned at once. The drop is an owner's transaction holding the org's row deleted, the drop
    recorded as `drop_org` records it, then committed."""
    window = 1.0
    settings = settings.model_copy(update={"key_cache_seconds": window})
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.create_org("acme")
        drop = psycopg.connect(owner_url(database_url))
        drop.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
        assert drop.execute("DELETE FROM orgs WHERE org_id = 'acme'").rowcount == 1
        outcome: dict[str, object] = {}
        create = _run(lambda: grandbo.create_org("acme"), outcome, "create")
        try:
            _wait_for_waiters(database_url, 1)  # the create's insert waits for the drop
            with psycopg.connect(owner_url(database_url), autocommit=True) as meta:  # in its own, as `drop_org`
                meta.execute("INSERT INTO store_meta (key, value) VALUES (%s, clock_timestamp()::text)",
                             (DROPPED + "acme",))  # fmt: skip
            drop.commit()
        finally:
            drop.close()
            create.join()
        assert not isinstance(outcome["create"], Exception) and "acme" in grandbo._store.orgs()  # made again
        assert grandbo._store.since_dropped("acme") >= window  # returned no sooner


def _blocked_by(url: str, pid: int) -> int:
    """How many sessions of this database wait for the session `pid`."""
    with psycopg.connect(owner_url(url), autocommit=True) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
        ).fetchone()
    return int(count)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_key_made_while_the_drop_waits_for_its_org_is_recorded_with_the_drop(settings, database_url):
    """A key whose write held the org's row when the drop came (the drop read no key before taking the row, then
    waited for it) makes the drop recorded in the drop's own transaction, so a create that waited for the drop reads
    the record and waits out the key caches. Before, the drop recorded itself only after it committed: a create in
    between made the org at once. The recording is held (an owner's lock of its row in `store_meta`, where an old
    drop of the name is recorded) until the create has either returned or come to wait for the drop."""
    window = 1.0
    settings = settings.model_copy(update={"key_cache_seconds": window})
    owner = owner_url(database_url)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.create_org("acme")
        with psycopg.connect(owner, autocommit=True) as meta:  # long enough ago to make no one wait
            meta.execute("INSERT INTO store_meta (key, value) VALUES (%s, (clock_timestamp() - interval '100 s')::text)",
                         (DROPPED + "acme",))  # fmt: skip
        key = psycopg.connect(owner)  # a key's write: the org's writer lock, then the key's document
        key.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
        key.execute("SELECT 1 FROM orgs WHERE org_id = 'acme' FOR NO KEY UPDATE")
        key.execute("INSERT INTO documents (org_id, collection, doc_id, data, version, updated_at) "
                    "VALUES ('acme', 'api_key', 'k1', '{}', 1, now())")  # fmt: skip
        record = psycopg.connect(owner)
        record.execute("SELECT 1 FROM store_meta WHERE key = %s FOR UPDATE", (DROPPED + "acme",))
        outcome: dict[str, object] = {}
        drop = _run(lambda: grandbo.drop_org("acme"), outcome, "drop")
        create: threading.Thread | None = None
        try:
            _wait_for_waiters(database_url, 1)  # the drop waits for the key's write
            key.commit()
            _until(lambda: _blocked_by(database_url, record.info.backend_pid) == 1, "the drop's record waits")
            create = _run(lambda: grandbo.create_org("acme"), outcome, "create")
            _until(lambda: not create.is_alive() or _waiters(database_url) == 2, "the create returned or waits")
        finally:
            record.rollback()
            record.close()
            key.close()
            drop.join()
            if create is not None:
                create.join()
        assert outcome["drop"] is None and not isinstance(outcome["create"], Exception) and "acme" in grandbo.orgs()
        assert grandbo._store.since_dropped("acme") >= window  # the create returned no sooner


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_of_two_creates_at_once_only_the_one_that_made_the_org_says_so(grandbo, database_url):
    """`create_org` says whether it made the org by what its insert did, not by a read before it: a create that read
    no org, and whose insert then waited for another process's create of it (an owner's transaction here), returns
    False. Before, both said they had made it (`grandbo orgs create` printed "Created" twice)."""
    other = psycopg.connect(owner_url(database_url))  # the other process's create, not committed yet
    other.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
    other.execute("INSERT INTO orgs (org_id) VALUES ('acme')")
    outcome: dict[str, object] = {}
    create = _run(lambda: grandbo.create_org("acme"), outcome, "create")
    try:
        _wait_for_waiters(database_url, 1)  # its insert waits for the other one
        other.commit()
    finally:
        other.close()
        create.join()
    assert outcome["create"] is False and "acme" in grandbo.orgs()
    assert grandbo.create_org("beta") is True and grandbo.create_org("beta") is False
