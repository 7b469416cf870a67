"""Documents people change a part at a time (an incident, the profile), on both stores: the history records what each
write changed, not the whole document again, and a document cannot grow past its bound (`tiers.edited`). Recorded
whole, a write key's one-line findings on a large incident grew the disk every org shares by 1 MB (Postgres 4.5 MB)
a request (hostile probe, session 13)."""

from __future__ import annotations

import json

import pytest

from grandbo.errors import PayloadTooLargeError
from grandbo.memory import OrgMemory
from grandbo.tiers.edited import MAX_EDITED_BYTES
from grandbo.tiers.incident_model import FindingStatus, IncidentStatus

PAGE = "The connection pool filled while the primary failed over; each request waited its full timeout. " * 20


def _size(value: object) -> int:
    return len(json.dumps(value))


def test_an_incidents_history_records_each_change_not_the_whole_incident_again(memory: OrgMemory) -> None:
    incidents = memory.incidents
    incidents.open("checkout 5xx after the payments failover", incident_id="INC-9", symptoms=["5xx", "timeouts"])
    for n in range(40):
        incidents.add_finding("INC-9", f"finding {n}", mechanism=PAGE)
    for n in range(20):
        incidents.update_finding("INC-9", "f1", summary=f"pool exhausted, take {n}")
    incidents.update_finding("INC-9", "f2", status=FindingStatus.CORROBORATED)
    whole = _size(memory._documents.get("incident", "INC-9").data)
    history = incidents.history("INC-9")
    assert whole > 80_000 and len(history) == 1 + 40 + 21
    opened, added, updates = history[0]["data"], history[1:41], history[41:]
    assert opened["title"] == "checkout 5xx after the payments failover" and opened["findings"] == []  # whole
    assert [event["data"]["findings"][0]["id"] for event in added] == [f"f{n + 1}" for n in range(40)]
    assert all(len(event["data"]["findings"]) == 1 and "title" not in event["data"] for event in added)
    assert all(_size(event["data"]) < 2 * len(PAGE) for event in updates)  # each a finding, not 40 of them
    assert updates[-1]["data"]["findings"][0]["status"] == "corroborated"
    assert sum(_size(event["data"]) for event in history) < 2 * whole  # was 60 times the incident
    incidents.close("INC-9", resolution="failed back to the old primary")
    closed = incidents.history("INC-9")[-2:]  # the close, and the memory sync after it
    assert closed[0]["data"]["status"] == "closed" and "findings" not in closed[0]["data"]


def test_an_incident_cannot_grow_past_its_bound_but_still_closes_and_shrinks(memory: OrgMemory) -> None:
    incidents = memory.incidents
    incidents.open("a long investigation", incident_id="INC-10")
    added: list[str] = []

    def add_until_refused() -> None:
        for _ in range(200):  # about 2.4 MB: far past the bound
            added.append(incidents.add_finding("INC-10", "another", mechanism=PAGE, root_cause=PAGE).id)

    with pytest.raises(PayloadTooLargeError, match="open a follow-up incident") as refused:
        add_until_refused()
    findings = len(added)
    assert refused.value.detail["limit"] == MAX_EDITED_BYTES and 50 < findings < 100
    assert len(incidents.get("INC-10").findings) == findings  # the refused one is not stored
    incidents.update_finding("INC-10", "f1", mechanism="pool exhausted")  # a write that shrinks it goes through
    closed = incidents.close("INC-10", resolution="moved to INC-11", postmortem=PAGE)
    assert closed.status is IncidentStatus.CLOSED


def test_the_profile_history_records_each_change_and_the_profile_is_bounded(memory: OrgMemory) -> None:
    profile = memory.profile
    profile.update({"facts": {f"fact_{n}": PAGE for n in range(20)}})
    for n in range(10):
        profile.update({"facts": {"on_call": f"team {n}"}})
    history = profile.history()
    assert _size(history[0]["data"]) > 20 * len(PAGE)  # the first write, whole
    assert all(_size(event["data"]) < 500 for event in history[1:])
    assert history[-1]["data"]["facts"]["on_call"] == "team 9"
    with pytest.raises(PayloadTooLargeError, match="Keep facts short"):
        profile.update({"facts": {f"more_{n}": PAGE for n in range(150)}})
    assert "more_0" not in profile.get().facts


def test_a_redelivered_alerts_history_records_its_count_not_the_alert_recall_and_plan_again(
    memory: OrgMemory,
) -> None:
    """A sender repeats a firing alert (Alertmanager's repeat_interval, a retry): each redelivery appended the stored
    alert whole, its recall and plan included, to the history (50 redeliveries of one alert: 2.4 MB for 38 KB)."""
    from grandbo.ingest import flow

    memory.remember({"title": "Redis evictions on redis-sessions", "body": "Mechanism: maxmemory reached. " * 40,
                     "services": ["redis-sessions"], "kind": "finding"})  # fmt: skip
    delivery = json.dumps({"version": "4", "status": "firing", "alerts": [{"status": "firing", "fingerprint": "r-1",
        "labels": {"alertname": "RedisEvictions", "service": "redis-sessions"},
        "annotations": {"summary": "redis-sessions evicting keys, maxmemory reached"},
        "startsAt": "2026-12-01T10:00:00Z"}]}).encode()  # fmt: skip
    ((stored, _),) = flow.receive(memory, "alertmanager", delivery, {})
    for _ in range(20):
        flow.receive(memory, "alertmanager", delivery, {})
    whole = memory._documents.get("alert", stored.id)
    history = memory._documents.history("alert", stored.id)
    assert whole.data["deliveries"] == 21 and whole.data["plan"] is not None and _size(whole.data) > 3_000
    redelivered = [event for event in history if event["type"] == "alert.redelivered"]
    assert len(redelivered) == 20 and all(set(event["data"]) == {"deliveries", "updated_at"} for event in redelivered)
    assert history[0]["type"] == "alert.received" and history[0]["data"]["alert"]["summary"]  # the first, whole


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_only_a_write_replacing_a_secret_leaves_no_copy_of_the_old_data(
    memory: OrgMemory, grandbo, monkeypatch
) -> None:
    """Writes whose history records what they changed (an incident's finding, the profile, an alert or group
    redelivered) went through the secret path: on SQLite, secure deletion and a checkpoint of the write-ahead log
    holding the store's one lock, every organization's writes waiting, on each alert delivery. Only a write that
    replaces a secret (a webhook signing secret) does."""
    from grandbo.store.sqlite.connection import Connection

    paths: list[str] = []
    leaving = Connection._leaving_no_copy

    def counted(self, why):  # type: ignore[no-untyped-def]
        paths.append(why)
        return leaving(self, why)

    monkeypatch.setattr(Connection, "_leaving_no_copy", counted)
    memory.incidents.open("login failures", incident_id="INC-1")
    memory.incidents.add_finding("INC-1", "token expired")
    memory.profile.update({"facts": {"name": "acme"}})
    memory.profile.update({"facts": {"name": "acme corp"}})
    assert paths == []
    memory.webhook_secrets.add("github", "s3cr3t-one-long-enough-0123456789")
    memory.webhook_secrets.add("github", "s3cr3t-two-long-enough-0123456789")
    assert paths == ["secret replaced", "secret replaced"]
