"""Every triage plan says what changed and where it started, through the org handle on both stores: the changes
before the alert on its path, ranked and cited, what followed earlier ones like them, the probable origin, open
incidents on related services and the outlier label."""

from __future__ import annotations

import json
from datetime import timedelta

from grandbo.history.importer import import_history
from grandbo.history.registry import reader
from grandbo.ingest import adapters
from grandbo.ingest.alert import Alert
from grandbo.memory import OrgMemory
from grandbo.model import utcnow
from grandbo.ports import DocumentWrite
from grandbo.tiers.change_model import ChangeKind, NewChange
from grandbo.triage.plan import TriagePlan

CATALOG = """
services:
  - {name: web, depends_on: [checkout-api]}
  - {name: checkout-api, depends_on: [payments-gateway]}
  - {name: payments-gateway, depends_on: [payments-db]}
  - {name: payments-db}
  - {name: search}
"""


def _alert(service: str, at, summary: str) -> Alert:
    """An alert received at `at` that its vendor says started a minute before (Alertmanager's startsAt)."""
    return Alert(source="alertmanager", event_id=f"{service}:{at.isoformat()}", fingerprint=f"{service}:{summary}",
                 service=service, summary=summary, started_at=at - timedelta(minutes=1), received_at=at)  # fmt: skip


def test_a_plan_lists_the_changes_on_its_path_ranked_cited_with_the_origin_and_related_incidents(
    memory: OrgMemory, backend: str
):
    now = utcnow().replace(microsecond=0)
    memory.catalog.import_text(CATALOG)
    changes = memory.changes

    def add(id: str, service: str, before: timedelta, kind: ChangeKind = ChangeKind.DEPLOY) -> None:
        changes.add(NewChange(id=id, service=service, kind=kind, summary=f"{kind.value} {id}", at=now - before,
                              url=f"https://ci.example/{id}"), source="generic")  # fmt: skip

    for days in (3, 2, 1):
        add(f"pg-{days}d", "payments-gateway", timedelta(days=days))
    add("pg-v2.14", "payments-gateway", timedelta(minutes=10))
    add("search-v9", "search", timedelta(minutes=5))
    add("pg-cfg-old", "payments-gateway", timedelta(minutes=200), ChangeKind.CONFIG)
    incidents = memory.incidents
    incidents.open("checkout 5xx", services=["checkout-api"], started_at=now - timedelta(days=3) + timedelta(minutes=20),
                   incident_id="INC-038")  # fmt: skip
    incidents.close("INC-038", runbook_used="RB-ROLLBACK", succeeded=True)
    incidents.open("payments-db replica lag", services=["payments-db"], started_at=now - timedelta(minutes=30),
                   incident_id="INC-200")  # fmt: skip
    incidents.open("search down", services=["search"], started_at=now - timedelta(minutes=30), incident_id="INC-201")
    first = _alert("payments-gateway", now - timedelta(minutes=4), "payments-gateway 5xx error rate above 5%")
    this = _alert("checkout-api", now, "checkout-api 5xx error rate above 5%")
    memory.alerts.receive([first, this])

    plan = memory.triage(this, narrate=False, now=now)

    assert [c.id for c in plan.changes] == ["pg-v2.14"]  # search is off the path; the config push outside the window
    top = plan.changes[0]
    assert (top.service, top.kind, top.hops, top.minutes_before) == ("payments-gateway", "deploy", 1, 9.0)  # to start
    assert top.url == "https://ci.example/pg-v2.14" and top.at == now - timedelta(minutes=10)
    assert top.score == round(sum(p.contribution for p in top.why.values()), 4)
    # The burst ends at this alert's receipt, a minute after it started: this alert is in it.
    assert top.why["explains"].note == "upstream of 2 of the 2 services alerting in this burst"
    assert top.record is not None and top.record.earlier == ["pg-1d", "pg-2d", "pg-3d"]  # newest first
    assert top.record.followed == ["INC-038"] and "INC-038" in top.record.text
    assert [(r.id, r.worked, r.tried) for r in top.record.runbooks] == [("RB-ROLLBACK", 1, 1)]
    assert plan.origin is not None and plan.origin.service == "payments-gateway" and plan.origin.change_id == "pg-v2.14"
    assert plan.origin.alert_id == first.id and set(plan.origin.cites) == {"pg-v2.14", first.id}
    assert [(r.id, r.hops) for r in plan.related_incidents] == [("INC-200", 2)]
    assert plan.outlier == "anomalous" and plan.outlier_share is None  # checkout-api's first alert in 30 days
    assert {"pg-v2.14", "pg-3d", "INC-038", "INC-200"} <= plan.known_ids()  # what a narration may cite
    assert TriagePlan.model_validate_json(plan.model_dump_json()) == plan  # kept with the alert as it is


def test_an_inline_alert_without_a_service_has_no_changes_and_says_nothing_of_an_origin(memory: OrgMemory):
    memory.catalog.import_text(CATALOG)
    memory.changes.add(NewChange(id="pg", service="payments-gateway", summary="deploy", at=utcnow()), source="cli")
    plan = memory.triage({"summary": "something is slow somewhere"}, narrate=False)
    assert plan.changes == [] and plan.origin is None and plan.related_incidents == [] and plan.outlier is None


