"""Small edges a hostile-input probe found (probe 20b, its LOW list): each was answered, but wrongly or unclearly."""

from __future__ import annotations

import copy
import json

import pytest

from grandbo.errors import EntryStateError
from grandbo.ingest import adapters
from grandbo.ingest.alert import MAX_FINGERPRINT
from grandbo.model import EventType, utcnow
from grandbo.ports import NewEvent
from tests.test_webhooks import ALERTMANAGER


@pytest.mark.parametrize("status", ["RESOLVED", "Resolved"])
def test_an_alertmanager_resolve_in_capitals_is_a_resolve(status):
    """It was filed as firing, silently: only the exact "resolved" resolved."""
    body = copy.deepcopy(ALERTMANAGER)
    body["alerts"][0]["status"] = status
    (first, *_) = adapters.parse("alertmanager", json.dumps(body).encode())
    assert first.status == "resolved"


def test_a_sender_id_past_its_bound_is_kept_as_its_hash_the_same_alert_alike(grandbo):
    """A 1 MB Alertmanager fingerprint was stored whole (twice: the fingerprint and the event id) with the alert."""
    body = copy.deepcopy(ALERTMANAGER)
    body["alerts"] = body["alerts"][:1]
    body["alerts"][0]["fingerprint"] = "f" * 1_000_000
    raw = json.dumps(body).encode()
    (alert,) = adapters.parse("alertmanager", raw)
    assert alert.fingerprint.startswith("sha256:") and len(alert.fingerprint) <= MAX_FINGERPRINT
    assert len(alert.event_id) <= MAX_FINGERPRINT
    memory = grandbo.org("acme", create=True)
    ((stored, new),) = memory.alerts.receive([alert])
    ((again, new_again),) = memory.alerts.receive(adapters.parse("alertmanager", raw))
    assert new and not new_again and again.id == stored.id and again.deliveries == 2
    short = copy.deepcopy(ALERTMANAGER)["alerts"][0]["fingerprint"]
    assert adapters.parse("alertmanager", json.dumps(ALERTMANAGER).encode())[0].fingerprint == short  # kept as sent


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
