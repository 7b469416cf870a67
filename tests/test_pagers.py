"""A pager integration as it meets Grandbo: short titles, compact answers, the alert list's filters and cursor,
vendor service names, and plans that follow the ledger (issue 27, items 5 and 7)."""

from __future__ import annotations

import copy
import json
import sqlite3
from datetime import UTC, timedelta

import pytest

from grandbo.errors import InvalidInputError
from grandbo.ingest import adapters
from grandbo.ingest.signatures import sign
from grandbo.tiers.operations import ALERTS
from tests.serving import serving
from tests.test_webhooks import ALERTMANAGER, OPSGENIE, PAGERDUTY, REDIS, post

OOM = {
    "id": "INC-210-F1",
    "title": "label-renderer pods OOMKilled while rendering large label batches",
    "body": "Mechanism: the renderer holds every page of a batch in memory; pods OOMKilled at the 2 GiB limit. "
    "Fix: stream pages, raise the limit to 4 GiB.",
    "kind": "finding",
    "services": ["label-renderer"],
    "meta": {"runbook_id": "RB-RENDERER-STREAM"},
}


def _paged(title: str, service: str, incident: str = "PLBL001") -> bytes:
    event = copy.deepcopy(PAGERDUTY)
    event["event"]["data"].update(id=incident, title=title, incident_key=incident)
    event["event"]["data"]["service"]["summary"] = service
    return json.dumps(event).encode()


