"""Org A's key never reads, changes or learns the existence of org B's data, through any route.

The test walks the app's route table: every route must have a case below, so a new route without one fails.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from grandbo.api.app import create_app
from grandbo.ingest.adapters import alertmanager
from grandbo.model import Calibration
from grandbo.tiers.change_model import NewChange
from grandbo.tiers.topology import Service
from tests.serving import serving

# Org B's content: alpha never sends these, so they can only come back by a leak.
B_CONTENT = ("zk-quorum-bravo-only", "BravoCorp", "Restart the bravo controller", "bravo zookeeper session expiry",
             "bravo controller lost its session", "Customers were affected", "bravo-secret-1", "BRAVO-[0-9]{4}")  # fmt: skip
ALERTMANAGER = {
    "version": "4", "status": "firing", "receiver": "grandbo", "groupKey": "{}:{}", "truncatedAlerts": 0,
    "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am",
    "alerts": [{"status": "firing", "labels": {"alertname": "KafkaLeaderFlap", "service": "kafka-events"},
                "annotations": {"summary": "kafka partition leader flapping on the events cluster"},
                "startsAt": "2026-11-30T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "fa1"}],
}  # fmt: skip

# (method, path) -> (path filled with org B's ids, JSON body or None)
CASES: dict[tuple[str, str], tuple[str, object]] = {
    ("POST", "/v1/memories"): ("/v1/memories", {"title": "alpha writes its own memory"}),
    ("GET", "/v1/memories"): ("/v1/memories?include_inactive=true&limit=500", None),
    ("GET", "/v1/memories/{entry_id}"): ("/v1/memories/B-SECRET?history=true", None),
    ("PATCH", "/v1/memories/{entry_id}"): ("/v1/memories/B-SECRET", {"reason": "hijack", "title": "hijacked"}),
    ("DELETE", "/v1/memories/{entry_id}"): ("/v1/memories/B-SECRET?reason=hijack", None),
    ("POST", "/v1/memories/{entry_id}/purge"): ("/v1/memories/B-SECRET/purge?reason=hijack", None),
    ("POST", "/v1/erasures"): ("/v1/erasures", {"text": "bravo zookeeper session expiry", "reason": "hijack"}),
    ("POST", "/v1/recall"): ("/v1/recall", {"topic": "kafka partition leader flapping on the events cluster"}),
    ("POST", "/v1/triage"): ("/v1/triage", {"alert_id": "{b_alert}"}),
    ("GET", "/v1/stats"): ("/v1/stats", None),
    ("GET", "/v1/context"): ("/v1/context?topic=kafka%20partition%20leader%20flapping%20again", None),
    ("GET", "/v1/examples"): ("/v1/examples?content_type=status-update", None),
    ("POST", "/v1/webhooks/{source}"): ("/v1/webhooks/alertmanager", ALERTMANAGER),
    ("GET", "/v1/alerts"): ("/v1/alerts", None),
    ("GET", "/v1/alerts/{alert_id}"): ("/v1/alerts/{b_alert}", None),
    ("POST", "/v1/incidents"): ("/v1/incidents", {"id": "INC-ALPHA", "title": "alpha's own incident"}),
    ("GET", "/v1/alert-groups"): ("/v1/alert-groups?limit=500", None),
    ("GET", "/v1/alert-groups/{group_id}"): ("/v1/alert-groups/{b_group}", None),
    ("POST", "/v1/alert-groups/{group_id}/open"): ("/v1/alert-groups/{b_group}/open", None),
    ("POST", "/v1/alert-groups/{group_id}/dismiss"): ("/v1/alert-groups/{b_group}/dismiss", None),
    ("GET", "/v1/incidents"): ("/v1/incidents", None),
    ("GET", "/v1/incidents/{incident_id}"): ("/v1/incidents/INC-B", None),
    ("POST", "/v1/incidents/{incident_id}/findings"): ("/v1/incidents/INC-B/findings", {"summary": "hijack"}),
    ("PATCH", "/v1/incidents/{incident_id}/findings/{finding_id}"): (
        "/v1/incidents/INC-B/findings/f1",
        {"summary": "hijacked"},
    ),
    ("POST", "/v1/incidents/{incident_id}/close"): ("/v1/incidents/INC-B/close", {}),
    ("POST", "/v1/incidents/{incident_id}/sync"): ("/v1/incidents/INC-B/sync", None),
    ("POST", "/v1/runbooks"): ("/v1/runbooks", {"id": "RB-ALPHA", "title": "alpha's own runbook", "steps": ["one"]}),
    ("GET", "/v1/runbooks"): ("/v1/runbooks?limit=500", None),
    ("GET", "/v1/runbooks/{runbook_id}"): ("/v1/runbooks/RB-B", None),
    ("POST", "/v1/runbooks/{runbook_id}/outcomes"): ("/v1/runbooks/RB-B/outcomes", {"kind": "failed"}),
    ("POST", "/v1/runbooks/{runbook_id}/feedback"): ("/v1/runbooks/RB-B/feedback", {"rating": -1}),
    ("POST", "/v1/signals"): (
        "/v1/signals",
        {
            "draft": "Users were impacted.",
            "edited": "Customers were impacted.",
            "content_type": "status-update",
            "author": "alpha",
        },
    ),
    ("GET", "/v1/signals/{signal_id}"): ("/v1/signals/{b_signal}", None),
    ("GET", "/v1/catalog"): ("/v1/catalog", None),
    ("PUT", "/v1/catalog"): ("/v1/catalog", {"services": [{"name": "alpha-svc"}], "replace": True}),
    ("GET", "/v1/settings/rerank"): ("/v1/settings/rerank", None),
    ("GET", "/v1/settings/policy"): ("/v1/settings/policy", None),
    ("PUT", "/v1/settings/rerank"): ("/v1/settings/rerank", {"similarity": 1.0, "service": 0.0}),
    ("GET", "/v1/settings/language"): ("/v1/settings/language", None),
    ("PUT", "/v1/settings/language"): ("/v1/settings/language", {"language": "german"}),
    ("GET", "/v1/settings/redaction"): ("/v1/settings/redaction", None),
    ("PATCH", "/v1/settings/redaction"): (
        "/v1/settings/redaction",
        {"add": {"alpha": "ALPHA-[0-9]+"}, "disable": ["ipv4"]},
    ),
    ("GET", "/v1/settings/calibration"): ("/v1/settings/calibration", None),
    ("DELETE", "/v1/settings/calibration"): ("/v1/settings/calibration", None),
    ("GET", "/v1/webhooks"): ("/v1/webhooks", None),
    ("POST", "/v1/webhooks/{source}/secrets"): ("/v1/webhooks/pagerduty/secrets", {"secret": "alpha-secret-1"}),
    ("POST", "/v1/webhooks/{source}/rotate-done"): ("/v1/webhooks/pagerduty/rotate-done", None),
    ("GET", "/v1/profile"): ("/v1/profile", None),
    ("PATCH", "/v1/profile"): ("/v1/profile", {"changes": {"facts": {"name": "Alpha"}}}),
    ("GET", "/v1/notes"): ("/v1/notes?include_inactive=true", None),
    ("PATCH", "/v1/notes/{note_id}"): ("/v1/notes/{b_note}", {"text": "hijacked rule"}),
    ("DELETE", "/v1/notes/{note_id}"): ("/v1/notes/{b_note}", None),
    ("POST", "/v1/notes/{note_id}/approve"): ("/v1/notes/{b_note}/approve", None),
    ("POST", "/v1/notes/{note_id}/reject"): ("/v1/notes/{b_note}/reject", None),
    ("POST", "/v1/notes/prune"): ("/v1/notes/prune", None),
    ("GET", "/v1/keys"): ("/v1/keys", None),
    ("POST", "/v1/keys"): ("/v1/keys", {"scope": "read"}),
    ("DELETE", "/v1/keys/{key_id}"): ("/v1/keys/{b_key}", None),
    ("GET", "/healthz"): ("/healthz", None),
    ("GET", "/readyz"): ("/readyz", None),
    ("POST", "/v1/tools/{name}"): ("/v1/tools/triage_alert", {"alert_id": "{b_alert}"}),
    ("POST", "/v1/changes/{source}"): (
        "/v1/changes/generic",
        {"id": "{b_change_id}", "service": "cart", "summary": "alpha's deploy", "at": "2026-11-30T10:00:00Z"},
    ),
    ("GET", "/v1/changes"): ("/v1/changes?limit=500", None),
    ("GET", "/v1/changes/{change_id}"): ("/v1/changes/{b_change}", None),
    ("POST", "/v1/import-from/{source}"): ("/v1/import-from/jsonl", None),
}


def routes(app):
    """Every (method, path) the app serves, from its OpenAPI document (the route table, as published)."""
    return {(method.upper(), path) for path, item in app.openapi()["paths"].items() for method in item}


def test_every_route_has_an_isolation_case(grandbo):
    assert routes(create_app(grandbo, mcp=False)) == set(CASES)


@pytest.fixture
def bravo(grandbo):
    return fill_bravo(grandbo)


def fill_bravo(grandbo):
    """Org B with something behind every route: a memory, an incident, a runbook, an alert, a note, a key;
    its ids by the names CASES give them, and its handle as "memory"."""
    b = grandbo.org("bravo", create=True)
    b.remember({"id": "B-SECRET", "title": "bravo zookeeper session expiry", "body": "zk-quorum-bravo-only"})
    b.remember({"title": "BravoCorp status update", "kind": "example", "meta": {"content_type": "status-update"}})
    b.runbooks.add("RB-B", "Restart the bravo controller", ["restart it"], services=["zk-quorum-bravo-only"])
    b.ledger.record("RB-B", "succeeded", service="zk-quorum-bravo-only")
    b.incidents.open("bravo zookeeper session expiry", incident_id="INC-B", services=["zk-quorum-bravo-only"])
    b.incidents.add_finding("INC-B", "bravo controller lost its session", status="corroborated")
    b.catalog.put([Service(name="zk-quorum-bravo-only")], actor="test")
    b.profile.update({"facts": {"name": "BravoCorp"}})
    for n in range(3):
        b.learning.record_edit("Users were affected by the outage.", f"Customers were affected ({n}).",
                               content_type="status-update", author="bob")  # fmt: skip
    b.webhook_secrets.add("pagerduty", "bravo-secret-1")
    b.webhook_secrets.add("pagerduty", "bravo-secret-2")  # mid-rotation: a rotate-done would drop one
    b.org_settings.set_redaction(add={"bravo": "BRAVO-[0-9]{4}"})
    b.org_settings.set_calibration(Calibration(provider="deterministic", model="feature-hash-v1", intercept=-1.0,
                                           features=["top_cosine", "top_coverage"], coefficients=[1.0, 1.0],
                                           fitted_on="BravoCorp labelled queries"))  # fmt: skip
    ((stored, _),) = b.alerts.receive(alertmanager({**ALERTMANAGER, "alerts": [
        {**ALERTMANAGER["alerts"][0], "annotations": {"summary": "bravo zookeeper session expiry"}}]}))  # fmt: skip
    record, _ = b.keys.create("read")
    b.changes.receive([NewChange(id="B-CHANGE-7", service="zk-quorum-bravo-only", summary="BravoCorp deploy",
                                 at=datetime(2026, 11, 30, 9, 0, tzinfo=UTC))], "generic")  # fmt: skip
    return {"b_alert": stored.id, "b_group": stored.group_id, "b_note": b.learning.pending()[0].id,
            "b_key": record.id, "b_signal": b.learning.signals()[0].id, "b_change": "generic:B-CHANGE-7",
            "b_change_id": "B-CHANGE-7", "memory": b}  # fmt: skip


FAKE = {"b_alert": "alert-000000000000000000000000", "b_group": "grp-00000000000000000000", "b_note": "note-nope",
        "b_key": "0123456789ab",
        "b_signal": "sig-20260101000000000000-abcdef", "b_change": "generic:NOPE-CHANGE", "b_change_id": "NOPE-CHANGE"}  # fmt: skip
B_IDS = ("B-SECRET", "INC-B", "RB-B")


def snapshot(b):
    return json.dumps({
        "entries": [e.model_dump(mode="json") for e in b.entries(include_inactive=True)],
        "incidents": [i.model_dump(mode="json") for i in b.incidents.find()],
        "ledger": b.ledger.effectiveness("RB-B").model_dump(mode="json"),
        "notes": [n.model_dump(mode="json") for n in b.learning.notes(include_inactive=True)],
        "signals": [s.model_dump(mode="json") for s in b.learning.signals()],
        "keys": [k.model_dump(mode="json") for k in b.keys.all()],
        "profile": b.profile.get().model_dump(mode="json"),
        "settings": [b.org_settings.rerank().model_dump(), b.org_settings.language(), b.org_settings.redaction(),
                     b.org_settings.calibration_in_force().model_dump()],
        "webhook_secrets": b.webhook_secrets.secrets("pagerduty"),
        "terms": sorted(b.rebuild().changed),
        "catalog": sorted(b.catalog.topology().services),
        "alerts": [a.model_dump(mode="json") for a in b.alerts.recent()],
        "alert_groups": [g.model_dump(mode="json") for g, _ in b.alert_groups.page(500)[0]],
        "changes": [c.model_dump(mode="json") for c in b.changes.find(limit=500)[0]],
    }, sort_keys=True, default=str)  # fmt: skip


def _fill(path, ids, b_ids_as):
    url = path.format(**ids)
    for b_id in B_IDS:
        url = url.replace(b_id, b_ids_as.get(b_id, b_id))
    return url


def _fill_body(body, ids):
    """A JSON body whose "{b_alert}"-style strings name org B's ids (or the made-up ones)."""
    if body is None:
        return None
    text = json.dumps(body)
    for name, value in ids.items():
        if isinstance(value, str):
            text = text.replace("{" + name + "}", value)
    return json.loads(text)


