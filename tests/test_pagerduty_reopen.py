"""A PagerDuty incident reopened fires again, by the sender's time of each event, on a real server.

PagerDuty's alert is its incident (one id from trigger to resolve), and `incident.reopened` (a V3 event type,
developer.pagerduty.com "V3 Webhooks") makes a resolved incident open again under that id. PagerDuty may deliver
an event late or twice: `event.occurred_at` orders them.
"""

from __future__ import annotations

import copy
import json

import pytest

from grandbo.ingest.alert import Alert
from grandbo.ingest.signatures import sign
from grandbo.ports import DocumentWrite
from grandbo.tiers.alerts import ALERTS
from tests.serving import serving
from tests.test_webhooks import PAGERDUTY, REDIS, post

SECRET = "pd-secret-one"
INCIDENT = PAGERDUTY["event"]["data"]["id"]


def _event(event_type: str, event_id: str, occurred_at: str, status: str) -> bytes:
    """One V3 delivery about the incident of `PAGERDUTY`: its own event id and time, the incident's status then."""
    event = copy.deepcopy(PAGERDUTY)
    event["event"].update(id=event_id, event_type=event_type, occurred_at=occurred_at)
    event["event"]["data"]["status"] = status
    return json.dumps(event).encode()


TRIGGERED = _event("incident.triggered", "01J8TRIGGERED0000000000000", "2026-11-30T18:45:22.169Z", "triggered")
RESOLVED = _event("incident.resolved", "01J8RESOLVED00000000000000", "2026-11-30T19:10:04.512Z", "resolved")
REOPENED = _event("incident.reopened", "01J8REOPENED00000000000000", "2026-11-30T19:42:51.027Z", "acknowledged")
RESOLVED_AGAIN = _event("incident.resolved", "01J8RESOLVEDAGAIN000000000", "2026-11-30T20:05:13.880Z", "resolved")


@pytest.fixture
def sender(grandbo):
    """A served org with a PagerDuty secret and one memory, and a function that delivers a signed body."""
    memory = grandbo.org("acme", create=True)
    memory.remember(REDIS)
    memory.webhook_secrets.add("pagerduty", SECRET)
    _, key = memory.keys.create("write", name="alerts")
    _, reader = memory.keys.create("read", name="console")
    with serving(grandbo) as served, served.client(key) as client, served.client(reader) as read:

        def deliver(*bodies: bytes) -> list[tuple[int, int]]:
            answers = [post(client, "pagerduty", None, body=body, headers={"X-PagerDuty-Signature": sign(body, SECRET)})
                       for body in bodies]  # fmt: skip
            assert all(answer.status_code in (200, 202) for answer in answers), [a.text for a in answers]
            return [(answer.status_code, answer.json()["new"]) for answer in answers]

        yield memory, deliver, read


def _triages(memory, alert_id: str) -> int:
    return sum(event["type"] == "alert.recalled" for event in memory._documents.history("alert", alert_id))


def test_a_reopened_pagerduty_incident_fires_again_and_is_triaged_again(sender):
    memory, deliver, read = sender
    assert deliver(TRIGGERED, RESOLVED, REOPENED) == [(202, 1), (200, 0), (202, 1)]  # the reopen: triaged as new
    (firing,) = read.get("/v1/alerts", params={"status": "firing"}).json()["items"]
    alert = read.get(firing["href"]).json()
    assert alert["alert"]["status"] == "firing" and alert["state"] == "recalled" and alert["deliveries"] == 3
    assert alert["plan"] is not None and alert["alert"]["started_at"].startswith("2026-11-30T19:42:51.027")
    history = [event["type"] for event in memory._documents.history("alert", alert["id"])]
    assert history.count("alert.reopened") == 1 and _triages(memory, alert["id"]) == 2
    assert memory.stats().write_behinds == 0  # the reopen's recorded triage was done, none left waiting

    assert deliver(RESOLVED_AGAIN) == [(200, 0)]  # resolved once more, later: resolved
    assert read.get(firing["href"]).json()["alert"]["status"] == "resolved"
    assert read.get("/v1/alerts", params={"status": "firing"}).json()["items"] == []


def test_late_and_repeated_pagerduty_events_do_not_undo_a_reopen_or_triage_it_twice(sender):
    memory, deliver, read = sender
    # The reopen arrives before the resolve it follows, then PagerDuty retries both.
    assert deliver(TRIGGERED, REOPENED, RESOLVED, REOPENED, RESOLVED, TRIGGERED) == [(202, 1)] + [(200, 0)] * 5
    (listed,) = read.get("/v1/alerts").json()["items"]
    alert = read.get(listed["href"]).json()
    assert alert["alert"]["status"] == "firing" and alert["deliveries"] == 6  # the resolve is older than the reopen
    assert alert["alert"]["changed_at"].startswith("2026-11-30T19:42:51.027") and _triages(memory, alert["id"]) == 1

    # In order, then the reopen retried: still one reopen, triaged once.
    assert deliver(RESOLVED_AGAIN, REOPENED) == [(200, 0), (200, 0)]  # the retried reopen is older than the resolve
    assert read.get(listed["href"]).json()["alert"]["status"] == "resolved" and _triages(memory, alert["id"]) == 1


def test_a_trigger_older_than_the_resolve_or_an_update_of_a_resolved_incident_does_not_reopen_it(sender):
    memory, deliver, read = sender
    updated = _event("incident.priority_updated", "01J8PRIORITY00000000000000", "2026-11-30T19:30:00.000Z", "resolved")
    assert deliver(RESOLVED, TRIGGERED, updated) == [(202, 1), (200, 0), (200, 0)]  # the trigger arrived late
    (listed,) = read.get("/v1/alerts").json()["items"]
    alert = read.get(listed["href"]).json()
    assert alert["alert"]["status"] == "resolved" and alert["state"] == "received" and alert["plan"] is None
    assert _triages(memory, alert["id"]) == 0


def test_an_incident_resolved_before_its_times_were_kept_is_dated_by_its_last_write(sender):
    """An alert stored undated (by an older release) changed when it was last written (review 20: as older than any
    dated change, a late or retried trigger reopened it): a later reopen reopens it, an older trigger does not."""
    memory, deliver, read = sender
    (held,) = [stored for stored, _ in memory.alerts.receive([Alert(  # as an older release stored it: no time
        source="pagerduty", event_id=INCIDENT, fingerprint=INCIDENT, status="resolved", summary="Redis reset")])]  # fmt: skip
    doc = memory.alerts.documents.get(ALERTS, held.id)
    memory.alerts.documents.put([DocumentWrite(ALERTS, held.id, {**doc.data, "updated_at": "2026-11-30T19:10:04Z"},
                                               "test.older", expected_version=doc.version)], "test")  # fmt: skip
    assert deliver(TRIGGERED) == [(200, 0)]  # 18:45, before the resolve was written: a late one
    assert read.get(f"/v1/alerts/{held.id}").json()["alert"]["status"] == "resolved"
    assert deliver(REOPENED) == [(202, 1)]  # 19:42, after it
    alert = read.get(f"/v1/alerts/{held.id}").json()
    assert alert["alert"]["status"] == "firing" and alert["state"] == "recalled" and alert["deliveries"] == 3