def test_grandbo_triage_shows_the_changes_and_the_probable_origin(cli, tmp_path):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG)
    cli("catalog", "import", str(catalog))
    at = (utcnow() - timedelta(minutes=7)).isoformat()
    cli("change", "add", "--service", "payments-gateway", "--summary", "Raise the pool to 64", "--kind", "config",
        "--id", "pg-pool-64", "--at", at)  # fmt: skip
    shown = cli(
        "triage", "--summary", "checkout 5xx error rate above 5%", "--service", "checkout-api", "--no-llm"
    ).stdout
    assert "changed: config pg-pool-64 on payments-gateway, 7 min before (hops: 1)" in shown
    assert "outlier: anomalous" in shown


def test_the_origin_is_the_service_that_started_firing_first_not_the_one_delivered_first(memory: OrgMemory):
    """payments-db's alert started 9 minutes before this one, but its sender held it back and it arrived 2 minutes
    before; checkout-api's arrived 4 minutes before, as it fired. The origin is payments-db, at its start (it was
    checkout-api by arrival). Then a sender whose clock runs ahead says its alert starts half an hour after its
    receipt: it counts from its receipt, not after the alert it precedes."""
    memory.catalog.import_text(CATALOG)
    now = utcnow().replace(microsecond=0)

    def held(service: str, received: int, started: int) -> Alert:
        at = now - timedelta(minutes=received)
        return Alert(source="alertmanager", event_id=f"{service}:{received}", fingerprint=f"{service}:5xx",
                     service=service, summary=f"{service} 5xx error rate above 5%",
                     started_at=now - timedelta(minutes=started), received_at=at)  # fmt: skip

    this = held("web", 0, 0)
    memory.alerts.receive([held("payments-db", 2, 9), held("checkout-api", 4, 4), this])
    origin = memory.triage(this, narrate=False, now=now).origin
    assert origin is not None and (origin.service, origin.hops) == ("payments-db", 3)
    assert origin.at == now - timedelta(minutes=9)

    later = now + timedelta(hours=3)
    this = held("web", -180, -180)
    memory.alerts.receive([held("payments-gateway", -175, -210), held("checkout-api", -178, -178), this])
    origin = memory.triage(this, narrate=False, now=later).origin
    assert origin is not None and (origin.service, origin.at) == ("payments-gateway", later - timedelta(minutes=5))


def test_a_stored_alert_triaged_later_lists_the_changes_before_it_not_before_the_triage(memory: OrgMemory):
    """An alert that tells no start, received an hour before it is triaged again (`POST /v1/triage` with its id):
    a deploy half an hour after it cannot have caused it; the one ten minutes before it may."""
    memory.catalog.import_text(CATALOG)
    now = utcnow().replace(microsecond=0)
    this = Alert(source="alertmanager", event_id="untold", fingerprint="checkout-api:5xx", service="checkout-api",
                 summary="checkout-api 5xx error rate above 5%", received_at=now - timedelta(hours=1))  # fmt: skip
    memory.alerts.receive([this])
    for id, before in (("before-it", 70), ("after-it", 30)):
        memory.changes.add(NewChange(id=id, service="payments-gateway", summary="deploy",
                                     at=now - timedelta(minutes=before)))  # fmt: skip
    plan = memory.triage(memory.alerts.get(this.id).alert, narrate=False, now=now)
    assert [c.id for c in plan.changes] == ["before-it"] and plan.changes[0].minutes_before == 10.0


def test_a_change_stored_after_a_triage_is_in_the_next_plan(memory: OrgMemory):
    """The org's changes are kept per process for triage: a new one is read before the next plan."""
    memory.catalog.import_text(CATALOG)
    now = utcnow().replace(microsecond=0)
    this = _alert("checkout-api", now, "checkout-api 5xx error rate above 5%")
    memory.alerts.receive([this])
    assert memory.triage(this, narrate=False, now=now).changes == []
    memory.changes.add(NewChange(id="late", service="checkout-api", summary="deploy", at=now - timedelta(minutes=3)))
    assert [c.id for c in memory.triage(this, narrate=False, now=now).changes] == ["late"]


def test_incidents_imported_from_history_count_as_following_earlier_changes(memory: OrgMemory, tmp_path):
    memory.catalog.import_text(CATALOG)
    now = utcnow().replace(microsecond=0)
    earlier = now - timedelta(days=5)
    memory.changes.add(NewChange(id="pg-old", service="payments-gateway", summary="deploy", at=earlier))
    memory.changes.add(
        NewChange(id="pg-new", service="payments-gateway", summary="deploy", at=now - timedelta(minutes=5))
    )
    record = {"id": "PD-77", "title": "Checkout 5xx after a payments deploy", "service": "checkout-api",
              "started_at": (earlier + timedelta(minutes=12)).isoformat(), "runbook": "RB-ROLLBACK",
              "runbook_succeeded": True, "postmortem": "The pool shrank to 8 connections."}  # fmt: skip
    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps(record) + "\n")
    report = import_history(memory, reader("jsonl"), history)
    assert report.to_dict()["refused"] == []
    this = _alert("checkout-api", now, "checkout-api 5xx error rate above 5%")
    memory.alerts.receive([this])
    top = memory.triage(this, narrate=False, now=now).changes[0]
    assert top.id == "pg-new" and top.record is not None and top.record.earlier == ["pg-old"]
    assert len(top.record.followed) == 1 and [(r.id, r.worked, r.tried) for r in top.record.runbooks] == [
        ("RB-ROLLBACK", 1, 1)
    ]


