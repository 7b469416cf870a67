"""Change events kept per organization (`tiers.changes`), on both backends: idempotent by source and id, masked,
read by window in one query, paged, pruned with the alerts' retention."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from grandbo.errors import InvalidInputError, NotFoundError
from grandbo.model import utcnow
from grandbo.service import Grandbo
from grandbo.tiers.change_model import ChangeKind, NewChange
from grandbo.tiers.changes import CHANGES
from grandbo.tiers.topology import Service
from tests.conftest import owner_url

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def change(n: int, service: str = "payments-gateway", **extra: object) -> NewChange:
    fields: dict[str, object] = {"id": f"c{n}", "service": service, "summary": f"deploy v2.{n}",
                                 "version": f"v2.{n}", "at": T0 + timedelta(minutes=n)}  # fmt: skip
    return NewChange.model_validate(fields | extra)


def test_a_second_delivery_of_a_change_stores_nothing_new(memory):
    ((first, outcome),) = memory.changes.receive([change(1)], "generic")
    assert outcome == "new" and first.source == "generic"
    ((again, outcome),) = memory.changes.receive([change(1)], "generic")
    assert outcome == "unchanged" and again.received_at == first.received_at
    assert len(memory.changes.documents.history(CHANGES, "generic:c1")) == 1  # nothing written the second time


def test_another_body_for_the_same_id_replaces_it_and_the_history_keeps_the_first(memory):
    memory.changes.receive([change(1)], "generic")
    ((updated, outcome),) = memory.changes.receive([change(1, summary="deploy v2.1: failure")], "generic")
    assert updated.summary == "deploy v2.1: failure"
    assert outcome == "updated"
    assert memory.changes.get("generic:c1").summary == "deploy v2.1: failure"
    history = memory.changes.documents.history(CHANGES, "generic:c1")
    assert [event["data"]["summary"] for event in history] == ["deploy v2.1", "deploy v2.1: failure"]


def test_the_same_id_from_two_sources_is_two_changes(memory):
    memory.changes.receive([change(1)], "generic")
    memory.changes.receive([change(1)], "argocd")
    with pytest.raises(NotFoundError, match="SOURCE:ID"):
        memory.changes.get("c1")
    assert memory.changes.get("argocd:c1").source == "argocd"


def test_a_change_is_found_by_the_sources_id_alone(memory):
    memory.changes.receive([change(7)], "github")
    assert memory.changes.get("c7").version == "v2.7"
    with pytest.raises(NotFoundError, match="grandbo change list"):
        memory.changes.get("nope")


def test_text_is_masked_by_the_orgs_patterns(memory):
    memory.org_settings.set_redaction(add={"ticket": "TKT-[0-9]+"})
    secret = "ghp_" + "a" * 36  # a GitHub token: a built-in pattern
    memory.changes.receive([change(1, summary=f"deploy TKT-991 with {secret}",
                                   url=f"https://ci.example/run?token={secret}")], "generic")  # fmt: skip
    stored = memory.changes.get("generic:c1")
    assert "TKT-991" not in stored.summary and secret not in stored.summary
    assert secret not in (stored.url or "")
    assert stored.id == "c1" and stored.version == "v2.1"  # ids and versions are not text


def test_between_reads_a_window_in_time_order_of_any_service(memory):
    changes = [change(n, service=("checkout-api" if n % 2 else "payments-gateway")) for n in range(30, 0, -1)]
    memory.changes.receive(changes, "generic")
    window = memory.changes.between(T0 + timedelta(minutes=5), T0 + timedelta(minutes=12))
    assert [c.id for c in window] == [f"c{n}" for n in range(5, 13)]
    only = memory.changes.between(T0, T0 + timedelta(minutes=12), services=["checkout-api"])
    assert [c.id for c in only] == [f"c{n}" for n in range(1, 13, 2)]
    both = memory.changes.between(T0, T0 + timedelta(minutes=4), services=["checkout-api", "payments-gateway"])
    assert len(both) == 4
    assert memory.changes.between(T0 + timedelta(minutes=5), T0) == []


def test_between_past_its_limit_keeps_the_changes_nearest_the_end(memory):
    memory.changes.receive([change(n) for n in range(1, 21)], "generic")
    kept = memory.changes.between(T0, T0 + timedelta(hours=1), limit=5)
    assert [c.id for c in kept] == [f"c{n}" for n in range(16, 21)]


def test_between_of_some_services_past_its_limit_is_not_crowded_out_by_other_services(memory):
    # One read of every service's changes, then the filter: a storm on another service later in the window took
    # the whole limit, and the services asked for came back with none.
    memory.changes.receive([change(1, service="checkout-api"), change(2, service="payments-gateway")], "generic")
    memory.changes.receive([change(n, service="noise") for n in range(3, 20)], "generic")
    kept = memory.changes.between(T0, T0 + timedelta(hours=1), ["checkout-api", "payments-gateway"], limit=5)
    assert [c.id for c in kept] == ["c1", "c2"]
    memory.changes.receive([change(n, service="checkout-api") for n in range(20, 26)], "generic")
    kept = memory.changes.between(T0, T0 + timedelta(hours=1), ["checkout-api", "payments-gateway"], limit=5)
    assert [c.id for c in kept] == [f"c{n}" for n in range(21, 26)]  # past the limit: the nearest the end


def test_between_takes_a_time_without_a_zone_as_utc(memory):
    memory.changes.receive([change(3, at=datetime(2026, 11, 30, 12, 3))], "generic")
    assert memory.changes.get("generic:c3").at == T0 + timedelta(minutes=3)
    assert [c.id for c in memory.changes.between(T0, T0 + timedelta(minutes=3))] == ["c3"]


def test_a_large_window_is_read_in_one_query(memory, monkeypatch):
    memory.changes.receive([change(n) for n in range(1200)], "generic")
    calls = []
    real = memory.changes.documents.ranged
    monkeypatch.setattr(memory.changes.documents, "ranged", lambda *a, **k: calls.append(a) or real(*a, **k))
    gets = []
    real_get = memory.changes.documents.get
    monkeypatch.setattr(memory.changes.documents, "get", lambda *a, **k: gets.append(a) or real_get(*a, **k))
    window = memory.changes.between(T0, T0 + timedelta(days=2))
    assert len(window) == 1200 and len(calls) == 1 and gets == []


def test_find_filters_and_pages_by_cursor_latest_first(memory):
    memory.catalog.put([Service(name="payments-gateway", aliases=["pgw"])])
    memory.changes.receive([change(n, kind=("config" if n % 3 == 0 else "deploy")) for n in range(1, 13)], "generic")
    memory.changes.receive([change(100, service="checkout-api")], "argocd")
    page, more = memory.changes.find(service="pgw", limit=5)
    assert [c.id for c in page] == ["c12", "c11", "c10", "c9", "c8"]
    seen = [c.id for c in page]
    while more:
        page, more = memory.changes.find(service="pgw", limit=5, cursor=more)
        seen += [c.id for c in page]
    assert seen == [f"c{n}" for n in range(12, 0, -1)]
    configs, _ = memory.changes.find(kind="CONFIG")
    assert [c.id for c in configs] == ["c12", "c9", "c6", "c3"]
    assert [c.id for c in memory.changes.find(source="argocd")[0]] == ["c100"]
    window, _ = memory.changes.find(since=T0 + timedelta(minutes=4), until=T0 + timedelta(minutes=6))
    assert [c.id for c in window] == ["c6", "c5", "c4"]
    with pytest.raises(InvalidInputError, match="deploy, rollback"):
        memory.changes.find(kind="restart")


def test_a_change_named_by_an_alias_is_kept_under_the_catalog_name(memory):
    memory.catalog.put([Service(name="payments-gateway", aliases=["pgw"])])
    memory.changes.receive([change(1, service="PGW")], "generic")
    assert memory.changes.get("generic:c1").service == "payments-gateway"
    assert memory.changes.get("generic:c1").kind is ChangeKind.DEPLOY


def test_one_org_never_sees_anothers_changes(grandbo):
    acme, globex = grandbo.org("acme", create=True), grandbo.org("globex", create=True)
    acme.changes.receive([change(1)], "generic")
    assert globex.changes.between(T0 - timedelta(days=1), T0 + timedelta(days=1)) == []
    assert globex.changes.find() == ([], None)
    with pytest.raises(NotFoundError):
        globex.changes.get("generic:c1")


def test_old_changes_are_pruned_in_bounded_rounds(grandbo):
    memory = grandbo.org("acme", create=True)
    changes = memory.changes
    changes.retention_days = 90
    changes.receive([change(n) for n in range(5)], "generic")
    assert changes.prune() == 0  # received just now
    later = utcnow() + timedelta(days=91)
    assert changes.prune(now=later, limit=3) == 3
    assert changes.prune(now=later, limit=3) == 2
    assert changes.find() == ([], None)


def _age_changes(settings, days: int) -> None:
    """Make every stored change's last write `days` old, as time would (the store's own clock column)."""
    when = (utcnow() - timedelta(days=days)).isoformat()
    if settings.database_url is None:
        with sqlite3.connect(settings.home / "grandbo.db") as db:
            db.execute("UPDATE documents SET updated_at = ? WHERE collection = 'change'", (when,))
        return
    with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn:
        conn.execute("SELECT set_config('grandbo.org_id', 'acme', false)")  # row-level security binds the owner too
        conn.execute("UPDATE documents SET updated_at = %s WHERE collection = 'change'", (when,))


def test_a_fresh_processs_first_delivery_prunes_changes_past_the_retention(settings):
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True).changes.receive([change(n) for n in range(3)], "generic")
    _age_changes(settings, 91)
    with Grandbo.open(settings) as grandbo:  # a fresh process: its first delivery that stores something prunes
        memory = grandbo.org("acme")
        memory.changes.receive([change(0)], "generic")  # a redelivery stores nothing: no prune round
        assert len(memory.changes.find()[0]) == 3
        memory.changes.receive([change(9)], "generic")
        assert [c.id for c in memory.changes.find()[0]] == ["c9"]


def test_changes_move_with_an_exported_log_and_are_read_by_window_after(grandbo, tmp_path):
    acme = grandbo.org("acme", create=True)
    acme.changes.receive([change(n) for n in range(1, 6)], "generic")
    acme.changes.receive([change(3, summary="deploy v2.3: failure")], "generic")
    acme.export_log(tmp_path / "acme.jsonl")
    moved = grandbo.org("moved", create=True)
    moved.import_log(tmp_path / "acme.jsonl")
    window = moved.changes.between(T0 + timedelta(minutes=2), T0 + timedelta(minutes=4))
    assert [(c.id, c.summary) for c in window] == [("c2", "deploy v2.2"), ("c3", "deploy v2.3: failure"),
                                                  ("c4", "deploy v2.4")]  # fmt: skip
    assert len(moved.changes.documents.history(CHANGES, "generic:c3")) == 2


def test_an_export_made_before_services_were_lowered_is_replayed_with_them_lowered(grandbo, tmp_path):
    # As migration 19 lowers them in a store: an export of an earlier release carried them as sent.
    acme = grandbo.org("acme", create=True)
    acme.changes.receive([change(1, service="ledger"), change(2)], "generic")
    path = tmp_path / "acme.jsonl"
    acme.export_log(path)
    lines = path.read_bytes().splitlines(keepends=True)[:-1]
    records = [json.loads(line) for line in lines]
    for record in records:
        for key in ("document", "document_event"):
            if record.get(key, {}).get("collection") == CHANGES and record[key]["data"]["service"] == "ledger":
                record[key]["data"]["service"] = "Ledger"
    body = b"".join((json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n").encode() for r in records)
    checksum = {"checksum": {"sha256": hashlib.sha256(body).hexdigest(), "lines": len(records)}}
    path.write_bytes(body + (json.dumps(checksum) + "\n").encode())
    assert b'"Ledger"' in path.read_bytes()
    moved = grandbo.org("moved", create=True)
    moved.import_log(path)
    assert moved.changes.get("generic:c1").service == "ledger"
    assert [c.id for c in moved.changes.between(T0, T0 + timedelta(hours=1), ["ledger"])] == ["c1"]
    assert [e["data"]["service"] for e in moved.changes.documents.history(CHANGES, "generic:c1")] == ["Ledger"]


def test_a_stored_change_that_cannot_be_read_is_replaced_by_the_next_delivery(memory):
    from grandbo.ports import DocumentWrite

    memory.changes.documents.put([DocumentWrite(CHANGES, "generic:c1", {"id": "c1", "at": "not a time"}, "test",
                                                ref="20261130120100000000")], "test")  # fmt: skip
    ((stored, outcome),) = memory.changes.receive([change(1)], "generic")
    assert (
        outcome == "updated" and stored.version == "v2.1" and memory.changes.get("generic:c1").summary == "deploy v2.1"
    )
