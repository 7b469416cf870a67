"""What changed and where it started, as pure functions over changes, the topology and the org's alerts and
incidents (`triage.changes`); the plan's fields through a real store are in tests/test_triage_changes.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from grandbo.ingest.alert import Alert, summary_marks
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.tiers.change_model import Change, ChangeKind
from grandbo.tiers.effectiveness import Outcome, OutcomeKind
from grandbo.tiers.topology import Topology, parse_catalog
from grandbo.triage import changes
from grandbo.triage.evidence import Seen, outlier

T = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=120)
POLICY = DEFAULT_POLICY.changes
TOPOLOGY = Topology(
    parse_catalog("""
services:
  - {name: web, depends_on: [checkout-api]}
  - {name: checkout-api, depends_on: [payments-gateway, users-db]}
  - {name: payments-gateway, depends_on: [payments-db]}
  - {name: payments-db}
  - {name: users-db}
  - {name: search}
""")
)


def change(id: str, service: str, minutes_before: float, kind: ChangeKind = ChangeKind.DEPLOY) -> Change:
    at = T - timedelta(minutes=minutes_before)
    return Change(id=id, service=service, kind=kind, summary=f"{kind.value} of {service}", at=at,
                  url=f"https://ci.example/{id}", source="generic", received_at=at)  # fmt: skip


def alert(
    id: str, service: str, minutes_before: float, summary: str = "5xx error rate above 5%", began: float | None = None
) -> Seen:
    """An alert received `minutes_before` T that started firing `began` minutes before T (default: when received)."""
    received = T - timedelta(minutes=minutes_before)
    start = received if began is None else T - timedelta(minutes=began)
    return Seen(id, f"{service}:{summary}", service, summary_marks(summary), received, start)


def what_changed(
    all_changes: list[Change], recent: list[Seen], service: str = "checkout-api", incidents=(), outcomes=None
):
    def between(since: datetime, until: datetime, services: list[str]) -> list[Change]:
        return sorted((c for c in all_changes if since <= c.at <= until and c.service in services), key=lambda c: c.at)

    def latest(service: str, kind: str, since: datetime, until: datetime, limit: int) -> list[Change]:
        return [c for c in between(since, until, [service]) if c.kind.value == kind][::-1][:limit]

    reported = outcomes or {}  # by incident, as `Ledger.of_incidents` gives them
    return changes.what_changed(service, T, WINDOW, topology=TOPOLOGY, recent=recent, incidents=incidents,
                                outcomes=lambda ids: {i: reported[i] for i in ids if i in reported}, between=between,
                                latest=latest, policy=POLICY)  # fmt: skip


def test_the_upstream_change_6_minutes_before_beats_an_unrelated_one_5_minutes_before():
    found = what_changed([change("pg-v2.14", "payments-gateway", 6), change("search-v9", "search", 5)],
                         [alert("a-checkout", "checkout-api", 0)])  # fmt: skip
    assert [c.id for c in found.changes] == ["pg-v2.14"]  # search is not on checkout-api's path: not listed
    first = found.changes[0]
    assert (first.service, first.kind, first.hops, first.minutes_before) == ("payments-gateway", "deploy", 1, 6.0)
    assert first.url == "https://ci.example/pg-v2.14" and first.at == T - timedelta(minutes=6)
    assert set(first.why) == {"recency", "topology", "explains"}
    assert first.score == round(sum(part.contribution for part in first.why.values()), 4)


def test_the_change_upstream_of_the_burst_beats_a_later_one_on_the_alerting_service():
    """payments-gateway alerted first, then checkout-api: its deploy could explain both alerts; checkout-api's own
    config push 3 minutes before this alert only its own."""
    found = what_changed(
        [change("pg-v2.14", "payments-gateway", 12), change("co-cfg", "checkout-api", 3, ChangeKind.CONFIG),
         change("db-old", "payments-db", 110)],
        [alert("a-pg", "payments-gateway", 6), alert("a-checkout", "checkout-api", 0)],
    )  # fmt: skip
    ranked = {c.id: c for c in found.changes}
    assert found.changes[0].id == "pg-v2.14" and set(ranked) == {"pg-v2.14", "co-cfg", "db-old"}
    assert ranked["pg-v2.14"].why["explains"].value == 1.0 and ranked["co-cfg"].why["explains"].value == 0.5
    assert ranked["co-cfg"].why["recency"].note == "3 minutes before the first alert it could explain"
    assert found.origin is not None and found.origin.service == "payments-gateway"
    assert found.origin.change_id == "pg-v2.14" and found.origin.hops == 1
    assert "pg-v2.14" in found.origin.why and found.origin.cites == ["pg-v2.14", "a-pg"]


def test_a_change_outside_the_window_or_after_the_alert_is_not_listed():
    found = what_changed(
        [change("too-old", "payments-gateway", 121), change("after", "checkout-api", -1),
         change("edge", "payments-db", 120)],
        [alert("a-checkout", "checkout-api", 0)],
    )  # fmt: skip
    assert [c.id for c in found.changes] == ["edge"]


def test_with_no_change_the_origin_is_the_service_that_alerted_first_on_the_path():
    found = what_changed([], [alert("a-db", "payments-db", 9), alert("a-pg", "payments-gateway", 4),
                              alert("a-search", "search", 8), alert("a-checkout", "checkout-api", 0)])  # fmt: skip
    assert found.changes == []
    assert found.origin is not None and (found.origin.service, found.origin.hops) == ("payments-db", 2)
    assert found.origin.alert_id == "a-db" and found.origin.change_id is None


def test_the_burst_is_ordered_by_when_its_alerts_started_firing_not_when_they_were_delivered():
    """payments-db started firing 9 minutes before, but its sender held the alert back (Alertmanager's group_wait,
    a retry) and it arrived 2 minutes before; checkout-api's arrived as it fired, 4 minutes before. The origin is
    payments-db, since when it started; it was checkout-api's, by arrival."""
    found = what_changed([], [alert("a-db", "payments-db", 2, began=9), alert("a-co", "checkout-api", 4),
                              alert("a-now", "checkout-api", 0)])  # fmt: skip
    assert found.origin is not None and (found.origin.service, found.origin.alert_id) == ("payments-db", "a-db")
    assert found.origin.at == T - timedelta(minutes=9)


