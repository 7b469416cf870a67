"""Incident and alert text is masked by the organization's redaction patterns before it is stored, as entries
are, through every way in: the tier (what the CLI, REST, MCP and the console call), the CLI, REST, the
webhooks and a replayed export. The secrets are built at run time, as in tests/test_redaction.py."""

from __future__ import annotations

import json

import pytest

from grandbo.errors import InvalidInputError
from grandbo.mcp.tools import record_finding
from tests.serving import serving
from tests.test_redaction import AWS, DB_PASSWORD, GITHUB, OPENAI

EMAIL = "oncall.lead@example.com"
SECRETS = (AWS, DB_PASSWORD, GITHUB, OPENAI, EMAIL)


def leaked(*values: object) -> list[str]:
    text = json.dumps(values, default=str)
    return [secret for secret in SECRETS if secret in text]


def test_incident_text_is_masked_before_it_is_stored(memory, tmp_path):
    incidents = memory.incidents
    opened = incidents.open(
        f"Checkout down after deploy leaked {AWS}",
        incident_id="INC-1",
        services=["checkout-api"],
        symptoms=[f"DSN postgres://app:{DB_PASSWORD}@db.internal/orders in the logs"],
    )
    finding = record_finding(  # the MCP tool, as an agent calls it
        memory, "INC-1", f"the pipeline printed {GITHUB}", status="corroborated", root_cause=f"token {OPENAI}"
    ).finding
    updated = incidents.update_finding("INC-1", "f1", remediation=f"rotate, then tell {EMAIL}")
    incidents.edit("INC-1", resolution=f"rotated {AWS}")
    closed = incidents.close("INC-1", postmortem=f"Root cause: a CI step echoed {GITHUB}.")
    assert leaked(opened, finding, updated.model_dump(), closed.model_dump()) == []
    assert "[REDACTED:aws_access_key]" in opened.title and "[REDACTED:url_password]" in opened.symptoms[0]
    assert "[REDACTED:github_token]" in finding.summary and "[REDACTED:email]" in updated.remediation
    stored = incidents.get("INC-1")
    assert leaked(stored.model_dump(), incidents.history("INC-1"), [e.model_dump() for e in memory.entries()]) == []
    memory.export_log(tmp_path / "log.jsonl")
    assert leaked((tmp_path / "log.jsonl").read_text()) == []


def test_an_org_s_own_pattern_masks_incident_text(memory):
    memory.org_settings.set_redaction(add={"customer": r"ACME-CUST-[0-9]{4}"})
    incident = memory.incidents.open("Refunds failing for ACME-CUST-4711 since noon", incident_id="INC-2")
    assert incident.title == "Refunds failing for [REDACTED:customer] since noon"


def test_a_title_that_masking_makes_too_long_is_refused_and_nothing_is_stored(memory):
    title = ("a@b.io " * 71).strip()  # 496 characters; each address becomes [REDACTED:email] (16)
    with pytest.raises(InvalidInputError, match="title"):
        memory.incidents.open(title, incident_id="INC-3")
    assert memory.incidents.find() == []


def test_the_cli_and_rest_store_incidents_masked(cli, grandbo):
    shown = cli("incident", "open", f"Login outage, key {AWS} in the logs", "--id", "INC-7").stdout
    assert AWS not in shown
    assert AWS not in cli("incident", "show", "INC-7", "--history").stdout
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    with serving(grandbo) as served, served.client(key) as client:
        made = client.post("/v1/incidents", json={"id": "INC-8", "title": f"Mail to {EMAIL} bounced"})
        assert made.status_code == 201, made.text
        finding = client.post("/v1/incidents/INC-8/findings", json={"summary": f"smtp password={DB_PASSWORD}"})
        read = client.get("/v1/incidents/INC-8").json()
    assert leaked(made.json(), finding.json(), read) == [] and "[REDACTED:email]" in read["title"]