def test_org_a_never_reads_changes_or_learns_of_org_b_through_any_route(grandbo, bravo):
    alpha = grandbo.org("alpha", create=True)
    _, key = alpha.keys.create("admin")
    before = snapshot(bravo["memory"])
    fakes = {b_id: f"NOPE-{n}" for n, b_id in enumerate(B_IDS)}
    with serving(grandbo) as served, served.client(key) as client:
        for (method, template), (path, body) in sorted(CASES.items()):
            url = _fill(path, bravo, {})
            body, fake_body = _fill_body(body, bravo), _fill_body(body, FAKE)
            response = client.request(method, url, json=body) if body is not None else client.request(method, url)
            assert response.status_code < 500, (method, url, response.text)
            for text in B_CONTENT:
                assert text not in response.text, (method, url, text, response.text[:300])
            if ("{" in template or "{b_" in json.dumps(CASES[(method, template)][1])) and response.status_code >= 400:
                # Indistinguishable from an id that exists nowhere: B's existence does not show.
                fake_url = _fill(path, FAKE, fakes)
                fake = client.request(method, fake_url, json=fake_body) if body is not None else client.request(
                    method, fake_url)  # fmt: skip
                mine, theirs = response.text, fake.text
                for real, made_up in [*zip([bravo[k] for k in FAKE], FAKE.values(), strict=True), *fakes.items()]:
                    mine = mine.replace(real, "ID")
                    theirs = theirs.replace(made_up, "ID")
                assert (response.status_code, mine) == (fake.status_code, theirs), (method, url)
    assert snapshot(bravo["memory"]) == before


def test_no_answer_of_any_route_may_be_kept_by_a_cache_for_another_org(grandbo, bravo):
    """No API answer said not to keep it: a cache between clients and Grandbo that keeps GET answers whatever their
    Authorization would give one org's page to another org's request of the same URL (probe 26). Every route's
    answer says no-store, a refusal's and an MCP answer's too."""
    _, key = grandbo.org("alpha", create=True).keys.create("admin")
    with serving(grandbo) as served, served.client(key) as client, served.client() as nobody:
        for (method, _), (path, body) in sorted(CASES.items()):
            url, body = _fill(path, bravo, {}), _fill_body(body, bravo)
            response = client.request(method, url, json=body) if body is not None else client.request(method, url)
            assert response.headers.get("cache-control") == "no-store", (method, url, response.status_code)
        assert nobody.get("/v1/stats").headers.get("cache-control") == "no-store"
        listed = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                             headers={"Accept": "application/json, text/event-stream"})  # fmt: skip
        assert listed.status_code == 200 and "no-store" in listed.headers.get("cache-control", "")
