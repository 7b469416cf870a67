"""Small edges a hostile-input probe found (probe 20b, its LOW list): each was answered, but wrongly or unclearly."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from grandbo.errors import EntryStateError, InvalidInputError
from grandbo.ingest import adapters, changes
from grandbo.ingest.adapters import MAX_SENDER_ID
from grandbo.model import EventType, utcnow
from grandbo.ports import NewEvent
from tests.test_webhooks import ALERTMANAGER, GRAFANA, OPSGENIE, PAGERDUTY


@pytest.mark.parametrize("status", ["RESOLVED", "Resolved"])
def test_an_alertmanager_resolve_in_capitals_is_a_resolve(status):
    """It was filed as firing, silently: only the exact "resolved" resolved."""
    body = copy.deepcopy(ALERTMANAGER)
    body["alerts"][0]["status"] = status
    (first, *_) = adapters.parse("alertmanager", json.dumps(body).encode())
    assert first.status == "resolved"


def test_a_sender_id_past_its_bound_is_refused_naming_it_and_ids_under_it_are_kept_as_sent():
    """A 1 MB Alertmanager fingerprint was stored whole (twice: the fingerprint and the event id) with the alert. Past
    MAX_SENDER_ID it is refused (cutting or hashing it would change the id of an alert stored with it: review)."""
    body = copy.deepcopy(ALERTMANAGER)
    body["alerts"][1]["fingerprint"] = "f" * 1_000_000
    with pytest.raises(InvalidInputError, match="alert 1's fingerprint is 1,000,000 characters"):
        adapters.parse("alertmanager", json.dumps(body).encode())
    body["alerts"][1]["fingerprint"] = "f" * MAX_SENDER_ID
    assert adapters.parse("alertmanager", json.dumps(body).encode())[1].fingerprint == "f" * MAX_SENDER_ID


def test_an_event_for_an_entry_the_org_lacks_names_the_verb_whole(grandbo):
    """`import-events` of an edited export said "No entry 'mem-x' in org 'gamma' to purg."."""
    memory = grandbo.org("acme", create=True)
    for kind, verb in ((EventType.PURGED, "purge"), (EventType.RETIRED, "retire"), (EventType.CORRECTED, "correct")):
        with pytest.raises(EntryStateError, match=f"to {verb}\\.$"):
            grandbo._store.append("acme", [NewEvent("mem-x", kind, {"reason": "r"}, "test", utcnow())])
    assert memory.org == "acme"


def test_an_empty_org_name_is_refused_not_read_as_the_default(cli):
    """`--org ''` (an unset shell variable) silently meant the default org."""
    result = cli("stats", "--org", "", code=2)
    assert "Invalid organization id ''" in result.stderr


@pytest.mark.parametrize(
    ("source", "path", "value", "named"),
    [
        ("opsgenie", ("alert", "alertId"), 12345, "alert.alertId must be a string, not a number (12345)"),
        ("opsgenie", ("alert", "message"), ["lag"], "alert.message must be a string, not a list"),
        ("opsgenie", ("action",), True, "action must be a string, not a boolean"),
        ("opsgenie", ("alert", "alias"), 7, "alert.alias must be a string, not a number"),
        ("pagerduty", ("event", "id"), 42, "event.id must be a string, not a number (42)"),
        ("pagerduty", ("event", "event_type"), {"t": 1}, "event.event_type must be a string, not an object"),
        ("pagerduty", ("event", "data", "title"), 5, "event.data.title must be a string, not a number"),
        ("pagerduty", ("event", "data", "incident_key"), 99, "event.data.incident_key must be a string"),
        ("alertmanager", ("alerts", 1, "fingerprint"), 123, "alerts[1].fingerprint must be a string"),
        ("alertmanager", ("alerts", 0, "status"), 1, "alerts[0].status must be a string"),
        ("grafana", ("alerts", 0, "fingerprint"), 5.5, "alerts[0].fingerprint must be a string"),
    ],
)
def test_a_webhook_field_of_the_wrong_type_is_named_not_reported_missing(source, path, value, named):
    """Opsgenie's `alertId` sent as a number was refused as "action, alert.alertId and alert.message are required"
    (it was there; read as absent), PagerDuty's `event.id` likewise; an Alertmanager fingerprint sent as a number
    was replaced by a digest of the labels, silently."""
    body = copy.deepcopy({"opsgenie": OPSGENIE, "pagerduty": PAGERDUTY, "grafana": GRAFANA}.get(source, ALERTMANAGER))
    *parents, last = path
    holder = body
    for step in parents:
        holder = holder[step]
    holder[last] = value
    with pytest.raises(InvalidInputError, match=re.escape(named)) as refused:
        adapters.parse(source, json.dumps(body).encode())
    assert "required" not in str(refused.value)


@pytest.mark.parametrize(
    ("source", "path", "value", "named"),
    [
        ("pagerduty", ("routing_key",), {"k": 1}, "event 0's routing_key must be text or a number, not an object"),
        ("pagerduty", ("payload", "summary"), ["x"], "event 0's payload.summary must be text or a number, not a list"),
        ("pagerduty", ("payload", "source"), True, "event 0's payload.source must be text or a number, not a boolean"),
        ("argocd", ("app",), {"name": "checkout"}, "item 0: `app` must be text or a number, not an object"),
        ("argocd", ("revision",), ["4c1e"], "item 0: `revision` must be text or a number, not a list"),
    ],
)
def test_a_change_field_of_the_wrong_type_is_named_not_reported_missing(source, path, value, named):
    """A PagerDuty change event's routing_key sent as an object was refused as "has no routing_key", an Argo CD
    `app` as an object as "has no `app` or no `revision`": both were there."""
    body = json.loads((Path(__file__).parent / "data" / "changes" / f"{source}.json").read_bytes())
    *parents, last = path
    holder = body
    for step in parents:
        holder = holder[step]
    holder[last] = value
    with pytest.raises(InvalidInputError, match=re.escape(named)):
        changes.parse(source, json.dumps(body).encode())
