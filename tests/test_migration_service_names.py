"""Migration 30 on a store written before service names were normalized: every stored name (an entry's services,
the catalog's names and dependencies, incidents' and findings', alerts', changes', outcomes') in the form every
write and filter uses now, so the filters match the rows kept before; a catalog service stored under a look-alike
id takes its name's id, merged into the service of that name; an entry whose services changed is embedded again;
a rebuild from the event log (which keeps what was sent) gives the same names. On both backends. (One test per
module: the module's Postgres database keeps its schema, and this test takes migration 30 back out of it.)"""

import json
import sqlite3

import psycopg

from grandbo import Grandbo
from grandbo.ingest.alert import Alert
from grandbo.model import utcnow
from grandbo.tiers.change_model import NewChange
from tests.conftest import owner_url

ZERO_WIDTH = "checkout\u200b-api"
FULLWIDTH = "\uff43\uff48\uff45\uff43\uff4b\uff4f\uff55\uff54-API"  # ｃｈｅｃｋｏｕｔ-ＡＰＩ
ORGS = ("acme", "globex")


def test_migration_30_normalizes_every_stored_service_name_and_the_filters_find_the_rows(settings, raw):
    now = utcnow().replace(microsecond=0)
    kept = {}
    with Grandbo.init(settings, embedding="deterministic") as before:
        for org in ORGS:
            memory = before.org(org, create=True)
            memory.catalog.import_text("services:\n  - name: checkout-api\n    depends_on: [payments-db]\n"
                                       "  - name: web\n    depends_on: [checkout-api]\n")  # fmt: skip
            entry = memory.remember({"title": "Checkout pool exhausted", "services": ["checkout-api"]})
            incident = memory.incidents.open("Checkout down", services=["checkout-api"])
            memory.incidents.add_finding(incident.id, "pool exhausted", services=["checkout-api"])
            memory.changes.add(NewChange(id="d1", service="checkout-api", summary="deploy", at=now))
            ((alert, _),) = memory.alerts.receive([Alert(source="alertmanager", event_id="a1", fingerprint="fp",
                                                         service="checkout-api", summary="checkout 5xx above 5%")])  # fmt: skip
            memory.runbooks.add("RB-1", "Raise the checkout pool", ["raise the pool"])
            memory.ledger.record("RB-1", "succeeded", incident_id=incident.id, service="checkout-api")
            kept[org] = (entry.id, incident.id, alert.id)
    upgrade = _as_before_migration_30(settings, kept)
    assert _entry_services(raw, "acme", kept["acme"][0]) == [FULLWIDTH]
    assert kept["acme"][0] in _vectors(raw, "acme")

    with Grandbo.open(upgrade) as upgraded:
        assert 30 in upgraded.schema_versions()
        for org in ORGS:
            entry_id, incident_id, alert_id = kept[org]
            memory = upgraded.org(org)
            assert _entry_services(raw, org, entry_id) == ["checkout-api"]
            assert memory.get(entry_id).services == ["checkout-api"]
            topology = memory.catalog.topology()
            assert sorted(topology.services) == ["checkout-api", "web"]  # the look-alike merged into its name
            assert topology.services["checkout-api"].depends_on == ["payments-db", "users-db"]
            assert topology.services["web"].depends_on == ["checkout-api"]
            incident = memory.incidents.get(incident_id)
            assert incident.services == ["checkout-api"] and incident.findings[0].services == ["checkout-api"]
            assert [c.id for c in memory.changes.find(service="checkout-api")[0]] == ["d1"]
            assert [a.id for a in memory.alerts.page(service="checkout-api")[0]] == [alert_id]
            assert memory.ledger.effectiveness("RB-1", service="checkout-api").successes == 1
            hits = memory.recall("checkout pool exhausted", services=["checkout-api"]).hits
            assert hits and hits[0].why.rerank.service.note == "same service"
        assert kept["acme"][0] not in _vectors(raw, "acme")  # its text changed: embedded again
        assert kept["acme"][0] in {row[0] for row in raw("SELECT entry_id FROM embed_outbox", org="acme")}
        upgraded.backfill()
        assert kept["acme"][0] in _vectors(raw, "acme")
        acme = upgraded.org("acme")
        acme.rebuild(replace=True)  # from the log, which kept the look-alike as sent
        assert acme.get(kept["acme"][0]).services == ["checkout-api"]
    with Grandbo.open(settings) as again:  # re-opening applies nothing twice
        assert again.schema_versions().count(30) == 1