@pytest.fixture
def acme(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.remember_many([REDIS, OOM])
    memory.webhook_secrets.add("pagerduty", "pd-secret")
    _, key = memory.keys.create("write", name="pager")
    return memory, key


def _deliver(client, body: bytes):
    return post(client, "pagerduty", None, body=body, headers={"X-PagerDuty-Signature": sign(body, "pd-secret")})


def test_a_pagerduty_incident_with_a_short_title_is_recalled_not_refused_as_a_slug(grandbo, acme):
    """`label-renderer OOMKilled` was asked of recall as it came, two words, and refused as a slug: the alert
    kept `recall_failed` and no plan, though INC-210 is this very problem."""
    _, key = acme
    with serving(grandbo) as served, served.client(key) as client:
        answer = _deliver(client, _paged("label-renderer OOMKilled", "label-renderer"))
        assert answer.status_code == 202, answer.text
        (brief,) = answer.json()["alerts"]
        kept = client.get(brief["href"]).json()
    assert brief["state"] == "recalled" and brief["top_match"]["id"] == "INC-210-F1"
    assert kept["query"].startswith("label-renderer OOMKilled alert firing on label-renderer")
    assert kept["plan"]["citations"][0]["id"] == "INC-210-F1"


def test_a_short_alertmanager_alert_says_what_fired_with_its_labels():
    (alert,) = adapters.alertmanager({**ALERTMANAGER, "alerts": [{
        "status": "firing", "labels": {"alertname": "KubePodOOMKilled", "namespace": "labels", "job": "renderer",
                                       "severity": "page"},
        "annotations": {}, "startsAt": "2026-11-30T10:00:00Z", "fingerprint": "f00d",
    }]})  # fmt: skip
    assert alert.query() == "KubePodOOMKilled alert firing on renderer (namespace labels)"


def test_webhook_answers_are_compact_and_the_whole_alert_is_one_get_away(grandbo, acme):
    """Each answer carried every alert's whole recall and plan (20-27 KB an alert)."""
    _, key = acme
    with serving(grandbo) as served, served.client(key) as client:
        answer = post(client, "alertmanager", ALERTMANAGER)
        briefs = answer.json()["alerts"]
        whole = [client.get(brief["href"]) for brief in briefs]
    assert answer.status_code == 202 and len(briefs) == 3
    assert len(answer.content) < 800 * len(briefs)  # about 500 bytes an alert
    assert all(response.status_code == 200 and len(response.content) > len(answer.content) for response in whole)
    redis = next(b for b in briefs if b["service"] == "redis-sessions")
    assert redis["top_match"]["id"] == "INC-044-F1" and redis["seen_before"] is not None
    assert set(redis) >= {"id", "state", "status", "seen_before", "top_match", "top_runbook", "href"}


@pytest.mark.parametrize("start", ["9999-12-31T23:59:59-05:00", "00010101T030000+0500"])
def test_an_alert_whose_start_is_past_the_calendar_in_utc_is_kept_without_one(grandbo, acme, start):
    """A sender's start whose offset puts it past the calendar in UTC failed the whole delivery with a 500 (its
    good alerts unstored too): it is no start, and the alert is kept and triaged by its receipt."""
    _, key = acme
    delivery = copy.deepcopy(ALERTMANAGER)
    delivery["alerts"][0]["startsAt"] = start
    with serving(grandbo) as served, served.client(key) as client:
        answer = post(client, "alertmanager", delivery)
        kept = [client.get(brief["href"]).json() for brief in answer.json()["alerts"]]
    assert answer.status_code == 202 and len(kept) == len(delivery["alerts"])
    assert kept[0]["alert"]["started_at"] is None and kept[0]["plan"] is not None
    assert all(alert["alert"]["started_at"] for alert in kept[1:])


def test_triage_of_an_inline_alert_returns_no_id_that_answers_404_and_a_received_one_resolves(grandbo, acme):
    """`triage_alert` on a summary returned an `alert_id` (the unstored alert's) that `GET /v1/alerts/{id}`
    answered with 404."""
    from grandbo.mcp import tools

    memory, key = acme
    with serving(grandbo) as served, served.client(key) as client:
        inline = client.post("/v1/triage", json={"summary": "label-renderer pods OOMKilled at the memory limit"})
        received = _deliver(client, _paged("label-renderer OOMKilled", "label-renderer")).json()["alerts"][0]
        by_id = client.post("/v1/triage", json={"alert_id": received["id"], "narrate": False}).json()
        assert client.get(f"/v1/alerts/{by_id['alert_id']}").status_code == 200
    assert inline.status_code == 200 and inline.json()["alert_id"] is None
    assert tools.triage_alert(memory, summary="label-renderer pods OOMKilled at the memory limit").alert_id is None


def test_a_vendor_alert_that_was_never_received_gets_no_alert_id_until_it_is(memory):
    """`grandbo triage FILE --source alertmanager` gave the plan an id no route answers."""
    memory.remember(REDIS)
    alert = adapters.alertmanager(ALERTMANAGER)[0]
    assert memory.triage(alert, narrate=False).alert_id is None
    ((stored, _),) = memory.alerts.receive([alert])
    assert memory.triage(alert, narrate=False).alert_id == stored.id == memory.alerts.get(stored.id).id


def _received(memory, count: int, tag: str, **alert):
    """`count` alerts, each its own delivery (so each is written after the one before)."""
    first = {**ALERTMANAGER["alerts"][0], **alert}
    out = []
    for n in range(count):
        delivery = {**ALERTMANAGER, "alerts": [{**first, "fingerprint": f"{tag}-{n}"}]}
        out += [stored.id for stored, _ in memory.alerts.receive(adapters.alertmanager(delivery))]
    return out


class _Counted:
    """The alerts' documents, passed through, counting the documents each read hands up."""

    def __init__(self, documents) -> None:
        self.documents, self.read = documents, 0

    def __getattr__(self, name: str):
        method = getattr(self.documents, name)

        def counted(*args, **kwargs):
            found = method(*args, **kwargs)
            self.read += len(found) if isinstance(found, list) else found is not None
            return found

        return counted


def test_the_alert_list_reads_only_the_alerts_it_returns(memory):
    """`GET /v1/alerts?limit=1` read and validated every stored alert."""
    ids = _received(memory, 30, "many")
    counted = _Counted(memory.alerts.documents)
    memory.alerts.documents = counted
    seen, after = [], None
    for _ in range(3):
        (alert,), after = memory.alerts.page(1, after=after)
        seen.append(alert.id)
        assert after is not None
    assert counted.read == 3 and len(set(seen)) == 3 and set(seen) <= set(ids)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # Postgres keeps only valid JSON (jsonb)
def test_a_damaged_older_alert_does_not_stop_the_first_page(grandbo, settings):
    memory = grandbo.org("acme", create=True)
    ids = _received(memory, 4, "kept")
    _, key = memory.keys.create("read")
    with sqlite3.connect(settings.home / "grandbo.db") as db:
        db.executemany("UPDATE documents SET data = '{\"alert\": [tru', updated_at = '2026-01-01T00:00:00+00:00' "
                       "WHERE doc_id = ?", [(i,) for i in ids[:-1]])  # fmt: skip
    with serving(grandbo) as served, served.client(key) as client:
        listed = client.get("/v1/alerts", params={"limit": 1})
    assert listed.status_code == 200 and [a["id"] for a in listed.json()["items"]] == [ids[-1]]


def test_the_alert_list_filters_by_status_service_source_and_time_and_pages_with_a_cursor(grandbo, acme):
    memory, key = acme
    firing = _received(memory, 3, "redis", labels={"alertname": "RedisEvictions", "service": "redis-sessions"})
    resolved = copy.deepcopy(ALERTMANAGER)
    resolved["alerts"][0].update(status="resolved", fingerprint="redis-0")
    memory.alerts.receive(adapters.alertmanager({**resolved, "alerts": resolved["alerts"][:1]}))
    (opsgenie,) = memory.alerts.receive(adapters.opsgenie(OPSGENIE))
    with serving(grandbo) as served, served.client(key) as client:

        def ids(**params):
            answer = client.get("/v1/alerts", params=params)
            assert answer.status_code == 200, answer.text
            return [a["id"] for a in answer.json()["items"]]

        assert ids(status="resolved") == [firing[0]]
        assert sorted(ids(status="firing", service="redis-sessions")) == sorted(firing[1:])
        assert ids(source="opsgenie") == [opsgenie[0].id]
        assert ids(service="orders-consumer") == [opsgenie[0].id]
        assert ids(since="2999-01-01T00:00:00Z") == []
        changed = {i: memory.alerts.documents.get(ALERTS, i).updated_at for i in [*firing, opsgenie[0].id]}
        assert ids(until="2000-01-01T00:00:00Z") == [] and opsgenie[0].id not in ids(until=changed[opsgenie[0].id])
        # SQLite compares write times to the millisecond: a moment 1 ms after the firing alerts' last change
        after_firing = (max(changed[i] for i in firing) + timedelta(milliseconds=1)).astimezone(UTC)
        assert set(ids(until=after_firing.isoformat())) >= set(firing)
        paged, cursor = [], None
        while True:  # a cursor and `until` (here without a zone: UTC) together page on before both
            asked = {"limit": 1, "until": after_firing.replace(tzinfo=None).isoformat()}
            page = client.get("/v1/alerts", params={**asked, **({"cursor": cursor} if cursor else {})})
            assert page.status_code == 200, page.text
            paged += [a["id"] for a in page.json()["items"]]
            if not (cursor := page.json()["next_cursor"]):
                break
        assert set(paged) >= set(firing) and len(paged) == len(set(paged))
        seen, cursor = [], None
        while True:
            page = client.get("/v1/alerts", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
            seen += [a["id"] for a in page["items"]]
            if not (cursor := page["next_cursor"]):
                break
        assert sorted(seen) == sorted({*firing, opsgenie[0].id}) and len(seen) == 4
        bad = client.get("/v1/alerts", params={"cursor": "not-ours"})
        assert bad.status_code == 422 and "cursor" in bad.json()["error"]["message"]


CATALOG = {"services": [
    {"name": "label-renderer", "aliases": ["Label Renderer Service", "PLBLSVC"]},
    {"name": "auth-service", "aliases": ["API Service"]},
]}  # fmt: skip


def test_a_vendor_s_service_name_is_the_catalog_s_through_its_aliases(grandbo, acme):
    memory, key = acme
    memory.catalog.import_text(json.dumps(CATALOG))
    with serving(grandbo) as served, served.client(key) as client:
        (brief,) = _deliver(client, _paged("label-renderer OOMKilled", "Label Renderer Service")).json()["alerts"]
        listed = client.get("/v1/alerts", params={"service": "label renderer service"}).json()["items"]
        catalog = client.get("/v1/catalog").json()["items"]
        by_id = _paged("label-renderer OOMKilled again", "Renderer (legacy name)", incident="PLBL002")
        by_id = by_id.replace(b'"id": "PF9KMXH"', b'"id": "PLBLSVC"')  # the service's PagerDuty id is an alias
        (second,) = _deliver(client, by_id).json()["alerts"]
    assert brief["service"] == "label-renderer" and brief["top_match"]["id"] == "INC-210-F1"
    assert second["service"] == "label-renderer"
    assert [a["id"] for a in listed] == [brief["id"]]
    assert {s["name"]: s.get("aliases") for s in catalog}["auth-service"] == ["API Service"]


@pytest.mark.parametrize(
    ("services", "problem"),
    [
        ([{"name": "a", "aliases": ["Shared"]}, {"name": "b", "aliases": ["shared"]}], "names both"),
        ([{"name": "a", "aliases": ["B"]}, {"name": "b"}], "name of another service"),
        ([{"name": "a", "aliases": [""]}], "an alias is 1 to 128 characters"),
    ],
)
def test_an_alias_that_names_two_services_is_refused(memory, services, problem):
    with pytest.raises(InvalidInputError, match=problem):
        memory.catalog.import_text(json.dumps({"services": services}))


def _runbooks(memory) -> None:
    memory.runbooks.add("RB-RENDERER-STREAM", "Stream label pages", ["stream pages", "raise the limit to 4 GiB"])
    memory.runbooks.add("RB-RENDERER-RESTART", "Restart the renderer", ["roll the deployment"])
    memory.remember({"id": "INC-300-F1", "kind": "finding", "services": ["label-renderer"],
                     "title": "label-renderer pods OOMKilled again after a large batch",
                     "body": "Mechanism: a large batch; pods OOMKilled. Restarted the renderer.",
                     "meta": {"runbook_id": "RB-RENDERER-RESTART"}})  # fmt: skip


def test_a_runbook_never_tried_is_listed_after_one_with_a_record_and_the_plan_says_so(memory):
    """A runbook with no record (n = 0, interval 0.05-0.95) came first on recall's rank alone."""
    memory.remember(OOM)
    _runbooks(memory)
    for _ in range(3):
        memory.ledger.record("RB-RENDERER-RESTART", "succeeded", service="label-renderer")
    summary = "label-renderer pods OOMKilled rendering large label batches at the 2 GiB memory limit"
    plan = memory.triage({"summary": summary, "service": "label-renderer"}, narrate=False)
    order = [r.id for r in plan.runbooks]
    assert [c.id for c in plan.citations][:2] == ["INC-210-F1", "INC-300-F1"]  # recall ranks the untried one's first
    assert order == ["RB-RENDERER-RESTART", "RB-RENDERER-STREAM"], order
    assert [r.untried for r in plan.runbooks] == [False, True]
    assert any("RB-RENDERER-STREAM has no record yet" in note for note in plan.notes)


def test_a_kept_plan_reads_the_ledger_as_it_is_now(grandbo, acme):
    """The plan kept with an alert kept the records of the moment it was triaged."""
    memory, key = acme
    _runbooks(memory)
    with serving(grandbo) as served, served.client(key) as client:
        (brief,) = _deliver(client, _paged("label-renderer OOMKilled", "label-renderer")).json()["alerts"]
        before = client.get(brief["href"]).json()["plan"]["runbooks"]
        for _ in range(4):
            memory.ledger.record("RB-RENDERER-STREAM", "succeeded", service="label-renderer")
        after = client.get(brief["href"]).json()["plan"]["runbooks"]
        (listed,) = client.get("/v1/alerts").json()["items"]
    assert {r["id"]: r["attempts"] for r in before} == {"RB-RENDERER-STREAM": 0, "RB-RENDERER-RESTART": 0}
    assert {r["id"]: r["attempts"] for r in after}["RB-RENDERER-STREAM"] == 4
    assert after[0]["id"] == "RB-RENDERER-STREAM" and after[0]["scope"] == "label-renderer"
    assert listed["top_runbook"] == {"id": "RB-RENDERER-STREAM", "title": "Stream label pages",
                                     "win_rate": after[0]["win_rate"], "attempts": 4}  # fmt: skip
