"""How a delivery moves the status of an alert already stored: the rules `Alerts.receive` applies.

Alertmanager and Grafana give an alert that fires again a new id (a new `startsAt`), Opsgenie too (a new alert
id): for them resolved is final, and a firing delivery of a resolved alert is a replay that arrived late. Their
deliveries date no change (`Alert.changed_at` is None), and they keep that rule.

A PagerDuty alert is its incident (its id is the incident's), which can be reopened (`incident.reopened`) and fire
again under the same id. PagerDuty dates each change (`event.occurred_at`, `changed_at`) and may deliver its
events late, out of order or twice, so a dated delivery moves the alert by the sender's time, not by arrival:

* one older than the change the alert holds moves nothing (a resolve delivered after a later reopen, a trigger
  after a later resolve, a reopen delivered again after the next resolve);
* a firing one later than the resolve the alert holds reopens it (`reopens`): it fires again and is triaged again,
  as a new firing alert is; one of the same time as the resolve does not (a tie stays resolved);
* any other one not older (a resolve, an acknowledgement) sets its status and its time.

An alert stored before its sender's times were kept holds an undated change: it is taken to have changed when it was
last written (`moved`; as older than any dated change, a late or retried trigger reopened a resolve of before the
upgrade: review).
"""

from __future__ import annotations

from datetime import datetime

from grandbo.ingest.alert import Alert


def once_each(alerts: list[Alert]) -> dict[str, Alert]:
    """A delivery's alerts by id, once each (a group may repeat an alert). Resolved is final within a delivery too:
    of a resolved copy and a firing one (a late replay batched with the resolve, in either order), the resolved
    one is kept; the last copy kept the firing one, so the alert was stored firing and triaged."""
    kept: dict[str, Alert] = {}
    for alert in alerts:
        if kept.get(alert.id) is None or kept[alert.id].status != "resolved":
            kept[alert.id] = alert
    return kept


def moved(held: Alert, delivered: Alert, written: datetime) -> Alert:
    """The stored alert `held`, last written at `written`, as a delivery of it leaves it: its status and the time of
    its newest change (the rest as first stored, but for a reopen's start and receipt: it fires again from the
    reopen). One stored undated (before its sender's times were kept) changed when it was last written."""
    if delivered.changed_at is None:  # a sender that dates no change: resolved is final
        if held.status == "resolved" or delivered.status == held.status:
            return held
        return held.model_copy(update={"status": delivered.status})
    if held.changed_at is None:  # dated from now on (its next write is later than the change it holds)
        held = held.model_copy(update={"changed_at": written})
    assert held.changed_at is not None
    if delivered.changed_at < held.changed_at:  # late: a newer change is held
        return held
    if held.status == "resolved" and delivered.status == "firing":
        if delivered.changed_at == held.changed_at:
            return held
        at = delivered.changed_at
        return held.model_copy(update={"status": "firing", "changed_at": at, "started_at": at,
                                       "received_at": delivered.received_at})  # fmt: skip
    return held.model_copy(update={"status": delivered.status, "changed_at": delivered.changed_at})


def reopens(held: Alert, delivered: Alert, written: datetime) -> bool:
    """Whether a delivery of the resolved alert `held` makes it fire again (`moved`): to be triaged again."""
    return held.status == "resolved" and moved(held, delivered, written).status == "firing"