def test_an_alert_long_before_with_nothing_between_is_not_the_origin():
    found = what_changed([], [alert("a-db-earlier", "payments-db", 60), alert("a-checkout", "checkout-api", 0)])
    assert found.origin is not None and found.origin.service == "checkout-api"


def test_what_followed_earlier_changes_of_the_same_kind_is_told_and_cited():
    earlier = [change("pg-v2.11", "payments-gateway", 3 * 24 * 60), change("pg-v2.12", "payments-gateway", 2 * 24 * 60),
               change("pg-v2.13", "payments-gateway", 24 * 60), change("pg-cfg", "payments-gateway", 60 * 24, ChangeKind.CONFIG)]  # fmt: skip
    incidents = [
        changes.PastIncident("INC-038", "checkout 5xx", ("checkout-api",), T - timedelta(days=3) + timedelta(minutes=20), False),
        changes.PastIncident("INC-074", "payments down", ("payments-gateway",), T - timedelta(days=1) + timedelta(minutes=9), False),
        changes.PastIncident("INC-090", "search slow", ("search",), T - timedelta(days=2) + timedelta(minutes=5), False),
    ]  # fmt: skip
    outcomes = {i: [Outcome(org_id="acme", runbook_id="RB-ROLLBACK", kind=OutcomeKind.SUCCEEDED, incident_id=i, at=T)]
                for i in ("INC-038", "INC-074")}  # fmt: skip
    found = what_changed([*earlier, change("pg-v2.14", "payments-gateway", 6)], [alert("a-checkout", "checkout-api", 0)],
                         incidents=incidents, outcomes=outcomes)  # fmt: skip
    record = found.changes[0].record
    assert found.changes[0].id == "pg-v2.14" and record is not None
    assert record.earlier == ["pg-v2.13", "pg-v2.12", "pg-v2.11"]  # deploys only, newest first
    assert record.followed == ["INC-074", "INC-038"]  # INC-090 is on search, which does not call payments-gateway
    assert [(r.id, r.worked, r.tried) for r in record.runbooks] == [("RB-ROLLBACK", 2, 2)]
    assert "INC-038" in record.text and "worked 2 of 2" in record.text
    assert set(record.cites) == {"pg-v2.11", "pg-v2.12", "pg-v2.13", "INC-038", "INC-074"}


