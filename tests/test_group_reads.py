"""What a delivery reads of its organization's open alert groups is bounded by what they cost (`tiers.group_reads`),
not only by their number: one org's storm of groups keeping long summaries made every later delivery of its own, a
single alert too, read and index 18.8 MB (probe 23c), and another org's requests waited on it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from grandbo.ingest.alert import Alert
from grandbo.memory import OrgMemory
from grandbo.model import utcnow
from grandbo.ports import DocumentWrite
from grandbo.tiers.group_reads import OPEN_GROUP_MARKS, OPEN_GROUPS_PAGE
from grandbo.tiers.grouping import ALERT_GROUPS, GROUP_SLOTS, TEXT_MEMBERS, WORD_MARKS, AlertGroup, Member, slot_of

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)
GROUPS = 100  # each keeping TEXT_MEMBERS members of WORD_MARKS words: 128,000 words in all


def _storm(memory: OrgMemory) -> list[AlertGroup]:
    """GROUPS open groups as a storm of long summaries alike nothing leaves them, one a service, written as
    deliveries write them; each service's slot names its group. The oldest is first."""
    now, groups = utcnow(), []
    for g in range(GROUPS):
        at = now - timedelta(minutes=10) + timedelta(seconds=g)
        members = [Member(id=f"a{g}-{m}", service=f"svc-{g}", at=at, fingerprint=f"{g:05d}{m:05d}",
                          words=[f"{g:04d}{m:04d}{w:04d}" for w in range(WORD_MARKS)]) for m in range(TEXT_MEMBERS)]  # fmt: skip
        group = AlertGroup(id=f"grp-{g:04d}", alerts=[m.id for m in members], size=len(members), services=[f"svc-{g}"],
                           first_seen=at, last_seen=at, members=members)  # fmt: skip
        service = Alert(source="alertmanager", event_id="x", fingerprint="x", service=f"svc-{g}", summary="x")
        memory.alerts.documents.put([
            DocumentWrite(ALERT_GROUPS, group.id, group.model_dump(mode="json"), "alert_group.grouped", ref="open"),
            DocumentWrite(GROUP_SLOTS, slot_of(service), {"g": group.id}, "alert_group.slot"),
        ], "test")  # fmt: skip
        groups.append(group)
    return groups


def _asked(statements: list[str]) -> int:
    """How many alert groups the statements that read their data asked for (their LIMITs; none: every one)."""
    reads = [s for s in statements if "alert_group" in s and s.lstrip().upper().startswith("SELECT")
             and "data" in s.split("FROM")[0]]  # fmt: skip
    return sum(int(s.rsplit("LIMIT", 1)[1].split()[0]) if "LIMIT" in s else GROUPS for s in reads)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # counted through SQLite's trace
def test_a_one_alert_delivery_reads_open_groups_up_to_a_bound_on_their_words(grandbo, backend) -> None:  # type: ignore[no-untyped-def]
    memory = grandbo.org("storm", create=True)
    _storm(memory)
    memory.alerts.receive([Alert(source="alertmanager", event_id="w", fingerprint="w", service="warm", summary="w")])
    sent: list[str] = []
    grandbo._store.trace(sent.append)
    try:  # a new service and a summary alike nothing: every open group a candidate by text
        (stored, new), = memory.alerts.receive([Alert(source="alertmanager", event_id="one", fingerprint="one",
                                                     service="new-service", summary="disk full on the new node")])  # fmt: skip
    finally:
        grandbo._store.trace(None)
    assert new and stored.group_id not in {f"grp-{g:04d}" for g in range(GROUPS)}
    per_group = TEXT_MEMBERS * WORD_MARKS
    bound = (OPEN_GROUP_MARKS // per_group + 1 + OPEN_GROUPS_PAGE) + 1  # pages up to the bound, one more, the slot's
    assert _asked(sent) <= bound < GROUPS, sent  # all of them (500 asked) before


def test_an_alert_joins_its_services_group_though_newer_groups_fill_the_bound(memory: OrgMemory) -> None:
    oldest = _storm(memory)[0]
    (stored, new), = memory.alerts.receive([Alert(source="alertmanager", event_id="late", fingerprint="late",
                                                 service="svc-0", summary="a late alert on the first service")])  # fmt: skip
    assert new and stored.group_id == oldest.id
    assert memory.alert_groups.get(oldest.id).size == TEXT_MEMBERS + 1
