"""Alert grouping: alerts of one organization close in time on related services become one candidate incident
(`tiers.grouping`, `tiers.alert_groups`), on both backends; its plan speaks for the group; an incident opens
from it."""

from __future__ import annotations

import json
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from grandbo.config import Settings
from grandbo.errors import ConflictError, NotFoundError
from grandbo.ingest import flow
from grandbo.ingest.alert import Alert
from grandbo.memory import OrgMemory
from grandbo.model import utcnow
from grandbo.service import Grandbo
from grandbo.tiers.grouping import GROUP_LISTED, group_alerts
from grandbo.tiers.topology import Topology, parse_catalog
from grandbo.triage import TriagePlan
from tests.serving import serving

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
CATALOG = """
services:
  - name: checkout-api
    depends_on: [payments-gateway]
  - name: payments-gateway
    depends_on: [payments-db]
  - name: payments-db
  - name: search-api
    depends_on: [search-index]
  - name: search-index
"""


def alert(event: str, service: str | None, summary: str, minutes: float = 0, fingerprint: str = "") -> Alert:
    return Alert(source="alertmanager", event_id=event, fingerprint=fingerprint or f"fp-{event}", service=service,
                 summary=summary, started_at=T0 + timedelta(minutes=minutes))  # fmt: skip


def outage() -> list[Alert]:
    return [
        alert("a1", "checkout-api", "checkout 5xx rate above 5 percent"),
        alert("a2", "payments-gateway", "payments gateway p99 latency over 2 seconds", 3),
        alert("a3", "payments-db", "connection pool exhausted on primary", 4),
        alert("b1", "search-api", "search queries slower than usual", 2),
    ]


def _groups_of(memory: OrgMemory, ids: list[str]) -> dict[str, str | None]:
    return {alert_id: memory.alerts.get(alert_id).group_id for alert_id in ids}


def test_a_group_s_history_records_the_alerts_each_delivery_added_not_all_of_them_again(memory: OrgMemory) -> None:
    """Each delivery into a group logged the group's whole alert list and members again: one storm of 3,100 alerts in
    one group logged 75 MB (the square of its size). Its history records what each delivery added."""
    delivered = [
        [stored.id for stored, _ in memory.alerts.receive([
            alert(f"s{d}-{n}", "payments-db", "connection pool exhausted on primary", d + n / 10) for n in range(5)
        ])]
        for d in range(6)
    ]  # fmt: skip
    (group,) = {memory.alerts.get(ids[0]).group_id for ids in delivered}
    history = memory._documents.history("alert_group", group)
    assert len(history) == 6 and len(memory.alert_groups.get(group).alerts) == 30
    later = [event["data"] for event in history[1:]]
    assert [data["alerts"] for data in later] == [{"added": ids} for ids in delivered[1:]]
    assert all(len(data["members"]["added"]) == 5 for data in later)


def test_a_storms_group_lists_its_first_alerts_and_counts_them_all(memory: OrgMemory) -> None:
    """A group listed every alert that joined it: one storm's group of 3,100 alerts grew to 481 KB, written whole at
    each delivery (105 ms a delivery of 10 at the start, 305 ms at the end) and answered whole by the API. It lists
    the first GROUP_LISTED alerts (and members, and services), and counts them all; each alert names its group, and
    an incident opened from it is titled after all of them."""
    memory.catalog.import_text(CATALOG)
    ids = [stored.id for d in range(25) for stored, _ in memory.alerts.receive([
        alert(f"s{d}-{n}", "payments-db", "connection pool exhausted on primary", d / 2 + n / 100) for n in range(10)
    ])]  # fmt: skip
    (group_id,) = set(_groups_of(memory, ids).values())
    group = memory.alert_groups.get(group_id)
    assert group.size == 250 and group.alerts == ids[:GROUP_LISTED] and len(group.members) == GROUP_LISTED
    assert not group.listed_whole and len(memory._documents.get("alert_group", group_id).data["alerts"]) == 100
    before = len(json.dumps(memory._documents.get("alert_group", group_id).data))
    memory.alerts.receive([alert(f"late-{n}", "payments-db", "pool exhausted", 13 + n / 100) for n in range(10)])
    assert len(json.dumps(memory._documents.get("alert_group", group_id).data)) == before  # bounded: only its count
    assert memory.alert_groups.get(group_id).size == 260
    said = memory.alert_groups.plan_group(group_id)  # what a plan says of it
    assert said is not None and (said.size, len(said.alerts)) == (260, 50)
    incident = memory.alert_groups.open_incident(group_id, actor="alice")
    assert incident.alerts == ids[:GROUP_LISTED] and "(260 alerts on payments-db)" in incident.title
    with pytest.raises(ConflictError):
        memory.alert_groups.open_incident(group_id)
    listed = memory.alert_groups.find(group_id)
    assert listed is not None and listed.status == "opened"


