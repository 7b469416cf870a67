"""What one organization stores is counted by every write and bounded (GRANDBO_ORG_STORAGE_LIMIT_MB): one org
cannot fill the disk every org shares. The count is the JSON of its memory log and documents' history, kept in
each write's own transaction (`store.sql.storage`), the same on both backends; past the limit a write is
refused whole (507 `storage_limit`), and purging frees room again."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable

import pytest

from grandbo.config import Settings
from grandbo.errors import StaleWriteError, StorageLimitError
from grandbo.service import Grandbo
from grandbo.store.sql import storage
from grandbo.store.sql.storage import MIB
from tests.serving import serving

pytestmark = pytest.mark.timeout(180)

BODY = "replication lag on the orders database after failover; raised wal_keep_size and rebuilt the replica. "


def logged_bytes(raw, org: str) -> int:
    """The org's logs as the database holds them, sized as the store counts a write (`storage.size`)."""
    total = 0
    for statement in (
        "SELECT payload FROM memory_events WHERE org_id = %s",
        "SELECT data FROM document_events WHERE org_id = %s",
    ):
        for (value,) in raw(statement, (org,), org=org):
            total += storage.size(json.loads(value) if isinstance(value, str) else value)
    return total


def entries(count: int, start: int = 0, size: int = 1) -> list[dict[str, object]]:
    return [
        {"id": f"E{n}", "title": f"orders database lag {n}", "body": BODY * size} for n in range(start, start + count)
    ]


def test_every_write_is_counted_as_the_logs_hold_it_and_a_purge_gives_its_bytes_back(grandbo, raw):
    memory = grandbo.org("acme", create=True)
    other = grandbo.org("beta", create=True)
    assert memory.stats().stored_bytes == 0
    memory.remember_many(entries(5, size=20))
    memory.correct("E1", {"body": "corrected: " + BODY}, reason="typo")
    memory.retire("E2", reason="obsolete")
    incident = memory.incidents.open("orders database lag", services=["orders-db"])
    memory.incidents.add_finding(incident.id, "wal_keep_size too small", status="corroborated")
    memory.profile.update({"facts": {"name": "we run the orders database"}})
    other.remember_many(entries(2))

    counted = memory.stats().stored_bytes
    assert counted == logged_bytes(raw, "acme") > 0
    assert other.stats().stored_bytes == logged_bytes(raw, "beta") < counted  # each org its own

    memory.purge("E3", reason="pasted a credential", actor="alice")  # 2 KB of text gone, a short event added
    after = memory.stats().stored_bytes
    assert after == logged_bytes(raw, "acme") and after < counted - 1500
    memory.erasure.purge_text("wal_keep_size too small", reason="credential", actor="alice")
    assert memory.stats().stored_bytes == logged_bytes(raw, "acme")
    assert other.stats().stored_bytes == logged_bytes(raw, "beta")


def test_both_backends_count_the_same_writes_alike(tmp_path, pg_database):
    from tests.conftest import reset_postgres

    reset_postgres(pg_database)
    counts = []
    for url in (None, pg_database):
        with Grandbo.init(Settings(home=tmp_path / str(url is None), database_url=url), embedding="deterministic") as g:
            memory = g.org("acme", create=True)
            memory.remember_many(entries(20, size=3))
            memory.correct("E4", {"title": "orders database lag, again"}, reason="typo")
            opened = memory.incidents.open("orders lag", services=["orders-db"], incident_id="inc-1")
            memory.incidents.add_finding(opened.id, "a finding ü 日本", status="corroborated")
            memory.purge("E5", reason="mistake", actor="alice")
            counts.append(memory.stats().stored_bytes)
    assert counts[0] == counts[1] > 0


