"""Alert webhooks with payloads shaped exactly as each vendor documents them, on a real server."""

from __future__ import annotations

import copy
import json
import threading

import pytest

from grandbo.ingest.signatures import sign
from tests.serving import serving

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)

REDIS = {
    "id": "INC-044-F1",
    "title": "Redis eviction storm on redis-sessions",
    "body": "maxmemory reached; keys evicted under allkeys-lru; auth-service latency above 1200ms; connection resets",
    "kind": "finding",
    "services": ["redis-sessions", "auth-service"],
}

OTHERS = [
    {"title": "checkout-api pool exhausted under a retry storm", "body": "ERR_CONN_RESET from payments-gateway"},
    {"title": "ledger-db replica lag after a vacuum", "body": "replication lag above 30s during autovacuum"},
    {"title": "cdn-edge certificate expired", "body": "TLS handshake failures for static assets"},
    {"title": "kafka-events consumer group rebalancing loop", "body": "consumers kicked out every 30 seconds"},
    {"title": "search-indexer out of memory", "body": "jvm heap exhausted while reindexing the catalog"},
]

# PagerDuty v3 webhook (developer.pagerduty.com, "V3 Webhooks": an incident.triggered event).
PAGERDUTY = {
    "event": {
        "id": "5ac64822-4adc-4fda-ade0-410becf0de4f",
        "event_type": "incident.triggered",
        "resource_type": "incident",
        "occurred_at": "2026-11-30T18:45:22.169Z",
        "agent": {"html_url": "https://acme.pagerduty.com/users/PLH1HKV", "id": "PLH1HKV",
                  "self": "https://api.pagerduty.com/users/PLH1HKV", "summary": "Tenex Engineer",
                  "type": "user_reference"},
        "client": {"name": "PagerDuty"},
        "data": {
            "id": "PGR0VU2", "type": "incident", "self": "https://api.pagerduty.com/incidents/PGR0VU2",
            "html_url": "https://acme.pagerduty.com/incidents/PGR0VU2", "number": 2, "status": "triggered",
            "incident_key": "d3640fbd41094207a1c11e58e46b1662", "created_at": "2026-11-30T18:45:20Z",
            "title": "Redis connection reset during key eviction spike; auth-service latency > 1200ms",
            "service": {"html_url": "https://acme.pagerduty.com/services/PF9KMXH", "id": "PF9KMXH",
                        "self": "https://api.pagerduty.com/services/PF9KMXH", "summary": "auth-service",
                        "type": "service_reference"},
            "assignees": [{"html_url": "https://acme.pagerduty.com/users/PTUXL6G", "id": "PTUXL6G",
                           "self": "https://api.pagerduty.com/users/PTUXL6G", "summary": "User 123",
                           "type": "user_reference"}],
            "escalation_policy": {"html_url": "https://acme.pagerduty.com/escalation_policies/PUS0KTE",
                                  "id": "PUS0KTE", "self": "https://api.pagerduty.com/escalation_policies/PUS0KTE",
                                  "summary": "Default", "type": "escalation_policy_reference"},
            "teams": [],
            "priority": {"html_url": "https://acme.pagerduty.com/account/incident_priorities", "id": "PSO75BM",
                         "self": "https://api.pagerduty.com/priorities/PSO75BM", "summary": "P1",
                         "type": "priority_reference"},
            "urgency": "high",
            "conference_bridge": {"conference_number": "+1 1234123412,,987654321#",
                                  "conference_url": "https://example.com"},
            "resolve_reason": None,
        },
    }
}  # fmt: skip

