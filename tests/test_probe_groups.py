"""Alert groups and incidents opened from alerts, as racing and sloppy clients use them."""

from __future__ import annotations

from grandbo.memory import OrgMemory
from tests.serving import serving
from tests.test_alert_groups import CATALOG, alert, outage


def test_a_group_opened_by_two_requests_at_once_stays_the_first_ones_incident(memory: OrgMemory) -> None:
    # Two `POST /v1/incidents {from_alerts}` naming a whole group, at once: both read the group open. The second's
    # write replaced the group's incident with its own (the first caller's answer then named a group that no longer
    # pointed at it). Here the second request is played after the first, with the group as it read it before.
    memory.catalog.import_text(CATALOG)
    stored = memory.alerts.receive(outage())
    ids = [s.id for s, _ in stored[:3]]
    group_id = str(stored[0][0].group_id)
    as_read = memory.alert_groups.get(group_id)
    first = memory.alert_groups.open_from_alerts(ids)
    second, _ = memory.alert_groups._open(memory.alert_groups._alerts(ids), [as_read], None, "api", None, [])
    assert second.id != first.id
    group = memory.alert_groups.get(group_id)
    assert group.status == "opened" and group.incident_id == first.id


def test_from_alerts_ids_are_bounded_like_every_alert_id(grandbo) -> None:  # type: ignore[no-untyped-def]
    memory = grandbo.org("acme", create=True)
    _, write = memory.keys.create("write")
    with serving(grandbo) as served, served.client(write) as client:
        answer = client.post("/v1/incidents", json={"from_alerts": ["x" * 100_000]})
        assert answer.status_code == 422 and len(answer.text) < 2000, answer.text[:300]


def test_an_alert_that_joins_while_its_group_opens_is_in_the_incident(memory: OrgMemory) -> None:
    # The open request reads the group, an alert of the outage joins it, then the open marks the group opened:
    # the group listed an alert its incident did not. Played in order with the group as the request read it.
    memory.catalog.import_text(CATALOG)
    stored = memory.alerts.receive(outage())
    group_id = str(stored[0][0].group_id)
    as_read = memory.alert_groups.get(group_id)
    ((late, _),) = memory.alerts.receive([alert("a5", "checkout-api", "checkout 5xx rate above 5 percent", 5)])
    assert late.group_id == group_id
    opened, _ = memory.alert_groups._open(
        memory.alert_groups._alerts(as_read.alerts), [as_read], None, "api", "inc-x", []
    )
    group = memory.alert_groups.get(group_id)
    assert group.incident_id == opened.id and late.id in group.alerts
    assert set(group.alerts) <= set(memory.incidents.get(opened.id).alerts)