def test_past_the_limit_a_write_is_refused_whole_and_other_orgs_write_on(settings):
    with Grandbo.init(settings.model_copy(update={"org_storage_limit_mb": 1}), embedding="deterministic") as grandbo:
        memory, other = grandbo.org("acme", create=True), grandbo.org("beta", create=True)
        written, refused = 0, None
        for batch in range(100):  # about 100 KB a batch: the limit is passed within a dozen
            try:
                memory.remember_many(entries(20, start=batch * 20, size=50))
            except StorageLimitError as error:
                refused = error
                break
            written += 20
        assert refused is not None and 0 < written < 2000
        error = refused
        assert error.status == 507 and error.code == "storage_limit" and "GRANDBO_ORG_STORAGE_LIMIT_MB" in error.remedy
        assert error.detail["limit_bytes"] == MIB and error.detail["stored_bytes"] + error.detail["write_bytes"] > MIB
        stats = memory.stats()
        assert stats.total == written and stats.stored_bytes == error.detail["stored_bytes"] <= MIB  # nothing of it
        assert stats.storage_limit_bytes == MIB

        # Documents are refused alike, with nothing written; reads go on.
        with pytest.raises(StorageLimitError):
            memory.incidents.open(
                "orders lag", symptoms=[f"{n} " + "x" * 1900 for n in range(30)], incident_id="inc-big"
            )
        assert [i.id for i in memory.incidents.find()] == []
        assert memory.recall("orders database lag", 3).hits

        # What must go through still does: a key made and revoked (one leaked), a secret rotated.
        record, _ = memory.keys.create("write", name="leaked")
        memory.keys.revoke(record.id)
        memory.webhook_secrets.add("github", "a-new-signing-secret-0123456789abcdef")
        assert memory.stats().stored_bytes > error.detail["stored_bytes"]  # counted all the same

        other.remember_many(entries(20, size=50))  # another org has its own limit
        assert other.stats().total == 20

        # Purging frees room: the refused batch fits again (40 of the 200 written free twice the room it needs).
        for n in range(0, 40):
            memory.purge(f"E{n}", reason="making room", actor="alice")
        assert memory.stats().stored_bytes < stats.stored_bytes
        memory.remember_many(entries(20, start=written, size=50))


def _until_refused(write: Callable[[int], object]) -> None:
    for n in range(10_000):
        try:
            write(n)
        except StorageLimitError:
            return
    pytest.fail("never refused")


def test_at_the_limit_an_admin_still_changes_what_is_masked(settings):
    """A secret leaking into an org's writes is masked by a pattern its admin adds: before, an org at its limit was
    refused that until it had purged, as any other document."""
    with Grandbo.init(settings.model_copy(update={"org_storage_limit_mb": 1}), embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        _until_refused(lambda n: memory.remember_many(entries(5, start=n * 5, size=30)))
        _until_refused(lambda n: memory.remember({"title": f"filler {n}", "body": "x" * 100}))  # to one small entry
        patterns = {f"ticket{n}": "TCK-" + "[0-9]" * 90 for n in range(5)}  # about 2.5 KB: past what is left
        with pytest.raises(StorageLimitError):  # another document that size is refused
            memory.incidents.open("orders lag", symptoms=["x" * 2500], incident_id="inc-big")
        memory.org_settings.set_redaction(add=patterns, actor="alice")
        assert set(memory.org_settings.redaction()["extra"]) == set(patterns)
        assert memory.stats().stored_bytes > MIB  # counted all the same


def test_writes_at_once_are_counted_exactly(settings, raw):
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).incidents.open("orders lag", incident_id="inc-1")
        problems: list[BaseException] = []

        def write(start: int) -> None:
            try:
                memory = grandbo.org("acme")
                for batch in range(5):
                    memory.remember_many(entries(10, start=start + batch * 10, size=2))
                    memory.incidents.add_finding("inc-1", f"writer {start} batch {batch}")
                    with contextlib.suppress(StaleWriteError):  # refused whole, its bytes too
                        memory.profile.update({"facts": {f"writer {start}": f"batch {batch}"}})
            except BaseException as error:  # reported below
                problems.append(error)

        threads = [threading.Thread(target=write, args=(n * 1000,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not problems
        assert grandbo.org("acme").stats().stored_bytes == logged_bytes(raw, "acme")


def test_the_api_answers_507_with_the_remedy_and_stats_show_the_count(settings):
    limited = settings.model_copy(update={"org_storage_limit_mb": 1, "rate_limit_per_key": 0})
    with Grandbo.init(limited, embedding="deterministic"):
        pass
    with Grandbo.open(limited, background=True) as grandbo, serving(grandbo) as served:
        _, key = grandbo.org("acme", create=True).keys.create("write", name="test", actor="test")
        _, other_key = grandbo.org("beta", create=True).keys.create("write", name="test", actor="test")
        with served.client(key) as client, served.client(other_key) as other:
            answers = [client.post("/v1/memories", json={"title": f"lag {n}", "body": BODY * 300}) for n in range(40)]
            codes = [answer.status_code for answer in answers]
            assert 201 in codes and codes[-1] == 507, codes
            error = answers[-1].json()["error"]
            assert error["type"] == "storage_limit" and "purge" in error["remedy"] and "MiB" in error["message"]
            stats = client.get("/v1/stats").json()
            assert stats["total"] == codes.count(201) and stats["storage_limit_bytes"] == MIB
            assert 0 < stats["stored_bytes"] <= MIB
            assert other.post("/v1/memories", json={"title": "lag", "body": BODY}).status_code == 201
            assert client.get("/readyz").json()["status"] == "ready"  # one org's limit is not the store's state