# Prometheus Alertmanager webhook_config, version 4 (prometheus.io/docs/alerting/latest/configuration).
ALERTMANAGER = {
    "version": "4",
    "groupKey": '{}/{alertname="RedisDown"}:{alertname="RedisDown"}',
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "grandbo",
    "groupLabels": {"alertname": "RedisEvictions"},
    "commonLabels": {"alertname": "RedisEvictions", "team": "identity"},
    "commonAnnotations": {},
    "externalURL": "http://alertmanager.example:9093",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "RedisEvictions", "service": "redis-sessions", "severity": "critical",
                       "instance": "redis-0:6379"},
            "annotations": {"summary": "Redis evicting keys under maxmemory on redis-sessions",
                            "description": "evicted_keys rate above 5000/s for 5 minutes"},
            "startsAt": "2026-11-30T10:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example:9090/graph?g0.expr=redis_evicted_keys",
            "fingerprint": "a1b2c3d4e5f60718",
        },
        {
            "status": "firing",
            "labels": {"alertname": "HighLatency", "service": "auth-service", "severity": "warning"},
            "annotations": {"summary": "auth-service p99 latency above 1200ms"},
            "startsAt": "2026-11-30T10:01:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example:9090/graph", "fingerprint": "b2c3d4e5f6071829",
        },
        {
            "status": "firing",
            "labels": {"alertname": "DiskFull", "job": "ledger-db", "severity": "page"},
            "annotations": {"summary": "ledger-db volume above 95% full"},
            "startsAt": "2026-11-30T10:02:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example:9090/graph", "fingerprint": "c3d4e5f607182930",
        },
    ],
}  # fmt: skip

# Grafana unified alerting webhook contact point (grafana.com/docs, "Webhook notifier").
GRAFANA = {
    "receiver": "grandbo", "status": "firing", "orgId": 1,
    "alerts": [{
        "status": "firing",
        "labels": {"alertname": "Checkout errors", "grafana_folder": "payments", "service": "checkout-api"},
        "annotations": {"summary": "checkout-api 5xx rate above 5% after the deploy"},
        "startsAt": "2026-11-30T11:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "https://grafana.example/alerting/grafana/abc/view", "fingerprint": "57c6d9296de2ad39",
        "silenceURL": "https://grafana.example/alerting/silence/new", "dashboardURL": "https://grafana.example/d/x",
        "panelURL": "https://grafana.example/d/x?viewPanel=1", "values": {"B": 7.2, "C": 1},
        "valueString": "[ var='B' labels={service=checkout-api} value=7.2 ]",
    }],
    "groupLabels": {"alertname": "Checkout errors"}, "commonLabels": {"alertname": "Checkout errors"},
    "commonAnnotations": {}, "externalURL": "https://grafana.example/", "version": "1",
    "groupKey": '{}:{alertname="Checkout errors"}', "truncatedAlerts": 0,
    "title": "[FIRING:1] Checkout errors (payments)", "state": "alerting",
    "message": "**Firing**\n\nValue: B=7.2, C=1",
}  # fmt: skip

# Opsgenie outgoing webhook, action Create (support.atlassian.com, "Opsgenie webhook integration").
OPSGENIE = {
    "action": "Create",
    "alert": {
        "alertId": "70413a06-38d6-4c85-92b8-5ebc900d42e2", "message": "kafka consumer lag above 1M on orders",
        "tags": ["kafka", "orders"], "tinyId": "1791", "entity": "orders-consumer", "alias": "kafka-lag-orders",
        "createdAt": 1764500000000, "updatedAt": 1764500000500, "username": "Alert API", "userId": "",
        "description": "consumer group orders-v2 stopped committing offsets", "team": "", "responders": [],
        "teams": [], "actions": [], "details": {"service": "orders-consumer"}, "priority": "P2", "source": "api",
    },
    "source": {"name": "", "type": "API"},
    "integrationName": "Grandbo Webhook", "integrationId": "3a4ef38b-e6a4-4ffb-8b5c-1e3b8a5e9f13",
    "integrationType": "Webhook",
}  # fmt: skip