def test_an_incident_from_alerts_does_not_mark_a_group_it_names_only_part_of(memory: OrgMemory) -> None:
    """A group past what it lists is never complete by the alerts an incident names: it stays open."""
    memory.catalog.import_text(CATALOG)
    ids = [stored.id for d in range(11) for stored, _ in memory.alerts.receive([
        alert(f"p{d}-{n}", "payments-db", "connection pool exhausted on primary", d / 2 + n / 100) for n in range(10)
    ])]  # fmt: skip
    (group_id,) = set(_groups_of(memory, ids).values())
    memory.alert_groups.open_from_alerts(memory.alert_groups.get(group_id).alerts, actor="alice")
    assert memory.alert_groups.get(group_id).status == "open"


def test_related_alerts_share_a_group_and_unrelated_ones_do_not(memory: OrgMemory) -> None:
    memory.catalog.import_text(CATALOG)
    stored = memory.alerts.receive(outage())
    ids = [s.id for s, _ in stored]
    groups = _groups_of(memory, ids)
    assert groups[ids[0]] == groups[ids[1]] == groups[ids[2]] is not None
    assert groups[ids[3]] is not None and groups[ids[3]] != groups[ids[0]]
    group = memory.alert_groups.get(str(groups[ids[0]]))
    assert group.alerts == ids[:3]
    assert group.services == ["checkout-api", "payments-gateway", "payments-db"]
    assert group.first_seen == T0 and group.last_seen == T0 + timedelta(minutes=4)
    assert group.status == "open"


def test_alerts_without_a_catalog_service_group_by_their_words(memory: OrgMemory) -> None:
    stored = memory.alerts.receive([
        alert("n1", None, "disk almost full on node pool alpha"),
        alert("n2", "unknown-svc", "disk almost full on node pool beta", 1),
        alert("n3", None, "certificate expires in two days", 2),
    ])  # fmt: skip
    groups = _groups_of(memory, [s.id for s, _ in stored])
    first, second, third = groups.values()
    assert first == second and third != first


def test_the_window_bounds_a_group(memory: OrgMemory) -> None:
    memory.catalog.import_text(CATALOG)
    stored = memory.alerts.receive([
        alert("w1", "checkout-api", "checkout errors"), alert("w2", "checkout-api", "checkout errors again", 30),
        alert("w3", "search-api", "search errors"), alert("w4", "search-api", "search errors again", 30.02),
    ])  # fmt: skip
    w1, w2, w3, w4 = _groups_of(memory, [s.id for s, _ in stored]).values()
    assert w1 == w2  # 30 minutes after: inside the window (its bound included)
    assert w3 != w4  # a second past it: a new group


def test_an_alert_whose_sender_says_it_starts_after_its_receipt_is_grouped_at_its_receipt() -> None:
    """A sender whose clock runs an hour ahead: its checkout-api alert, received a minute after payments-db's,
    belongs with it; read at the start it claims it was an hour away, in a group of its own."""
    topology = Topology(parse_catalog(CATALOG))
    received = T0 + timedelta(minutes=1)
    ahead = Alert(source="alertmanager", event_id="ahead", fingerprint="fp-ahead", service="checkout-api",
                  summary="checkout 5xx rate above 5 percent", started_at=T0 + timedelta(hours=1),
                  received_at=received)  # fmt: skip
    db = Alert(source="alertmanager", event_id="db", fingerprint="fp-db", service="payments-db",
               summary="connection pool exhausted on primary", started_at=T0, received_at=T0)  # fmt: skip
    groups = group_alerts([db, ahead], topology)
    assert [g.alerts for g in groups] == [[db.id, ahead.id]] and groups[0].last_seen == received