def test_a_change_named_in_capitals_is_in_the_plans_and_the_list_of_its_service(memory: OrgMemory):
    # No catalog: a GitHub deployment's service is its repository's name, often in capitals. Alertmanager's alert
    # names the service in lower case (as every webhook does): the change was in none of its plans nor in the
    # list asked by the service's name.
    now = utcnow().replace(microsecond=0)
    memory.changes.add(NewChange(id="d1", service="Payments-Gateway", summary="deploy v2",
                                 at=now - timedelta(minutes=5)), source="github")  # fmt: skip
    payload = {"version": "4", "status": "firing", "alerts": [{
        "status": "firing", "labels": {"alertname": "HighErrorRate", "service": "Payments-Gateway"},
        "annotations": {"summary": "payments gateway 5xx error rate above 5%"}, "startsAt": now.isoformat(),
        "fingerprint": "abc"}]}  # fmt: skip
    (alert,) = adapters.parse("alertmanager", json.dumps(payload).encode())
    assert alert.service == "payments-gateway"
    assert [c.id for c in memory.triage(alert, narrate=False, now=now).changes] == ["d1"]
    inline = {"summary": "payments gateway 5xx error rate above 5%", "service": "Payments-Gateway"}
    assert [c.id for c in memory.triage(inline, narrate=False, now=now).changes] == ["d1"]
    for asked in ("payments-gateway", "Payments-Gateway"):
        assert [c.id for c in memory.changes.find(service=asked)[0]] == ["d1"]


def test_a_change_stored_in_capitals_before_is_in_the_plans_of_its_service(memory: OrgMemory):
    # Changes were stored with the case they came in: one kept from before is read in lower case by the triage.
    now = utcnow().replace(microsecond=0)
    memory.changes.add(NewChange(id="d0", service="ledger", summary="deploy", at=now - timedelta(minutes=5)))
    stored = memory.changes.documents.get("change", "cli:d0")
    assert stored is not None
    memory.changes.documents.put([DocumentWrite("change", "cli:d0", {**stored.data, "service": "Ledger"},
                                                "change.updated", ref=stored.ref, expected_version=stored.version)],
                                 "test")  # fmt: skip
    alert = {"summary": "ledger write errors above 5%", "service": "ledger"}
    assert [c.id for c in memory.triage(alert, narrate=False, now=now).changes] == ["d0"]


def test_an_org_of_more_changes_than_a_process_keeps_reads_them_from_the_store_with_the_same_plan(
    grandbo, memory: OrgMemory, monkeypatch
):
    """A write key's storm of changes (38,000 in 20 s) was kept whole in the process every org shares: 62 MiB at
    40,000 and growing. Past KEPT_CHANGES an org's triage reads the window's changes and their records from the
    store, and plans as it did."""
    from grandbo.tiers.changes import CHANGES
    from grandbo.triage import run

    now = utcnow().replace(microsecond=0)
    memory.catalog.import_text(CATALOG)
    for days in (3, 2, 1):
        memory.changes.add(NewChange(id=f"pg-{days}d", service="payments-gateway", summary="deploy",
                                     at=now - timedelta(days=days)))  # fmt: skip
    memory.changes.add(NewChange(id="pg-v2", service="payments-gateway", summary="deploy v2",
                                 at=now - timedelta(minutes=10)))  # fmt: skip
    memory.changes.add(NewChange(id="web-cfg", service="web", summary="config", kind=ChangeKind.CONFIG,
                                 at=now - timedelta(minutes=5)))  # fmt: skip
    this = _alert("checkout-api", now, "checkout-api 5xx error rate above 5%")
    memory.alerts.receive([this])
    kept = memory.triage(this, narrate=False, now=now)
    monkeypatch.setattr(run, "KEPT_CHANGES", 4)
    memory.changes.add(NewChange(id="search-v9", service="search", summary="deploy", at=now - timedelta(minutes=3)))
    stored = memory.triage(this, narrate=False, now=now)
    assert grandbo._snapshots._kept[("acme", CHANGES)].items is None  # nothing of them held
    assert [c.model_dump() for c in stored.changes] == [c.model_dump() for c in kept.changes]
    assert [c.id for c in stored.changes] == ["pg-v2"] and stored.changes[0].record.earlier == [
        "pg-1d",
        "pg-2d",
        "pg-3d",
    ]
    assert stored.origin == kept.origin