@pytest.fixture
def org(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.remember(REDIS)
    _, key = memory.keys.create("write", name="alerts")
    return memory, key


def post(client, source, payload, *, headers=None, body=None):
    raw = body if body is not None else json.dumps(payload).encode()
    return client.post(f"/v1/webhooks/{source}", content=raw,
                       headers={"Content-Type": "application/json", **(headers or {})})  # fmt: skip


def test_a_signed_pagerduty_delivery_is_stored_and_recalled(grandbo, org):
    memory, key = org
    memory.webhook_secrets.add("pagerduty", "pd-secret-one")
    body = json.dumps(PAGERDUTY).encode()
    with serving(grandbo) as served, served.client(key) as client:
        response = post(
            client, "pagerduty", None, body=body, headers={"X-PagerDuty-Signature": sign(body, "pd-secret-one")}
        )
        assert response.status_code == 202, response.text
        (alert,) = response.json()["alerts"]
        kept = client.get(f"/v1/alerts/{alert['id']}").json()
    assert kept["alert"]["service"] == "auth-service" and kept["alert"]["severity"] == "sev1"
    assert kept["query"].startswith("Redis connection reset during key eviction spike")
    assert kept["state"] == "recalled" and kept["recall"]["hits"][0]["entry"]["id"] == "INC-044-F1"


def test_pagerduty_signatures_are_checked_through_a_rotation(grandbo, org):
    memory, key = org
    memory.webhook_secrets.add("pagerduty", "old-secret-1")
    memory.webhook_secrets.add("pagerduty", "new-secret-2")
    body = json.dumps(PAGERDUTY).encode()
    tampered = body.replace(b"P1", b"P5")
    with serving(grandbo) as served, served.client(key) as client:
        both = f"{sign(body, 'some-other-secret')},{sign(body, 'new-secret-2')}"  # PagerDuty sends one per secret
        assert post(client, "pagerduty", None, body=body, headers={"X-PagerDuty-Signature": both}).status_code == 202
        again = post(
            client, "pagerduty", None, body=body, headers={"X-PagerDuty-Signature": sign(body, "old-secret-1")}
        )
        assert again.status_code == 200 and again.json()["new"] == 0  # the same event id: stored once
        for bad in ({"X-PagerDuty-Signature": sign(body, "old-secret-1")}, {"X-PagerDuty-Signature": "v1=00ff"}, {}):
            refused = post(client, "pagerduty", None, body=tampered if bad and bad["X-PagerDuty-Signature"] != "v1=00ff"
                           else body, headers=bad)  # fmt: skip
            assert refused.status_code == 401 and refused.json()["error"]["type"] == "signature_invalid"
        assert len(client.get("/v1/alerts").json()["items"]) == 1
    assert memory.alerts.recent()[0].deliveries == 2


def test_an_alertmanager_batch_is_one_query_per_alert(grandbo, org):
    _, key = org
    with serving(grandbo) as served, served.client(key) as client:
        response = post(client, "alertmanager", ALERTMANAGER)
        assert response.status_code == 202 and response.json()["new"] == 3
        kept = [client.get(a["href"]).json() for a in client.get("/v1/alerts").json()["items"]]
    by_service = {a["alert"]["service"]: a for a in kept}
    assert set(by_service) == {"redis-sessions", "auth-service", "ledger-db"}
    assert by_service["redis-sessions"]["alert"]["severity"] == "sev1"
    assert by_service["auth-service"]["alert"]["severity"] == "sev3"
    assert by_service["ledger-db"]["alert"]["severity"] == "sev2"
    assert all(a["state"] == "recalled" for a in kept)
    assert by_service["redis-sessions"]["recall"]["topic"] == (
        "Redis evicting keys under maxmemory on redis-sessions; evicted_keys rate above 5000/s for 5 minutes"
    )
    assert by_service["redis-sessions"]["recall"]["hits"][0]["entry"]["id"] == "INC-044-F1"


def test_a_duplicate_delivery_is_stored_once(grandbo, org):
    memory, key = org
    with serving(grandbo) as served, served.client(key) as client:
        assert post(client, "alertmanager", ALERTMANAGER).json()["new"] == 3
        assert post(client, "alertmanager", ALERTMANAGER).json()["new"] == 0
        resolved = copy.deepcopy(ALERTMANAGER)
        resolved["alerts"][0]["status"] = "resolved"
        assert post(client, "alertmanager", resolved).json()["new"] == 0
    kept = {a.alert.fingerprint: a for a in memory.alerts.recent()}
    assert len(kept) == 3 and kept["a1b2c3d4e5f60718"].alert.status == "resolved"
    assert kept["a1b2c3d4e5f60718"].deliveries == 3


def test_grafana_and_opsgenie_alerts(grandbo, org):
    _, key = org
    with serving(grandbo) as served, served.client(key) as client:
        grafana = client.get(post(client, "grafana", GRAFANA).json()["alerts"][0]["href"]).json()
        opsgenie = client.get(post(client, "opsgenie", OPSGENIE).json()["alerts"][0]["href"]).json()
    assert grafana["alert"]["service"] == "checkout-api" and grafana["query"].startswith("checkout-api 5xx rate")
    assert opsgenie["alert"]["service"] == "orders-consumer" and opsgenie["alert"]["severity"] == "sev2"
    assert opsgenie["query"] == (
        "kafka consumer lag above 1M on orders; consumer group orders-v2 stopped committing offsets"
    )
    assert grafana["state"] == opsgenie["state"] == "recalled"


@pytest.mark.parametrize(
    ("source", "body"),
    [
        ("alertmanager", b"{not json"),
        ("alertmanager", json.dumps({**ALERTMANAGER, "alerts": []}).encode()),
        ("alertmanager", json.dumps({**ALERTMANAGER, "version": "3"}).encode()),
        ("alertmanager", json.dumps({**ALERTMANAGER, "alerts": [ALERTMANAGER["alerts"][0], {"labels": "x"}]}).encode()),
        ("grafana", json.dumps({"alerts": [{"labels": {}, "annotations": {}}]}).encode()),
        ("opsgenie", json.dumps({"action": "Create", "alert": {"message": "no id"}}).encode()),
        ("opsgenie", b"[" * 100_000 + b"]" * 100_000),
    ],
)
def test_a_malformed_payload_gets_a_clear_4xx_and_nothing_is_stored(grandbo, org, source, body):
    memory, key = org
    with serving(grandbo) as served, served.client(key) as client:
        response = post(client, source, None, body=body)
        assert response.status_code == 422 and response.json()["error"]["type"] == "invalid_input"
        assert "Malformed" in response.json()["error"]["message"]
    assert memory.alerts.recent() == []


def test_a_valid_alert_is_kept_when_embedding_is_down(tmp_path, database_url):
    from grandbo.service import Grandbo
    from tests.test_embedding_faults import _hosted, closed_port_url

    with Grandbo.init(_hosted(tmp_path, closed_port_url(), database_url=database_url), embedding="openai") as down:
        memory = down.org("acme", create=True)
        memory.remember_many([REDIS, *OTHERS])
        _, key = memory.keys.create("write")
        with serving(down) as served, served.client(key) as client:
            response = post(client, "alertmanager", ALERTMANAGER)
        assert response.status_code == 202
        kept = memory.alerts.recent()
    assert len(kept) == 3 and all(a.state == "recalled" for a in kept)
    redis = next(a for a in kept if a.alert.service == "redis-sessions")
    assert redis.recall is not None and redis.recall.hits[0].entry.id == "INC-044-F1"
    assert any("vector arm skipped" in note for note in redis.recall.notes)


def test_an_impossible_timestamp_is_no_start_time_not_a_500(grandbo, org):
    _, key = org
    alert = {**OPSGENIE, "alert": {**OPSGENIE["alert"], "createdAt": 1e30}}
    with serving(grandbo) as served, served.client(key) as client:
        response = post(client, "opsgenie", alert)
        infinite = post(
            client, "opsgenie", None, body=json.dumps(OPSGENIE).replace("1764500000000", "Infinity").encode()
        )
        kept = client.get(response.json()["alerts"][0]["href"]).json()
    assert response.status_code == 202 and kept["alert"]["started_at"] is None
    assert infinite.status_code == 422 and "Infinity" in infinite.json()["error"]["message"]  # not JSON


def test_an_alert_repeated_within_one_delivery_is_stored_and_recalled_once(grandbo, org):
    memory, key = org
    twice = {**ALERTMANAGER, "alerts": [ALERTMANAGER["alerts"][0], ALERTMANAGER["alerts"][0]]}
    with serving(grandbo) as served, served.client(key) as client:
        assert post(client, "alertmanager", twice).json()["new"] == 1
    assert len(memory.alerts.recent()) == 1


def test_a_redelivery_during_recall_is_not_overwritten_by_the_recall_result(grandbo, org):
    from grandbo.ingest import adapters

    memory, _ = org
    ((stored, new),) = memory.alerts.receive(
        adapters.alertmanager({**ALERTMANAGER, "alerts": ALERTMANAGER["alerts"][:1]})
    )
    resolved = copy.deepcopy(ALERTMANAGER)
    resolved["alerts"][0]["status"] = "resolved"
    memory.alerts.receive(adapters.alertmanager({**resolved, "alerts": resolved["alerts"][:1]}))  # while recall runs
    kept = memory.alerts.record_recall(stored, None, None)
    assert new and kept.state == "recalled" and kept.alert.status == "resolved" and kept.deliveries == 2
    assert memory.alerts.get(stored.id).alert.status == "resolved"


def test_a_deliverys_stored_alerts_are_read_at_once_by_id_and_only_in_its_own_org(grandbo, org):
    """Before it reserves places, a delivery reads which of its alerts are stored, all in one read by their ids:
    another organization's alert of the same id (ids come from the sender's, alike in every org) is not one."""
    from grandbo.ingest import adapters
    from grandbo.tiers.alerts import triaged

    memory, _ = org
    alerts = adapters.alertmanager(ALERTMANAGER)
    beta = grandbo.org("beta", create=True)
    beta.alerts.receive(alerts)
    memory.alerts.receive(alerts[:1])
    known = memory.alerts.known([*alerts, *alerts])  # an alert twice in a group: read and counted once
    assert len(alerts) >= 2 and list(known) == [alerts[0].id] and known[alerts[0].id].deliveries == 1
    assert set(beta.alerts.known(alerts)) == {alert.id for alert in alerts}
    assert triaged([*alerts, *alerts], known) == [a for a in alerts[1:] if a.status == "firing"] != []
    assert triaged(alerts, beta.alerts.known(alerts)) == [] and memory.alerts.known([]) == {}


def test_an_alert_deleted_after_its_delivery_read_it_is_stored_new_with_its_triage_recorded(org):
    """The read a delivery reserves by can be stale: an alert it found stored may be pruned (or erased) before its
    write. The write expects the version read, so it conflicts, reads again, and stores the alert new, with its
    triage recorded as pending work (the re-driver's, since the delivery reserved no place for it)."""
    from datetime import timedelta

    from grandbo.ingest import adapters
    from grandbo.model import utcnow

    memory, _ = org
    alerts = adapters.alertmanager({**ALERTMANAGER, "alerts": ALERTMANAGER["alerts"][:1]})
    ((stored, _),) = memory.alerts.receive(alerts)
    known = memory.alerts.known(alerts)
    waiting = memory.stats().write_behinds
    assert memory.alerts.prune(now=utcnow() + timedelta(days=91)) == 1  # between the read and the write
    ((again, new),) = memory.alerts.receive(alerts, known=known)
    assert known[stored.id].deliveries == 1 and new and again.deliveries == 1
    assert memory.alerts.get(stored.id).state == "received" and memory.stats().write_behinds == waiting + 1


@pytest.mark.parametrize("space", [" ", "\t", "\n", "\u00a0", "\u2028", "\u3000", "\x00", "\x7f", "\u200b"])
def test_a_link_with_any_whitespace_or_unprintable_character_is_dropped(space):
    from grandbo.ingest import adapters

    alert = {**ALERTMANAGER["alerts"][0], "generatorURL": f"http://prometheus.example/graph?g0{space}x"}
    (clean,) = adapters.alertmanager({**ALERTMANAGER, "alerts": [ALERTMANAGER["alerts"][0]]})
    (dirty,) = adapters.alertmanager({**ALERTMANAGER, "alerts": [alert]})
    assert "source" in clean.links and "source" not in dirty.links


# PagerDuty's test delivery when a subscription is created or tested ("Send Test Event").
PAGERDUTY_PING = {
    "event": {
        "id": "01DEN1HXP8KK6XU93CV2J0CVZ2", "event_type": "pagey.ping", "resource_type": "pagey",
        "occurred_at": "2026-11-30T18:40:00.000Z", "agent": None, "client": None,
        "data": {"message": "Hello from your friend Pagey!", "type": "ping"},
    }
}  # fmt: skip

# incident.annotated: the data is the note, with a reference to its incident (no title of its own).
PAGERDUTY_NOTE = {
    "event": {
        "id": "01DVUHO6P1RHEXZRZ8LR6LF2UD", "event_type": "incident.annotated", "resource_type": "incident",
        "occurred_at": "2026-11-30T18:50:00.000Z",
        "data": {
            "incident": {"html_url": "https://acme.pagerduty.com/incidents/PGR0VU2", "id": "PGR0VU2",
                         "self": "https://api.pagerduty.com/incidents/PGR0VU2", "summary": "Redis connection reset",
                         "type": "incident_reference"},
            "content": "Looking at the eviction rate now.", "trimmed": False, "type": "incident_note",
        },
    }
}  # fmt: skip


def test_pagerduty_deliveries_without_an_incident_are_acknowledged_and_store_nothing(grandbo, org):
    memory, key = org
    memory.webhook_secrets.add("pagerduty", "pd-secret-one")
    with serving(grandbo) as served, served.client(key) as client:
        for event in (PAGERDUTY_PING, PAGERDUTY_NOTE):
            body = json.dumps(event).encode()
            response = post(
                client, "pagerduty", None, body=body, headers={"X-PagerDuty-Signature": sign(body, "pd-secret-one")}
            )
            assert response.status_code == 200, response.text
            assert response.json() == {"alerts": [], "new": 0}
        unsigned = post(client, "pagerduty", PAGERDUTY_PING)  # still verified first
        assert unsigned.status_code == 401
    assert memory.alerts.recent() == []


def test_the_events_of_one_pagerduty_incident_are_one_alert(grandbo, org):
    memory, key = org
    memory.webhook_secrets.add("pagerduty", "pd-secret-one")
    answers = []
    with serving(grandbo) as served, served.client(key) as client:
        for number, (event_type, status) in enumerate((("incident.triggered", "triggered"),
                ("incident.acknowledged", "acknowledged"), ("incident.escalated", "acknowledged"),
                ("incident.resolved", "resolved"))):  # fmt: skip
            event = copy.deepcopy(PAGERDUTY)  # each event has its own id and time, and the incident's status then
            event["event"].update(id=f"01EVENT{number}", event_type=event_type,
                                  occurred_at=f"2026-11-30T18:4{5 + number}:22.169Z")  # fmt: skip
            event["event"]["data"]["status"] = status
            body = json.dumps(event).encode()
            response = post(
                client, "pagerduty", None, body=body, headers={"X-PagerDuty-Signature": sign(body, "pd-secret-one")}
            )
            answers.append((response.status_code, response.json()["new"]))
        (listed,) = client.get("/v1/alerts").json()["items"]
        alert = client.get(listed["href"]).json()
    assert answers == [(202, 1), (200, 0), (200, 0), (200, 0)]  # triaged once, at the trigger
    assert alert["alert"]["status"] == "resolved" and alert["deliveries"] == 4 and alert["state"] == "recalled"


@pytest.mark.parametrize("source", ["alertmanager", "grafana", "opsgenie"])
def test_a_secret_for_a_source_that_never_signs_is_refused_not_silently_kept(org, source):
    from grandbo.errors import InvalidInputError

    memory, _ = org
    with pytest.raises(InvalidInputError, match="does not sign its webhook deliveries") as refused:
        memory.webhook_secrets.add(source, "a-secret-nobody-checks")
    assert "Authorization: Bearer" in refused.value.message
    assert memory.webhook_secrets.secrets(source) == []


def test_an_admin_rotates_a_signing_secret_over_rest_and_never_reads_one_back(grandbo, org):
    memory, write_key = org
    _, admin_key = memory.keys.create("admin", name="ops")
    body = json.dumps(PAGERDUTY).encode()
    with serving(grandbo) as served, served.client(admin_key) as admin, served.client(write_key) as sender:
        assert admin.get("/v1/webhooks").json() == [
            {"source": "pagerduty", "secrets": 0},
            {"source": "github", "secrets": 0},
        ]
        added = admin.post("/v1/webhooks/pagerduty/secrets", json={"secret": "first-secret"})
        assert added.status_code == 200 and added.json() == {"source": "pagerduty", "secrets": 1}
        assert admin.post("/v1/webhooks/pagerduty/secrets", json={"secret": "second-secret"}).json()["secrets"] == 2
        assert "secret" not in json.dumps(admin.get("/v1/webhooks").json()).replace('"secrets"', "")
        signed_old = {"X-PagerDuty-Signature": sign(body, "first-secret")}
        assert post(sender, "pagerduty", None, body=body, headers=signed_old).status_code == 202  # mid-rotation
        done = admin.post("/v1/webhooks/pagerduty/rotate-done")
        assert done.status_code == 200 and done.json() == {"source": "pagerduty", "secrets": 1}
        again = body.replace(b"P1", b"P2")  # the incident's priority changed: the same alert, delivered again
        refused = post(
            sender, "pagerduty", None, body=again, headers={"X-PagerDuty-Signature": sign(again, "first-secret")}
        )
        assert refused.status_code == 401  # the old secret is no longer accepted...
        kept = post(
            sender, "pagerduty", None, body=again, headers={"X-PagerDuty-Signature": sign(again, "second-secret")}
        )
        assert kept.status_code == 200  # ...the newest is
        # Only an admin key manages secrets; a source that never signs takes none; too short is refused.
        assert sender.post("/v1/webhooks/pagerduty/secrets", json={"secret": "x" * 20}).status_code == 403
        unsigned = admin.post("/v1/webhooks/grafana/secrets", json={"secret": "x" * 20})
        assert unsigned.status_code == 422 and "does not sign" in unsigned.json()["error"]["message"]
        assert admin.post("/v1/webhooks/pagerduty/secrets", json={"secret": "short"}).status_code == 422
        assert admin.post("/v1/webhooks/nagios/secrets", json={"secret": "x" * 20}).status_code == 422
    assert memory.webhook_secrets.secrets("pagerduty") == ["second-secret"]


def test_rotate_done_drops_the_older_secrets_and_says_when_there_was_nothing_to_drop(cli, tmp_path):
    (tmp_path / "old").write_text("old-secret-1\n")
    (tmp_path / "new").write_text("new-secret-2\n")
    cli("webhooks", "add", "pagerduty", "--secret-file", str(tmp_path / "old"))
    assert "nothing to drop" in cli("webhooks", "rotate-done", "pagerduty").stdout
    cli("webhooks", "add", "pagerduty", "--secret-file", str(tmp_path / "new"))
    done = cli("webhooks", "rotate-done", "pagerduty").stdout
    assert "1 older secret(s) dropped; only the newest is accepted now" in done


def test_a_secret_is_read_from_a_file_or_stdin_never_needed_on_the_command_line(cli, tmp_path):
    """`--secret-file` reads it from a file or stdin; `--secret S` (which stays in shell history and shows in the
    process list) is refused, with the way to give it instead. Before, it was taken."""
    from typer.testing import CliRunner

    from grandbo.cli import app
    from grandbo.service import Grandbo

    path = tmp_path / "pd-secret"
    path.write_text("from-a-file-secret\n")
    assert "1 secret(s) accepted" in cli("webhooks", "add", "pagerduty", "--secret-file", str(path)).stdout
    piped = CliRunner().invoke(app, ["webhooks", "add", "pagerduty", "--secret-file", "-"], input="from-stdin-secret\n")
    assert piped.exit_code == 0 and "2 secret(s) accepted" in piped.stdout
    unset = CliRunner().invoke(app, ["webhooks", "add", "pagerduty", "--secret-file", "-"], input="")  # `printenv`
    assert unset.exit_code == 2 and "pagerduty webhook secret given is empty" in unset.stderr  # of an unset variable
    for given in (["--secret", "x" * 12], ["--secret-file", str(path), "--secret", "x" * 12]):
        refused = cli("webhooks", "add", "pagerduty", *given, code=2)
        assert "--secret is not taken" in refused.stderr and "--secret-file -" in refused.stderr
    assert "--secret-file FILE" in cli("webhooks", "add", "pagerduty", code=2).stderr
    missing = cli("webhooks", "add", "pagerduty", "--secret-file", str(tmp_path / "nowhere"), code=2)
    assert "Cannot read the secret from" in missing.stderr and "Traceback" not in missing.stderr
    with Grandbo.open() as grandbo:
        held = grandbo.org("default").webhook_secrets.secrets("pagerduty")
    assert held == ["from-a-file-secret", "from-stdin-secret"]


def test_a_firing_replay_after_the_resolve_does_not_reopen_the_alert(grandbo, org):
    """Alertmanager retries a delivery it thinks failed: the firing payload can arrive after the resolved one (same
    fingerprint and startsAt). An alert that fires again has a new startsAt, so this one stays resolved."""
    memory, key = org
    resolved = copy.deepcopy(ALERTMANAGER)
    resolved["alerts"][0]["status"] = "resolved"
    with serving(grandbo) as served, served.client(key) as client:
        assert post(client, "alertmanager", ALERTMANAGER).json()["new"] == 3
        assert post(client, "alertmanager", resolved).json()["new"] == 0
        assert post(client, "alertmanager", ALERTMANAGER).json()["new"] == 0
    kept = {a.alert.fingerprint: a for a in memory.alerts.recent()}
    assert kept["a1b2c3d4e5f60718"].alert.status == "resolved" and kept["a1b2c3d4e5f60718"].deliveries == 3


def test_a_firing_copy_batched_with_the_resolve_does_not_reopen_the_alert(grandbo, org):
    """Failed before (probe26): one delivery holding the resolved alert and then a late firing copy of it (same
    fingerprint and startsAt) kept the last copy: the alert was stored firing and triaged."""
    memory, key = org
    firing = ALERTMANAGER["alerts"][0]
    for order in ("resolved first", "firing first"):
        alert = {**firing, "fingerprint": f"{order[:8]}-fp", "labels": {**firing["labels"], "alertname": order}}
        resolved = {**alert, "status": "resolved", "endsAt": "2026-05-01T13:00:00Z"}
        both = [resolved, alert] if order == "resolved first" else [alert, resolved]
        with serving(grandbo) as served, served.client(key) as client:
            assert post(client, "alertmanager", {**ALERTMANAGER, "alerts": both}).json()["new"] == 1
    kept = {a.alert.labels["alertname"]: a for a in memory.alerts.recent()}
    assert {name: a.alert.status for name, a in kept.items()} == {
        "resolved first": "resolved",
        "firing first": "resolved",
    }


def test_identical_deliveries_at_once_are_all_answered_and_all_counted(grandbo, org):
    """Eight copies of one delivery at once (a sender's retries): on Postgres one to four were answered 409 and
    the count of deliveries came out short. Each copy is now either the first or counted as a redelivery."""
    memory, key = org
    copies = 8
    barrier = threading.Barrier(copies)
    answers: list[int] = []
    with serving(grandbo) as served:

        def deliver() -> None:
            with served.client(key) as client:
                barrier.wait(timeout=30)
                answers.append(post(client, "alertmanager", ALERTMANAGER).status_code)

        threads = [threading.Thread(target=deliver) for _ in range(copies)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert len(answers) == copies and set(answers) <= {200, 202}, answers
    kept = {a.alert.fingerprint: a for a in memory.alerts.recent()}
    assert len(kept) == 3 and {a.deliveries for a in kept.values()} == {copies}


def test_a_source_keeps_at_most_eight_secrets_and_says_how_to_make_room(org):
    """Each delivery is signed once per secret held before the comparison: 289 secrets made one bad-signature
    delivery cost 0.73 s (a hostile probe). A ninth is refused with the way out; a rotation's end makes room."""
    from grandbo.errors import InvalidInputError
    from grandbo.tiers.keys import MAX_SECRETS

    memory, _ = org
    secrets = memory.webhook_secrets
    for n in range(MAX_SECRETS):
        assert secrets.add("pagerduty", f"pd-secret-{n:04d}") == n + 1
    with pytest.raises(InvalidInputError, match="rotate-done") as refused:
        secrets.add("pagerduty", "pd-secret-late")
    assert refused.value.detail == {"source": "pagerduty", "secrets": MAX_SECRETS, "max": MAX_SECRETS}
    assert secrets.add("pagerduty", "pd-secret-0003") == MAX_SECRETS  # one already held: nothing to add
    secrets.remove_all_but_newest("pagerduty")
    assert secrets.add("pagerduty", "pd-secret-late") == 2
