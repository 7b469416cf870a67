"""Look-alike service names (probe 20b, LOW): fullwidth letters, a zero-width space, a Cyrillic letter in a Latin
word. Every write and every filter keeps a service's name in one form (`names.service_name`: NFKC, no invisible
format character, lower case), so names that normalize equal are one name; a name mixing scripts is refused, with a
422 that names it, only when a write adds it: a name a record kept before carries forward (review 21 reverted a
rule that refused it on the record's next write). On both backends."""

from __future__ import annotations

import json
import sqlite3

import anyio
import psycopg
import pytest

from grandbo import Grandbo
from grandbo.errors import InvalidInputError
from grandbo.ingest.alert import Alert
from grandbo.model import utcnow
from grandbo.names import look_alike, service_name
from grandbo.ports import DocumentWrite
from grandbo.tiers.change_model import NewChange
from tests.conftest import owner_url
from tests.serving import serving
from tests.test_mcp import http_client, session

CYRILLIC = "\u0441heckout-api"  # its first letter is Cyrillic es
ZERO_WIDTH = "checkout\u200b-api"
FULLWIDTH = "\uff43\uff48\uff45\uff43\uff4b\uff4f\uff55\uff54-api"  # ｃｈｅｃｋｏｕｔ-api
# Names a release before stored that are no look-alikes: the micro sign, a Greek delta, an emoji with a joiner.
KEPT_NAMES = ["\u00b5service", "k8s-\u0394T", "\U0001f469\u200d\U0001f4bb-api"]
SAID = "mixes Cyrillic and Latin letters in one word"


def test_names_that_normalize_equal_are_one_name_on_every_write_and_filter(grandbo):
    """`POST /v1/memories` stored them verbatim (201): the memory never matched the `services` filter or the
    catalog's topology, whose name is `checkout-api`."""
    memory = grandbo.org("acme", create=True)
    memory.catalog.import_text("services:\n  - name: checkout-api\n    depends_on: [payments-db]\n")
    _, key = memory.keys.create("write")
    with serving(grandbo) as served, served.client(key) as client:
        ids = []
        for name in (FULLWIDTH, ZERO_WIDTH, "Checkout-API"):
            stored = client.post("/v1/memories", json={"title": f"Checkout pool exhausted {len(ids)}",
                                                       "services": [name]})  # fmt: skip
            assert stored.status_code == 201 and stored.json()["services"] == ["checkout-api"], stored.text
            ids.append(stored.json()["id"])
        for asked in ("checkout-api", FULLWIDTH, ZERO_WIDTH, "CHECKOUT-API"):
            listed = client.get("/v1/memories", params={"service": asked}).json()["items"]
            assert sorted(entry["id"] for entry in listed) == sorted(ids), asked
    answer = memory.recall("checkout pool exhausted", services=[ZERO_WIDTH])
    assert answer.hits and all(hit.why.rerank.service.note == "same service" for hit in answer.hits)
    incident = memory.incidents.open("Checkout down", services=[FULLWIDTH, "checkout-api"])
    assert incident.services == ["checkout-api"]
    (service,) = memory.catalog.import_text(
        f'{{"services": [{{"name": "{FULLWIDTH}", "depends_on": ["{ZERO_WIDTH}x"]}}]}}'
    )
    assert (service.name, service.depends_on) == ("checkout-api", ["checkout-apix"])
    change, _ = memory.changes.add(NewChange(id="d1", service=FULLWIDTH, summary="deploy", at=utcnow()))
    assert change.service == "checkout-api" and [c.id for c in memory.changes.find(service=ZERO_WIDTH)[0]] == ["d1"]
    ((alert, _),) = memory.alerts.receive([Alert(source="alertmanager", event_id="a1", fingerprint="fp",
                                                 service=FULLWIDTH, summary="checkout 5xx above 5%")])  # fmt: skip
    assert alert.alert.service == "checkout-api" and [a.id for a in memory.alerts.page(service=ZERO_WIDTH)[0]] == [
        alert.id
    ]


def test_a_look_alike_a_write_adds_is_refused_naming_it_and_nothing_is_stored(grandbo):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    with serving(grandbo) as served, served.client(key) as client:
        refused = client.post("/v1/memories", json={"title": "Checkout pool exhausted", "services": [CYRILLIC]})
        assert refused.status_code == 422, refused.text
        message = refused.json()["error"]["message"]
        assert repr(CYRILLIC) in message and SAID in message and "write each word in one script" in message
        greek = client.post("/v1/incidents", json={"title": "Auth down", "services": ["\u03b1uth-service"]})
        assert greek.status_code == 422 and "mixes Greek and Latin letters" in greek.json()["error"]["message"]
    assert memory.entries() == [] and memory.incidents.find() == []
    with pytest.raises(InvalidInputError, match=SAID):
        memory.catalog.import_text(f"services:\n  - name: web\n    depends_on: [{CYRILLIC}]\n")
    assert memory.catalog.topology().names == []
    incident = memory.incidents.open("Checkout down", services=["checkout-api"])
    with pytest.raises(InvalidInputError, match=SAID):
        memory.incidents.add_finding(incident.id, "pool exhausted", services=[CYRILLIC])
    with pytest.raises(InvalidInputError, match=SAID):
        memory.incidents.edit(incident.id, services=["checkout-api", CYRILLIC])
    assert memory.incidents.get(incident.id).services == ["checkout-api"]


