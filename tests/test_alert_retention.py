"""Received alerts are pruned once past the retention, on the webhook path that already runs, on both
backends; an alert an incident lists is never pruned."""

from __future__ import annotations

import copy
import json
import sqlite3
from datetime import timedelta

import psycopg
import pytest
import structlog

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
                kept = {a["id"] for a in second.get("/v1/alerts").json()["items"]}
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
    memory.org_settings.set_redaction(add={"hex-token": "[0-9a-f]{24}"})
    received = memory.alerts.receive(adapters.parse("alertmanager", json.dumps(ALERTMANAGER).encode()))
    (cited, _), *others = received
    memory.incidents.open("checkout errors", alerts=[cited.id, others[0][0].alert.event_id])
    memory.alerts.prune(now=utcnow() + timedelta(days=91))
    assert {cited.id, others[0][0].id} <= {a.id for a in memory.alerts.recent()}


def _many(count: int, tag: str) -> list:
    """One Alertmanager delivery of `count` distinct alerts."""
    body = copy.deepcopy(ALERTMANAGER)
    body["alerts"] = [{**body["alerts"][0], "fingerprint": f"{tag}-{n}"} for n in range(count)]
    return adapters.parse("alertmanager", json.dumps(body).encode())


def test_a_delivery_pays_for_one_bounded_prune_round_and_the_next_delivery_goes_on(settings):
    """The prune deleted every due alert in the delivery that found them due: one sender's request paid for
    the whole backlog, in one write. A round now deletes at most PRUNE_BATCH (the oldest first), and a full
    round lets the next delivery prune again instead of waiting an hour."""
    from grandbo.tiers.alerts import PRUNE_BATCH

    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        old = grandbo.org("acme", create=True).alerts
        old.receive(_many(PRUNE_BATCH, "old"))  # a delivery holds at most 500 alerts
        old.receive(_many(3, "older"))
    _age_alerts(settings, 91)
    with Grandbo.open(settings) as fresh:  # a process whose first delivery finds the old alerts due
        alerts = fresh.org("acme").alerts
        alerts.receive(_many(1, "first"))
        after_first = len(alerts.recent(limit=10_000))
        alerts.receive(_many(1, "second"))
        after_second = len(alerts.recent(limit=10_000))
    assert after_first == 3 + 1  # one full round: PRUNE_BATCH of the PRUNE_BATCH + 3 old ones
    assert after_second == 2  # the rest, by the very next delivery; the two new alerts stay


def _refuse_alert_deletes(settings: Settings, refuse: bool) -> None:
    """Make the database itself refuse to delete an alert (what a prune does), or stop refusing."""
    if settings.database_url is None:
        with sqlite3.connect(settings.home / "grandbo.db") as db:
            db.execute("DROP TRIGGER IF EXISTS refuse_alert_delete")
            if refuse:
                db.execute("CREATE TRIGGER refuse_alert_delete BEFORE DELETE ON documents WHEN OLD.collection = "
                           "'alert' BEGIN SELECT RAISE(ABORT, 'alert deletes refused'); END")  # fmt: skip
        return
    with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn:
        conn.execute("DROP TRIGGER IF EXISTS refuse_alert_delete ON documents")
        if refuse:
            conn.execute(
                "CREATE OR REPLACE FUNCTION refuse_alert_delete() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'alert deletes refused'; END $$"
            )
            conn.execute("CREATE TRIGGER refuse_alert_delete BEFORE DELETE ON documents FOR EACH ROW WHEN "
                         "(OLD.collection = 'alert') EXECUTE FUNCTION refuse_alert_delete()")  # fmt: skip


def test_a_prune_that_fails_neither_refuses_nor_loses_the_delivered_alerts(settings):
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        _, key = memory.keys.create("write")
        old = memory.alerts.receive(_many(2, "old"))
    _age_alerts(settings, 91)
    _refuse_alert_deletes(settings, True)
    try:
        later = copy.deepcopy(ALERTMANAGER)
        for alert in later["alerts"]:
            alert["fingerprint"] = "later-" + alert["fingerprint"]
        with (
            structlog.testing.capture_logs() as logs,
            Grandbo.open(settings) as fresh,
            serving(fresh) as served,
            served.client(key) as client,
        ):
            delivered = client.post("/v1/webhooks/alertmanager", json=later)
            kept = {a["id"]: a for a in client.get("/v1/alerts").json()["items"]}
    finally:
        _refuse_alert_deletes(settings, False)
    assert delivered.status_code in (200, 202) and delivered.json()["new"] == 3
    new_ids = {a["id"] for a in delivered.json()["alerts"]}
    assert new_ids <= set(kept) and all(kept[i]["state"] == "recalled" for i in new_ids)
    assert {stored.id for stored, _ in old} <= set(kept)  # the prune failed as a whole: nothing half-deleted
    assert [entry["org_id"] for entry in logs if entry["event"] == "alerts.prune_failed"] == ["acme"]


