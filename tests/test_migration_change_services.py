"""Migration 19 on a store written before changes' services were stored in lower case: every stored change's
service is lowered (as Python lowers it, non-ASCII letters too), its version, write time and history kept, in
every organization; and a triage that reads the changes from the store (an org of more than KEPT_CHANGES) finds
them, on both backends. (One test per module: the module's Postgres database keeps its schema, and this test
takes migration 19 back out of it as the owner role.)"""

import json
import sqlite3
from datetime import timedelta

import psycopg

from grandbo import Grandbo
from grandbo.model import utcnow
from grandbo.tiers.change_model import NewChange
from tests.conftest import owner_url

# As the sources sent them, before the write path lowered them; the last is lower case already.
SENT = {"ledger-v2": "Ledger", "pay-9": "Payments-Gateway", "zh-1": "ZÜRICH-Sync", "low": "search"}


def test_migration_19_lowers_the_services_of_stored_changes_and_the_stored_triage_finds_them(
    settings, raw, monkeypatch
):
    from grandbo.triage import run

    now = utcnow().replace(microsecond=0)
    with Grandbo.init(settings, embedding="deterministic") as before:
        for org in ("acme", "globex"):
            memory = before.org(org, create=True)
            for n, (change_id, service) in enumerate(SENT.items()):
                memory.changes.add(NewChange(id=change_id, service=service, summary=f"deploy {change_id}",
                                             at=now - timedelta(minutes=5 + n)))  # fmt: skip
    stored = {org: _changes(raw, org) for org in ("acme", "globex")}
    upgrade = _as_before_migration_19(settings)
    assert {doc_id: data["service"] for doc_id, (data, _, _) in _changes(raw, "acme").items()} == {
        f"cli:{change_id}": service for change_id, service in SENT.items()
    }

    monkeypatch.setattr(run, "KEPT_CHANGES", 2)  # the org's changes are read from the store, as past 20,000
    with Grandbo.open(upgrade) as upgraded:
        assert 19 in upgraded.schema_versions()
        for org in ("acme", "globex"):
            assert _changes(raw, org) == stored[org]  # as the write path stores them now; version and time kept
            assert _history(raw, org) == _history_as_sent(org)
            memory = upgraded.org(org)
            assert [c.id for c in memory.changes.find(service="Ledger")[0]] == ["ledger-v2"]
            window = memory.changes.between(now - timedelta(hours=1), now, ["zürich-sync", "payments-gateway"])
            assert sorted(c.id for c in window) == ["pay-9", "zh-1"]
            plan = memory.triage({"summary": "ledger write errors above 5%", "service": "ledger"}, narrate=False,
                                 now=now)  # fmt: skip
            assert [c.id for c in plan.changes] == ["ledger-v2"]
            assert upgraded._snapshots._kept[(org, "change")].items is None  # read from the store, not kept
    with Grandbo.open(settings) as again:  # re-opening applies nothing twice
        assert again.schema_versions().count(19) == 1


def _data(value):
    return json.loads(value) if isinstance(value, str) else value


def _changes(raw, org):
    rows = raw("SELECT doc_id, data, version, updated_at FROM documents WHERE org_id = %s AND collection = 'change'",
               (org,), org=org)  # fmt: skip
    return {doc_id: (_data(data), version, str(updated_at)) for doc_id, data, version, updated_at in rows}


def _history(raw, org):
    rows = raw("SELECT doc_id, data FROM document_events WHERE org_id = %s AND collection = 'change' ORDER BY seq",
               (org,), org=org)  # fmt: skip
    return [(doc_id, _data(data)["service"]) for doc_id, data in rows]


def _history_as_sent(org):
    """The history as `_as_before_migration_19` left it: each change's event with the service as it was sent."""
    return [(f"cli:{change_id}", service) for change_id, service in SENT.items()]


def _as_before_migration_19(settings):
    """The store as the release before the write path lowered services left it (each change's service and its
    history event as sent), and migration 19 not applied yet."""
    if settings.database_url:
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn, conn.transaction():
            for org in ("acme", "globex"):
                conn.execute("SELECT set_config('grandbo.org_id', %s, true), set_config('grandbo.erasing', %s, true)",
                             (org, org))  # fmt: skip
                for change_id, service in SENT.items():
                    for table in ("documents", "document_events"):
                        conn.execute(f"UPDATE {table} SET data = jsonb_set(data, '{{service}}', to_jsonb(%s::text)) "
                                     "WHERE org_id = %s AND doc_id = %s", (service, org, f"cli:{change_id}"))  # fmt: skip
            conn.execute("DELETE FROM schema_migrations WHERE version = 19")
        return settings.model_copy(update={"migrate_database_url": owner_url(settings.database_url)})
    with sqlite3.connect(settings.home / "grandbo.db") as conn:
        for org in ("acme", "globex"):
            conn.execute("INSERT INTO log_erasures VALUES (?, 'test', 'now')", (org,))
            for change_id, service in SENT.items():
                for table in ("documents", "document_events"):
                    conn.execute(f"UPDATE {table} SET data = json_set(data, '$.service', ?) WHERE org_id = ? AND "
                                 "doc_id = ?", (service, org, f"cli:{change_id}"))  # fmt: skip
        conn.execute("DELETE FROM log_erasures")
        conn.execute("DELETE FROM schema_migrations WHERE version = 19")
    return settings