def test_webhook_alert_text_is_masked_before_it_is_stored_and_asked(grandbo):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write", name="alerts")
    delivery = {
        "receiver": "grandbo", "status": "firing", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093", "version": "4", "groupKey": "{}:{}", "truncatedAlerts": 0,
        "alerts": [{
            "status": "firing", "labels": {"alertname": "DbAuthFailing", "service": "orders", "dsn_owner": EMAIL},
            "annotations": {"summary": f"orders cannot log in to the database with password={DB_PASSWORD}",
                            "description": f"the deploy printed {AWS}"},
            "startsAt": "2026-11-30T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "a1b2c3d4e5f60718",
            "generatorURL": "http://prometheus:9090/graph",
        }],
    }  # fmt: skip
    with serving(grandbo) as served, served.client(key) as client:
        response = client.post("/v1/webhooks/alertmanager", json=delivery)
        assert response.status_code == 202, response.text
        listed = client.get("/v1/alerts").json()["items"]
        kept = [client.get(a["href"]).json() for a in listed]
    assert len(kept) == 1 and leaked(response.json(), listed, kept, memory.alerts.recent()) == []
    assert "password=[REDACTED:secret_value]" in kept[0]["alert"]["summary"]
    assert kept[0]["alert"]["labels"]["dsn_owner"] == "[REDACTED:email]"


def test_a_replayed_export_masks_incident_and_alert_text_by_the_patterns_held_now(grandbo, tmp_path):
    origin = grandbo.org("acme", create=True)
    origin.incidents.open("customer TKT-123456 cannot pay", incident_id="INC-1", symptoms=["TKT-123456 again"])
    origin.incidents.add_finding("INC-1", "TKT-123456's card was declined")
    origin.org_settings.set_redaction(add={"ticket": r"TKT-[0-9]{6}"})  # added after the incident was stored
    origin.export_log(tmp_path / "log.jsonl")
    target = grandbo.org("moved", create=True)
    target.import_log(tmp_path / "log.jsonl")
    incident = target.incidents.get("INC-1")
    assert incident.title == "customer [REDACTED:ticket] cannot pay"
    assert incident.findings[0].summary == "[REDACTED:ticket]'s card was declined"
    assert "TKT-123456" not in json.dumps(target.incidents.history("INC-1"), default=str)
    assert "TKT-123456" in origin.incidents.get("INC-1").title  # the origin keeps what it stored


def test_an_alert_cut_to_its_limit_stays_readable_when_masking_lengthens_it(grandbo):
    # Adapters cut a sender's summary to 2,000 characters; masking then made it longer ("[REDACTED:email]" for
    # a short address), and the stored alert failed validation on every read: the list of alerts, the console's
    # queue and each redelivery of that alert.
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write", name="alerts")
    message = ("checkout failing for a@b.io " * 100)[:2000]
    delivery = {"action": "Create", "alert": {"alertId": "og-1", "message": message, "description": message * 10}}
    with serving(grandbo) as served, served.client(key) as client:
        assert client.post("/v1/webhooks/opsgenie", json=delivery).status_code == 202
        assert client.post("/v1/webhooks/opsgenie", json=delivery).status_code == 200  # a redelivery
        listed = client.get("/v1/alerts")
        assert listed.status_code == 200, listed.text
        (brief,) = listed.json()["items"]
        alert = client.get(brief["href"]).json()
    assert alert["deliveries"] == 2 and "a@b.io" not in json.dumps(alert)
    assert len(alert["alert"]["summary"]) == 2000 and alert["alert"]["summary"].startswith(
        "checkout failing for [REDACTED:email]"
    )


def test_a_pattern_added_later_never_blocks_the_incidents_it_would_lengthen(memory):
    # Patterns apply to text written from now on: saving an incident again (a finding, the close) re-masked its
    # stored title too, and a title a new pattern made longer than 500 characters refused every later save.
    title = ("latency on db1 " * 40)[:495].strip()
    memory.incidents.open(title, incident_id="INC-9")
    memory.org_settings.set_redaction(add={"host": r"db\d+"})
    finding = memory.incidents.add_finding("INC-9", "pool exhausted on db7", status="corroborated", actor="alice")
    assert finding.summary == "pool exhausted on [REDACTED:host]"  # new text is masked by the new pattern
    closed = memory.incidents.close("INC-9", resolution="raised the pool of db7", actor="alice")
    assert closed.status.value == "closed" and closed.title == title
    assert closed.resolution == "raised the pool of [REDACTED:host]"
