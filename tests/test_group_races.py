"""Alert groups under racing requests (probe 21, F2 and L2). Two deliveries of one outage's alerts (same service,
same minute, different fingerprints) arriving at the same moment formed two groups in 9 of 12 rounds: each read the
open groups, found none, and started its own under an id of its own, so neither write conflicted. Simultaneous opens
of one group answered 201 to several callers and logged `alert_group.opened` once each. The interleavings are made
exactly: another process's handle on the same store (a second Grandbo) writes between this one's reads and its
write. Both backends."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from grandbo.config import Settings
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo
from grandbo.tiers.alerts import Alerts
from grandbo.tiers.grouping import ALERT_GROUPS
from tests.serving import serving
from tests.test_alert_groups import CATALOG, alert, outage


class OtherWriteFirst:
    """An organization's real documents, where another writer's change lands between this writer's reads and its
    first write (two deliveries or two requests colliding)."""

    def __init__(self, documents: Any, other: Callable[[], object]) -> None:
        self._documents, self._other = documents, other

    def __getattr__(self, name: str) -> Any:
        return getattr(self._documents, name)

    def put(self, writes: Any, actor: str, work: Sequence[Any] = (), done: Sequence[Any] = ()) -> Any:
        other, self._other = self._other, None
        if other is not None:
            other()
        return self._documents.put(writes, actor, work, done)


@pytest.fixture
def other(settings: Settings, memory: OrgMemory) -> Iterator[OrgMemory]:
    """The same organization through a second Grandbo on the same store: another server process."""
    with Grandbo.open(settings) as opened:
        yield opened.org(memory.org)


def _racing(memory: OrgMemory, other: Callable[[], object]) -> Alerts:
    """The organization's alerts, as a delivery whose write another delivery precedes."""
    alerts = memory.alerts
    return Alerts(OtherWriteFirst(alerts.documents, other), alerts._redactor, topology=alerts._topology,
                  group_window_minutes=alerts.group_window.total_seconds() / 60)  # fmt: skip


def _events(memory: OrgMemory, group_id: str, kind: str) -> int:
    return sum(event["type"] == kind for event in memory._documents.history(ALERT_GROUPS, group_id))


def test_an_alert_delivered_while_a_related_one_starts_a_group_joins_that_group(
    memory: OrgMemory, other: OrgMemory
) -> None:
    memory.catalog.import_text(CATALOG)
    started: list[tuple[str, str | None]] = []

    def bob() -> None:
        ((stored, _),) = other.alerts.receive([alert("b1", "checkout-api", "checkout 5xx rate above 5 percent")])
        started.append((stored.id, stored.group_id))

    ((stored, new),) = _racing(memory, bob).receive([alert("a1", "checkout-api", "checkout p99 latency high")])
    ((bobs, group_id),) = started
    assert new and group_id is not None
    assert stored.group_id == group_id  # as if delivered after bob's: one group for the outage
    group = memory.alert_groups.get(group_id)
    assert group.alerts == [bobs, stored.id] and memory.alerts.get(stored.id).group_id == group_id
    open_groups, _ = memory.alert_groups.page(50, status="open")
    assert [g.id for g, _ in open_groups] == [group.id]


def test_an_alert_delivered_while_an_alert_widens_a_group_joins_the_widened_group(
    memory: OrgMemory, other: OrgMemory
) -> None:
    # The open group's last alert fired at 10:00 (window 30 minutes); an alert of 10:25 widens it to 10:55 while an
    # alert of 10:50 is delivered: after the widening, 10:50 is in its window.
    memory.catalog.import_text(CATALOG)
    ((first, _),) = memory.alerts.receive([alert("w0", "checkout-api", "checkout errors")])

    def bob() -> None:
        other.alerts.receive([alert("w1", "checkout-api", "checkout errors again", 25)])

    ((late, _),) = _racing(memory, bob).receive([alert("w2", "checkout-api", "checkout still failing", 50)])
    assert late.group_id == first.group_id
    assert memory.alert_groups.get(str(first.group_id)).size == 3


