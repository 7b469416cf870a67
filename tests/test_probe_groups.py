"""Alert groups and incidents opened from alerts, as racing and sloppy clients use them."""

from __future__ import annotations

from grandbo.memory import OrgMemory
from tests.serving import serving
from tests.test_alert_groups import CATALOG, outage


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
    second = memory.alert_groups._open(memory.alert_groups._alerts(ids), [as_read], None, "api", None)
    assert second.id != first.id
    group = memory.alert_groups.get(group_id)
    assert group.status == "opened" and group.incident_id == first.id


def test_from_alerts_ids_are_bounded_like_every_alert_id(grandbo) -> None:  # type: ignore[no-untyped-def]
    memory = grandbo.org("acme", create=True)
    _, write = memory.keys.create("write")
    with serving(grandbo) as served, served.client(write) as client:
        answer = client.post("/v1/incidents", json={"from_alerts": ["x" * 100_000]})
        assert answer.status_code == 422 and len(answer.text) < 2000, answer.text[:300]
