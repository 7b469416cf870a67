"""Small edges a hostile-input probe found (probe 20b, its LOW list): each was answered, but wrongly or unclearly."""

from __future__ import annotations

import copy
import json

import pytest

from grandbo.errors import EntryStateError, InvalidInputError
from grandbo.ingest import adapters
from grandbo.ingest.adapters import MAX_SENDER_ID
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