def test_open_incidents_on_related_services_are_linked_nearest_first():
    incidents = [
        changes.PastIncident("INC-100", "payments-db slow", ("payments-db",), T - timedelta(minutes=30), True),
        changes.PastIncident("INC-101", "checkout errors", ("checkout-api",), T - timedelta(minutes=10), True),
        changes.PastIncident("INC-102", "search down", ("search",), T - timedelta(minutes=5), True),
        changes.PastIncident("INC-103", "closed one", ("checkout-api",), T - timedelta(minutes=50), False),
    ]  # fmt: skip
    found = what_changed([], [], incidents=incidents)
    assert [(r.id, r.hops) for r in found.related] == [("INC-101", 0), ("INC-100", 2)]


def test_an_alert_without_a_service_has_no_changes_nor_origin():
    found = what_changed([change("pg", "payments-gateway", 5)], [], service="")
    assert found.changes == [] and found.origin is None and found.related == []


def _alert(summary: str, service: str | None = "checkout-api") -> Alert:
    return Alert(source="manual", event_id=summary, fingerprint=summary, service=service, summary=summary,
                 received_at=T)  # fmt: skip


def test_outlier_labels_are_shares_of_the_service_s_alerts_in_30_days():
    like = [alert(f"like-{n}", "checkout-api", 60 * 24 * n + 5) for n in range(1, 3)]  # 5xx alerts, 2 of them
    other = [alert(f"o-{n}", "checkout-api", 60 * n + 5, f"disk {n} full on node {n}") for n in range(1, 9)]
    old = [alert("old", "checkout-api", 60 * 24 * 31)]
    elsewhere = [alert(f"e-{n}", "search", 10) for n in range(50)]
    five_xx = "5xx error rate above 5%"
    assert outlier(_alert(five_xx), like + other + old + elsewhere, T) == ("frequent", 0.2, 10)  # 2 of 10: 20%
    assert outlier(_alert(five_xx), like[:1] + other * 3, T) == ("rare", 0.04, 25)  # 1 of 25
    assert outlier(_alert(five_xx), like[:1] + other, T) == (None, 0.1111, 9)  # between 5% and 20%: no label
    assert outlier(_alert("certificate expires in 7 days"), like + other, T) == ("anomalous", 0.0, 10)
    assert outlier(_alert(five_xx), elsewhere, T) == ("anomalous", None, 0)  # nothing on the service at all
    assert outlier(_alert(five_xx, None), like, T) == (None, None, 0)


def test_a_stored_alert_whose_start_no_calendar_holds_in_utc_counts_from_its_receipt():
    """An older release stored such a start (`9999-12-31T23:59:59-05:00`) as its sender gave it; read for a burst,
    it is no start, as the alert model reads it, and the alert counts from its receipt."""
    from grandbo.ports import Document
    from grandbo.triage.evidence import seen

    received = T - timedelta(minutes=3)
    for start in ("9999-12-31T23:59:59-05:00", "0001-01-01T03:00:00+05:00"):
        alert = {"summary": "db down", "fingerprint": "f", "service": "payments-db", "started_at": start,
                 "received_at": received.isoformat()}  # fmt: skip
        assert seen(Document("alert", "a-1", "alertmanager", {"id": "a-1", "alert": alert}, 1, T)).began == received
