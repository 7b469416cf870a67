"""Received alerts are pruned once past the retention, on the webhook path that already runs, on both
backends; an alert an incident lists is never pruned."""

from __future__ import annotations

import copy
import json
import sqlite3
from datetime import timedelta

import psycopg
import pytest

from grandbo.config import Settings
from grandbo.ingest import adapters
from grandbo.model import utcnow
from grandbo.service import Grandbo
from tests.conftest import owner_url
from tests.serving import serving
from tests.test_webhooks import ALERTMANAGER


def _age_alerts(settings: Settings, days: int) -> None:
    """Make every stored alert's last delivery `days` old, as time would (the store's own clock column)."""
    when = (utcnow() - timedelta(days=days)).isoformat()
    if settings.database_url is None:
        with sqlite3.connect(settings.home / "grandbo.db") as db:
            db.execute("UPDATE documents SET updated_at = ? WHERE collection = 'alert'", (when,))
        return
    with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn:
        conn.execute("SELECT set_config('grandbo.org_id', 'acme', false)")  # row-level security binds the owner too
        conn.execute("UPDATE documents SET updated_at = %s WHERE collection = 'alert'", (when,))


def test_old_alerts_are_pruned_on_a_delivery_except_those_an_incident_lists(settings):
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        _, key = memory.keys.create("write")
        with serving(grandbo) as served, served.client(key) as client:
            first = client.post("/v1/webhooks/alertmanager", json=ALERTMANAGER).json()["alerts"]
            cited = first[0]
            memory.incidents.open("session cache down", incident_id="INC-1", alerts=[cited["id"]])
            _age_alerts(settings, 91)
            later = copy.deepcopy(ALERTMANAGER)
            for alert in later["alerts"]:
                alert["fingerprint"] = "later-" + alert["fingerprint"]
            # A fresh process: its first delivery prunes.
            with Grandbo.open(settings) as other, serving(other) as again, again.client(key) as second:
                assert second.post("/v1/webhooks/alertmanager", json=later).json()["new"] == 3
                kept = {a["id"] for a in second.get("/v1/alerts").json()}
    assert cited["id"] in kept and not {a["id"] for a in first[1:]} & kept  # the incident's alert stays
    assert len(kept) == 4


def test_retention_never_prunes_a_young_alert(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.alerts.receive(adapters.parse("alertmanager", json.dumps(ALERTMANAGER).encode()))
    assert memory.alerts.prune() == 0  # received just now: young
    assert memory.alerts.prune(now=utcnow() + timedelta(days=91)) == 3
    assert memory.alerts.recent() == []


def test_a_retention_under_the_triage_window_is_refused_with_the_remedy():
    with pytest.raises(ValueError, match="use 0 \\(keep every alert\\) or 30 or more"):
        Settings(alert_retention_days=7)
    assert Settings(alert_retention_days=0).alert_retention_days == 0


def test_an_alert_an_incident_lists_is_kept_when_the_orgs_patterns_mask_its_reference(memory):
    # An org's own pattern for its 24-hex tokens also matches the digest in an alert's id: the incident stores
    # the reference masked, and the prune must still see that the incident lists this alert.
    memory.settings.set_redaction(add={"hex-token": "[0-9a-f]{24}"})
    received = memory.alerts.receive(adapters.parse("alertmanager", json.dumps(ALERTMANAGER).encode()))
    (cited, _), *others = received
    memory.incidents.open("checkout errors", alerts=[cited.id, others[0][0].alert.event_id])
    memory.alerts.prune(now=utcnow() + timedelta(days=91))
    assert {cited.id, others[0][0].id} <= {a.id for a in memory.alerts.recent()}