def test_a_group_opened_by_another_request_meanwhile_is_answered_without_a_second_open(memory: OrgMemory) -> None:
    memory.catalog.import_text(CATALOG)
    stored = memory.alerts.receive(outage())
    group_id = str(stored[0][0].group_id)
    as_read = memory.alert_groups.get(group_id)  # both requests read the group open
    first = memory.alert_groups.open_incident(group_id)
    alerts = memory.alert_groups._alerts(as_read.alerts)
    finished = memory.alert_groups._open(alerts, [as_read], None, "api", first.id, [], size=as_read.size)
    assert _events(memory, group_id, "alert_group.opened") == 1
    second, created = finished
    assert second.id == first.id and not created  # the route answers 200: it opened nothing


def test_the_open_route_answers_200_when_it_finishes_an_open_another_attempt_started(grandbo) -> None:  # type: ignore[no-untyped-def]
    # An attempt opened the incident and failed before marking the group: the next one finishes (200, the incident
    # it found), marking the group once; an open of the opened group is 409.
    memory = grandbo.org("acme", create=True)
    memory.catalog.import_text(CATALOG)
    stored = memory.alerts.receive(outage())
    group_id = str(stored[0][0].group_id)
    incident_id = "inc-" + group_id.removeprefix("grp-")[:16]
    memory.incidents.open("checkout 5xx", incident_id=incident_id, alerts=[s.id for s, _ in stored[:3]])
    _, key = memory.keys.create("write")
    with serving(grandbo) as served, served.client(key) as client:
        finished = client.post(f"/v1/alert-groups/{group_id}/open")
        assert finished.status_code == 200 and finished.json()["id"] == incident_id, finished.text
        again = client.post(f"/v1/alert-groups/{group_id}/open")
        assert again.status_code == 409 and incident_id in again.text
    assert memory.alert_groups.get(group_id).incident_id == incident_id
    assert _events(memory, group_id, "alert_group.opened") == 1


def test_an_open_whose_late_alerts_edit_an_erasure_refused_finishes_on_its_run_again(
    memory: OrgMemory, other: OrgMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review 22 L2: an open wrote the incident and marked the group; an erasure committed before its edit adding
    the alerts that joined meanwhile, so the edit was refused and the open run again (`grandbo.unerased`). The run
    again found the group opened and answered 409 "already incident" to the call that opened it, and the late
    alerts were never added. Now it finds its own incident and finishes the edit."""
    from tests.test_erasure_in_flight import SECRET, joined, on_thread

    memory.catalog.import_text(CATALOG)
    ((first, _),) = memory.alerts.receive([alert("s1", "checkout-api", f"checkout 5xx after {SECRET}'s deploy")])
    group_id = str(first.group_id)
    late: list[str] = []
    documents = memory._documents
    put = documents.put

    def put_then(writes: Any, actor: str, *args: Any, **kwargs: Any) -> Any:
        if writes[0].collection == "incident" and not late:  # the open: another alert joins the group first
            joined(on_thread(lambda: late.extend(s.id for s, _ in other.alerts.receive(
                [alert("s2", "checkout-api", "checkout p99 latency high", 1)]))))  # fmt: skip
        done = put(writes, actor, *args, **kwargs)
        if writes[0].event == "alert_group.opened":  # marked: an erasure commits before the late alerts' edit
            joined(on_thread(lambda: other.erasure.purge_text(SECRET, reason="a name", actor="alice")))
        return done

    monkeypatch.setattr(documents, "put", put_then)
    incident, opened = memory.alert_groups.open_group(group_id)
    monkeypatch.undo()
    assert opened and late
    assert incident.alerts == [first.id, *late] and memory.incidents.get(incident.id).alerts == incident.alerts
    assert SECRET not in incident.model_dump_json()
    assert memory.alert_groups.get(group_id).incident_id == incident.id