def _vectors(raw, org):
    return {row[0] for row in raw("SELECT entry_id FROM entry_vectors WHERE org_id = %s", (org,), org=org)}


def _entry_services(raw, org, entry_id):
    (value,) = raw("SELECT services FROM memory_entries WHERE org_id = %s AND entry_id = %s", (org, entry_id),
                   org=org)[0]  # fmt: skip
    return json.loads(value) if isinstance(value, str) else value


def _as_before_migration_30(settings, kept):
    """The store as a release before this one left it: names kept as sent (an entry's row and its event, the
    catalog's `checkout-api` stored as a zero-width look-alike beside a fullwidth one, the rest fullwidth), and
    migration 30 not applied yet."""
    one, many = json.dumps(FULLWIDTH), json.dumps([FULLWIDTH])
    look_alike = json.dumps({"name": ZERO_WIDTH, "depends_on": ["payments-db"]})
    other = json.dumps({"name": FULLWIDTH, "depends_on": ["users-db"]})
    statements = [
        ("UPDATE memory_entries SET services = {j} WHERE org_id = {p} AND entry_id = {p}", (many,), 0),
        ("UPDATE memory_events SET payload = {set_services} WHERE org_id = {p} AND entry_id = {p}", (many,), 0),
        ("UPDATE documents SET doc_id = {p}, ref = {p}, data = {j} WHERE org_id = {p} AND collection = 'service' "
         "AND doc_id = 'checkout-api'", (ZERO_WIDTH, ZERO_WIDTH, look_alike), None),
        ("INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
         "SELECT org_id, collection, {p}, {p}, {j}, version, updated_at FROM documents WHERE org_id = {p} "
         "AND collection = 'service' AND doc_id = 'web'", (FULLWIDTH, FULLWIDTH, other), None),
        ("UPDATE documents SET data = {set_services} WHERE org_id = {p} AND collection = 'incident'", (many,), None),
        ("UPDATE documents SET data = {set_finding} WHERE org_id = {p} AND collection = 'incident'", (many,), None),
        ("UPDATE documents SET data = {set_service} WHERE org_id = {p} AND collection IN ('change', 'outcome')",
         (one,), None),
        ("UPDATE documents SET data = {set_alert} WHERE org_id = {p} AND collection = 'alert'", (one,), None),
    ]  # fmt: skip
    if settings.database_url:
        spelled = {"p": "%s", "j": "%s::jsonb", "set_services": "jsonb_set({}, '{{services}}', %s::jsonb)",
                   "set_finding": "jsonb_set(data, '{findings,0,services}', %s::jsonb)",
                   "set_service": "jsonb_set(data, '{service}', %s::jsonb)",
                   "set_alert": "jsonb_set(data, '{alert,service}', %s::jsonb)"}  # fmt: skip
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn, conn.transaction():
            for org in ORGS:
                conn.execute("SELECT set_config('grandbo.org_id', %s, true), set_config('grandbo.erasing', %s, true)",
                             (org, org))  # fmt: skip
                _run(lambda s, p: conn.execute(s, p), statements, spelled, org, kept[org])
            conn.execute("DELETE FROM schema_migrations WHERE version = 30")
        return settings.model_copy(update={"migrate_database_url": owner_url(settings.database_url)})
    spelled = {"p": "?", "j": "?", "set_services": "json_set({}, '$.services', json(?))",
               "set_finding": "json_set(data, '$.findings[0].services', json(?))",
               "set_service": "json_set(data, '$.service', json(?))",
               "set_alert": "json_set(data, '$.alert.service', json(?))"}  # fmt: skip
    with sqlite3.connect(settings.home / "grandbo.db") as conn:
        for org in ORGS:
            conn.execute("INSERT INTO log_erasures VALUES (?, 'test', 'now')", (org,))
            _run(conn.execute, statements, spelled, org, kept[org])
        conn.execute("DELETE FROM log_erasures")
        conn.execute("DELETE FROM schema_migrations WHERE version = 30")
    return settings


def _run(execute, statements, spelled, org, kept):
    for statement, values, key in statements:
        column = "payload" if "memory_events" in statement else "data"
        text = statement.format(**{**spelled, "set_services": spelled["set_services"].format(column)})
        tail = (org,) if key is None else (org, kept[key])
        if statement.startswith("INSERT"):
            execute(text, (*values, org))
        else:
            execute(text, (*values, *tail))