def test_in_a_server_the_prune_round_runs_after_the_delivery_and_prunes_only_the_old_alerts(settings):
    """In a server the round is handed to the write-behind (it used to run inside the sender's request):
    the delivery is answered with its alerts stored and recalled, and the round still prunes, once."""
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        _, key = memory.keys.create("write")
        old = {stored.id for stored, _ in memory.alerts.receive(_many(2, "old"))}
    _age_alerts(settings, 91)
    with (
        Grandbo.open(settings, background=True) as server_side,
        serving(server_side) as served,
        served.client(key) as client,
    ):
        delivered = client.post("/v1/webhooks/alertmanager", json=ALERTMANAGER)
    with Grandbo.open(settings) as after:  # the server closed: its write-behind is done
        left = {stored.id: stored for stored in after.org("acme").alerts.recent()}
    assert delivered.status_code == 202 and delivered.json()["new"] == 3
    assert not old & set(left) and len(left) == 3 and all(a.state == "recalled" for a in left.values())


def _age(settings: Settings, ids: list[str], days: float) -> None:
    """Make those stored alerts' last delivery `days` old."""
    when = (utcnow() - timedelta(days=days)).isoformat()
    if settings.database_url is None:
        with sqlite3.connect(settings.home / "grandbo.db") as db:
            db.executemany("UPDATE documents SET updated_at = ? WHERE collection = 'alert' AND doc_id = ?",
                           [(when, i) for i in ids])  # fmt: skip
        return
    with psycopg.connect(settings.database_url) as conn:
        conn.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
        conn.execute("UPDATE documents SET updated_at = %s WHERE collection = 'alert' AND doc_id = ANY(%s)",
                     (when, ids))  # fmt: skip


def test_a_round_reads_past_a_page_of_due_alerts_the_incidents_keep(grandbo, settings):
    """A round reads the due alerts a page (PRUNE_BATCH) at a time from the oldest: more than a page of them
    that incidents list must not stop it short of the free ones behind them."""
    from grandbo.tiers.alerts import PRUNE_BATCH

    memory = grandbo.org("acme", create=True)
    kept = [s.id for s, _ in memory.alerts.receive(_many(PRUNE_BATCH, "cited"))]
    kept += [s.id for s, _ in memory.alerts.receive(_many(20, "cited-too"))]
    free = [s.id for s, _ in memory.alerts.receive(_many(5, "free"))]
    young = [s.id for s, _ in memory.alerts.receive(_many(2, "young"))]
    memory.incidents.open("the long outage", incident_id="INC-1", alerts=kept)
    _age(settings, kept, 100)
    _age(settings, free, 95)
    assert memory.alerts.prune(limit=PRUNE_BATCH) == 5
    left = {a.id for a in memory.alerts.recent(limit=10_000)}
    assert left == {*kept, *young}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # Postgres keeps only valid JSON (jsonb)
def test_a_round_reads_no_alert_younger_than_the_cut_off(grandbo, settings):
    """A round read every alert of the organization whole to find the due ones (at tens of thousands, hundreds
    of megabytes each hour): a young alert whose row the disk damaged (not JSON) failed every round. Only the
    due alerts are read now."""
    memory = grandbo.org("acme", create=True)
    due = [s.id for s, _ in memory.alerts.receive(_many(3, "due"))]
    (damaged, _), *_ = memory.alerts.receive(_many(2, "young"))
    _age(settings, due, 91)
    with sqlite3.connect(settings.home / "grandbo.db") as db:
        db.execute('UPDATE documents SET data = \'{"alert": {"id": [tru\' WHERE doc_id = ?', (damaged.id,))
    assert memory.alerts.prune() == 3
    assert memory.alerts.documents.get("alert", due[0]) is None