def test_a_redelivery_keeps_its_group_and_changes_no_group(memory: OrgMemory) -> None:
    memory.catalog.import_text(CATALOG)
    first = memory.alerts.receive(outage())
    group_id = first[0][0].group_id
    assert group_id is not None
    before = memory.alert_groups.get(group_id)
    again = memory.alerts.receive(list(reversed(outage())))
    assert not any(new for _, new in again)
    assert {s.id: s.group_id for s, _ in again} == {s.id: s.group_id for s, _ in first}
    after = memory.alert_groups.get(group_id)
    assert after.alerts == before.alerts and after.version == before.version


def test_one_orgs_alerts_never_join_another_orgs_group(grandbo) -> None:  # type: ignore[no-untyped-def]
    acme, other = grandbo.org("acme", create=True), grandbo.org("other", create=True)
    for memory in (acme, other):
        memory.catalog.import_text(CATALOG)
    ((mine, _),) = acme.alerts.receive([alert("x1", "checkout-api", "checkout 5xx rate above 5 percent")])
    ((theirs, _),) = other.alerts.receive([alert("x2", "payments-gateway", "payments gateway p99 latency", 1)])
    assert acme.alert_groups.get(str(mine.group_id)).alerts == [mine.id]
    assert other.alert_groups.get(str(theirs.group_id)).alerts == [theirs.id]
    with pytest.raises(NotFoundError):
        other.alert_groups.get(str(mine.group_id))