def test_symbols_in_latin_words_emoji_and_words_of_one_script_are_no_look_alikes(grandbo):
    memory = grandbo.org("acme", create=True)
    names = [*KEPT_NAMES, "\u043f\u043b\u0430\u0442\u0435\u0436\u0438-api", "\u6c7a\u6e08-api", "\u03a9-meter"]
    entry = memory.remember({"title": "Names of every kind", "services": names})
    assert entry.services == [service_name(name) for name in names]
    assert entry.services[:3] == ["\u03bcservice", "k8s-\u03b4t", "\U0001f469\u200d\U0001f4bb-api"]  # joiner kept
    assert [look_alike(name) for name in entry.services] == [None] * len(names)
    assert service_name("check\u200dout") == "checkout"  # a joiner between letters is a zero-width trick


def test_an_mcp_tool_refuses_a_look_alike_service_saying_why(grandbo):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    with serving(grandbo) as served:
        refused = anyio.run(
            session, http_client(served.url, key),
            lambda client: client.call_tool("open_incident", {"title": "Checkout down", "services": [CYRILLIC]}),
        )  # fmt: skip
    assert refused.is_error and SAID in refused.content[0].text
    assert memory.incidents.find() == []


def test_a_name_a_record_kept_before_carries_forward_through_every_later_write(grandbo, settings):
    """Review 21's case: an incident a release before stored with such names was refused on its next write (every
    edit refused, its close's sync failing for good). Its names carry forward; a new look-alike is still refused."""
    memory = grandbo.org("acme", create=True)
    incident = memory.incidents.open("Checkout down", services=["checkout-api"])
    memory.incidents.add_finding(incident.id, "pool exhausted", status="corroborated", services=["checkout-api"])
    entry = memory.remember({"title": "Checkout pool runbook", "services": ["checkout-api"]})
    old = [CYRILLIC, *KEPT_NAMES]
    _stored_before(settings, "acme", incident.id, entry.id, old)
    with Grandbo.open(settings) as again:  # a process that never held the rows as written since
        _carried_forward(again.org("acme"), incident.id, entry.id, [service_name(name) for name in old])


def _carried_forward(memory, incident_id, entry_id, held):
    assert memory.incidents.get(incident_id).services == held
    edited = memory.incidents.edit(incident_id, title="Checkout down hard")
    assert edited.services == held
    memory.incidents.update_finding(incident_id, "f1", summary="pool exhausted by retries")
    memory.incidents.add_finding(incident_id, "retry storm", status="corroborated", services=[CYRILLIC])  # it holds it
    closed = memory.incidents.close(incident_id, resolution="raised the pool")
    assert closed.services == held
    memory.incidents.sync(incident_id)  # its memory is written, the names with it (a refusal would raise)
    synced = [e for e in memory.entries() if e.meta.get("incident_id") == incident_id]
    assert synced and all(set(held) <= set(e.services) for e in synced if e.kind.value == "finding")
    corrected = memory.correct(entry_id, {"title": "Checkout pool runbook, v2", "services": held})
    assert corrected.services == held
    with pytest.raises(InvalidInputError, match=SAID):
        memory.incidents.edit(incident_id, services=[*held, "\u0441art-api"])


def _stored_before(settings, org, incident_id, entry_id, names):
    """An incident's services, its finding's, and an entry's (the projection's row and the event it came from) as
    a release before this rule kept them, as sent."""
    listed = json.dumps(names)
    incident = "UPDATE documents SET data = {set} WHERE org_id = {p} AND collection = 'incident' AND doc_id = {p}"
    entry = "UPDATE memory_entries SET services = {j} WHERE org_id = {p} AND entry_id = {p}"
    if settings.database_url:
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn, conn.transaction():
            conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
            both = "jsonb_set(jsonb_set(data, '{services}', %s::jsonb), '{findings,0,services}', %s::jsonb)"
            conn.execute(incident.format(set=both, p="%s"), (listed, listed, org, incident_id))
            conn.execute(entry.format(j="%s::jsonb", p="%s"), (listed, org, entry_id))
        return
    with sqlite3.connect(settings.home / "grandbo.db") as conn:
        both = "json_set(data, '$.services', json(?), '$.findings[0].services', json(?))"
        conn.execute(incident.format(set=both, p="?"), (listed, listed, org, incident_id))
        conn.execute(entry.format(j="?", p="?"), (listed, org, entry_id))


@pytest.mark.parametrize("name", ["caf\u00b4e-api", "\ufdfa-svc"])
def test_a_name_nfkc_would_split_into_words_stays_as_it_was_and_readable(grandbo, name):
    """NFKC makes a spacing accent a space and a mark (`´`) and a ligature of words words (U+FDFA): a catalog service
    stored so by an earlier release became unreadable and left the topology without a word (review 23 L1)."""
    memory = grandbo.org("acme", create=True)
    assert service_name(name) == name and service_name(service_name(name)) == name
    data = {"name": name, "depends_on": ["payments-db"], "owners": [], "aliases": []}
    memory._documents.put([DocumentWrite("service", name, data, "service.put", ref=name)], "an earlier release")
    assert name in memory.catalog.topology().names