@pytest.fixture
def group_reads(grandbo, backend, monkeypatch):  # type: ignore[no-untyped-def]
    """Every statement the store sends that reads alert groups' data (SQLite's trace, with its values; psycopg's
    cursor, with its parameters); not the version a write checks."""
    sent: list[str] = []
    if backend == "sqlite":
        grandbo._store.trace(sent.append)
    else:
        execute = psycopg.Cursor.execute

        def counted(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
            sent.append(f"{query} {params!r}")
            return execute(self, query, params, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    yield lambda: [s for s in sent if "alert_group" in s and s.lstrip().upper().startswith("SELECT")
                   and "data" in s.split("FROM")[0]]  # fmt: skip
    if backend == "sqlite":
        grandbo._store.trace(None)


def _storm(tag: str, count: int) -> list[Alert]:
    services = ["checkout-api", "payments-gateway", "payments-db", "search-api", "search-index", "other-svc"]
    return [alert(f"{tag}{i}", services[i % len(services)], f"{tag} storm alert number {i}", i / 100)
            for i in range(count)]  # fmt: skip


def test_a_delivery_of_500_alerts_reads_the_groups_once(grandbo, group_reads) -> None:  # type: ignore[no-untyped-def]
    memory = grandbo.org("acme", create=True)
    memory.catalog.import_text(CATALOG)
    memory.alerts.receive(_storm("warm", 1))  # a process's first delivery also runs a prune round (its own reads)
    before = len(group_reads())
    memory.alerts.receive(_storm("small", 3))
    small = len(group_reads()) - before
    memory.alerts.receive(_storm("big", 500))
    big = len(group_reads()) - before - small
    assert small == big == 1
    groups, _ = memory.alert_groups.page(50, status="open")
    assert sum(g.size for g, _ in groups) == 504


def test_grouping_is_the_same_whatever_the_order_of_the_alerts() -> None:
    topology = Topology(parse_catalog(CATALOG))
    forward = group_alerts(outage(), topology)
    backward = group_alerts(list(reversed(outage())), topology)
    assert [(g.id, g.alerts) for g in forward] == [(g.id, g.alerts) for g in backward]
    assert len(forward) == 2


def test_a_grouped_alerts_plan_names_its_group(memory: OrgMemory) -> None:
    memory.catalog.import_text(CATALOG)
    body = {"version": "4", "status": "firing", "receiver": "grandbo", "alerts": [
        {"status": "firing", "labels": {"alertname": "CheckoutErrors", "service": "checkout-api"},
         "annotations": {"summary": "checkout 5xx rate above 5 percent"}, "startsAt": "2026-11-30T10:00:00Z",
         "fingerprint": "f1"},
        {"status": "firing", "labels": {"alertname": "PaymentsLatency", "service": "payments-gateway"},
         "annotations": {"summary": "payments gateway p99 latency over 2 seconds"},
         "startsAt": "2026-11-30T10:03:00Z", "fingerprint": "f2"},
    ]}  # fmt: skip
    received = flow.receive(memory, "alertmanager", json.dumps(body).encode(), {})
    assert {stored.brief().group_id for stored, _ in received} == {received[0][0].group_id}  # the webhook's answer
    plans = [stored.plan for stored, _ in received]
    assert all(plan is not None and plan.group is not None for plan in plans)
    group = memory.alert_groups.get(str(received[0][0].group_id))
    for plan in plans:
        assert plan is not None and plan.group is not None
        assert plan.group.id == group.id and plan.group.alerts == group.alerts
        assert plan.group.services == ["checkout-api", "payments-gateway"] and plan.group.first_seen == group.first_seen


def test_an_incident_opens_from_a_group_once(memory: OrgMemory) -> None:
    memory.catalog.import_text(CATALOG)
    stored = memory.alerts.receive(outage())
    group_id = str(stored[0][0].group_id)
    incident = memory.alert_groups.open_incident(group_id)
    assert incident.alerts == [s.id for s, _ in stored[:3]]
    assert incident.services == ["checkout-api", "payments-gateway", "payments-db"]
    assert incident.title == (
        "checkout 5xx rate above 5 percent (3 alerts on checkout-api, payments-gateway, payments-db)"
    )
    assert incident.started_at == T0
    group = memory.alert_groups.get(group_id)
    assert group.status == "opened" and group.incident_id == incident.id
    with pytest.raises(ConflictError, match=incident.id):
        memory.alert_groups.open_incident(group_id)
    later = memory.alerts.receive([alert("a4", "checkout-api", "checkout 5xx rate above 5 percent", 6)])
    assert later[0][0].group_id != group_id  # an opened group takes no more alerts


def test_an_incident_opens_from_alerts_and_marks_the_groups_they_complete(memory: OrgMemory) -> None:
    memory.catalog.import_text(CATALOG)
    stored = memory.alerts.receive(outage())
    ids = [s.id for s, _ in stored]
    incident = memory.alert_groups.open_from_alerts([ids[3], *ids[:2]])
    assert incident.alerts == [ids[0], ids[3], ids[1]]  # in the order they fired
    assert memory.alert_groups.get(str(stored[3][0].group_id)).status == "opened"  # all of its alerts
    assert memory.alert_groups.get(str(stored[0][0].group_id)).status == "open"  # a3 was left out
    with pytest.raises(NotFoundError, match="nosuch"):
        memory.alert_groups.open_from_alerts(["nosuch"])


def test_the_rest_routes_list_show_open_and_dismiss_groups(grandbo) -> None:  # type: ignore[no-untyped-def]
    memory = grandbo.org("acme", create=True)
    memory.catalog.import_text(CATALOG)
    stored = memory.alerts.receive([*outage(), alert("c1", "search-index", "index shard unassigned", 90)])
    ids = [s.id for s, _ in stored]
    _, key = memory.keys.create("write")
    with serving(grandbo) as served, served.client(key) as client:
        listed = client.get("/v1/alert-groups", params={"status": "open", "limit": 2}).json()
        assert len(listed["items"]) == 2 and listed["next_cursor"]
        rest = client.get("/v1/alert-groups", params={"status": "open", "cursor": listed["next_cursor"]}).json()
        assert len(rest["items"]) == 1 and rest["next_cursor"] is None
        by_service = client.get("/v1/alert-groups", params={"service": "payments-db"}).json()["items"]
        assert [g["alerts"] for g in by_service] == [ids[:3]]
        group_id = by_service[0]["id"]
        plan = client.post("/v1/triage", json={"alert_id": ids[1], "narrate": False}).json()
        assert plan["group"]["id"] == group_id and plan["group"]["alerts"] == ids[:3]
        memory.alerts.record_recall(memory.alerts.get(ids[0]), None, None, TriagePlan.model_validate(plan))
        ((late, _),) = memory.alerts.receive([alert("a9", "payments-db", "replica lag on payments db", 5)])
        kept = client.get(f"/v1/alerts/{ids[0]}").json()["plan"]["group"]
        assert kept["alerts"] == [*ids[:3], late.id] and kept["size"] == 4  # the group as it stands now
        assert client.get(f"/v1/alert-groups/{group_id}").json()["services"] == [
            "checkout-api", "payments-gateway", "payments-db"]  # fmt: skip
        opened = client.post(f"/v1/alert-groups/{group_id}/open")
        assert opened.status_code == 201, opened.text
        incident = opened.json()
        assert incident["alerts"] == [*ids[:3], late.id]
        assert incident["title"].startswith("checkout 5xx rate above 5 percent (4 alerts")
        again = client.post(f"/v1/alert-groups/{group_id}/open")
        assert again.status_code == 409 and incident["id"] in again.json()["error"]["message"]
        assert client.get(f"/v1/alert-groups/{group_id}").json()["incident_id"] == incident["id"]
        missing = client.get("/v1/alert-groups/grp-nosuch")
        assert missing.status_code == 404 and "GET /v1/alert-groups" in missing.json()["error"]["message"]
        overridden = client.post("/v1/incidents", json={"from_alerts": [ids[4]], "severity": "sev1"})
        assert overridden.status_code == 422 and "severity" in overridden.json()["error"]["message"]  # never ignored
        from_alerts = client.post("/v1/incidents", json={"from_alerts": [ids[4]], "id": "INC-SHARD"})
        assert from_alerts.status_code == 201 and from_alerts.json()["alerts"] == [ids[4]]
        assert from_alerts.json()["services"] == ["search-index"]
        untitled = client.post("/v1/incidents", json={"services": ["search-api"]})
        assert untitled.status_code == 422 and "from_alerts" in untitled.json()["error"]["message"]
        search = str(stored[3][0].group_id)
        dismissed = client.post(f"/v1/alert-groups/{search}/dismiss").json()
        assert dismissed["status"] == "dismissed"
        assert [g["id"] for g in client.get("/v1/alert-groups", params={"status": "dismissed"}).json()["items"]] == [
            search]  # fmt: skip


def test_incident_open_from_alerts_and_from_a_group_on_the_command_line(cli) -> None:  # type: ignore[no-untyped-def]
    with Grandbo.open(Settings()) as opened:
        memory = opened.org()
        memory.catalog.import_text(CATALOG)
        stored = memory.alerts.receive(outage())
    ids = [s.id for s, _ in stored]
    group_id = str(stored[0][0].group_id)
    shown = cli("incident", "open", "--from-group", group_id).stdout
    assert "(3 alerts)" in shown and "checkout 5xx rate above 5 percent" in shown
    again = cli("incident", "open", "--from-group", group_id, code=2)
    assert "already incident" in again.stderr and "Traceback" not in again.stderr + again.stdout
    made = cli("incident", "open", "Search slow", "--from-alerts", ids[3], "--id", "INC-S").stdout
    assert made.startswith("opened INC-S: Search slow (1 alert)")
    unknown = cli("incident", "open", "--from-alerts", f"{ids[0]},alert-nosuch", code=2)
    assert "No alert 'alert-nosuch'" in unknown.stderr and "Traceback" not in unknown.stderr + unknown.stdout
    both = cli("incident", "open", "--from-alerts", ids[0], "--from-group", group_id, code=2)
    assert "not both" in both.stderr
    untitled = cli("incident", "open", code=2)
    assert "needs a title" in untitled.stderr
    empty = cli("incident", "open", "--from-alerts", " , ", code=2)
    assert "at least one alert id" in empty.stderr


def _delivery(tag: str, count: int, start: str) -> bytes:
    return json.dumps({"version": "4", "status": "firing", "receiver": "grandbo", "alerts": [
        {"status": "firing", "labels": {"alertname": f"{tag}{n}", "service": "checkout-api"},
         "annotations": {"summary": f"checkout storm alert {tag} number {n}"}, "startsAt": start,
         "fingerprint": f"{tag}-{n}"} for n in range(count)]}).encode()  # fmt: skip


def test_a_storms_triage_reads_its_group_once_and_each_plan_lists_a_bounded_part(grandbo, group_reads) -> None:  # type: ignore[no-untyped-def]
    memory = grandbo.org("acme", create=True)
    memory.catalog.import_text(CATALOG)
    flow.receive(memory, "alertmanager", _delivery("w", 1, "2026-11-30T06:00:00Z"), {})  # and the prune round
    before = len(group_reads())
    small = flow.receive(memory, "alertmanager", _delivery("s", 12, "2026-11-30T10:00:00Z"), {})
    reads_small = len(group_reads()) - before
    large = flow.receive(memory, "alertmanager", _delivery("l", 60, "2026-11-30T14:00:00Z"), {})
    reads_large = len(group_reads()) - before - reads_small
    assert reads_small == reads_large == 2  # one to group the delivery, one for its alerts' plans
    for received, size in ((small, 12), (large, 60)):
        plans = [memory.alerts.get(stored.id).plan for stored, _ in received]
        assert all(plan is not None and plan.group is not None and plan.group.size == size for plan in plans)
        assert {len(plan.group.alerts) for plan in plans if plan and plan.group} == {min(size, 50)}


def _age_groups(settings: Settings, days: float) -> None:
    """Make every alert group's last write `days` old, as time would (the store's own clock column)."""
    when = (utcnow() - timedelta(days=days)).isoformat()
    if settings.database_url is None:
        with sqlite3.connect(settings.home / "grandbo.db") as db:
            db.execute("UPDATE documents SET updated_at = ? WHERE collection = 'alert_group'", (when,))
        return
    with psycopg.connect(settings.database_url) as conn:
        conn.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
        conn.execute("UPDATE documents SET updated_at = %s WHERE collection = 'alert_group'", (when,))


def test_groups_past_the_retention_are_pruned_with_the_alerts(memory: OrgMemory, settings: Settings) -> None:
    memory.catalog.import_text(CATALOG)
    old = memory.alerts.receive(outage())
    _age_groups(settings, 100)
    young = memory.alerts.receive([alert("y1", "search-api", "search errors", 600)])
    memory.alerts.prune()
    assert memory.alert_groups.find(str(old[0][0].group_id)) is None
    assert memory.alert_groups.find(str(old[3][0].group_id)) is None
    assert memory.alert_groups.find(str(young[0][0].group_id)) is not None


def test_deliveries_racing_for_one_group_each_land_once(memory: OrgMemory) -> None:
    """Eight deliveries at once, each one alert of one outage: every write expects the group's version it read, so
    the losers read the group again and join it; none starts a second group or drops another's alert."""
    memory.catalog.import_text(CATALOG)
    memory.alerts.receive([alert("r0", "checkout-api", "checkout errors rising")])
    barrier = threading.Barrier(8)

    def deliver(n: int) -> str | None:
        barrier.wait()
        ((stored, _),) = memory.alerts.receive([alert(f"r{n + 1}", "checkout-api", f"checkout errors {n}", n / 10)])
        return stored.group_id

    with ThreadPoolExecutor(8) as pool:
        groups = set(pool.map(deliver, range(8)))
    (group_id,) = groups
    group = memory.alert_groups.get(str(group_id))
    assert len(group.alerts) == len(set(group.alerts)) == 9
