"""An incident's sync racing another write to the incident: whatever the interleaving, memory holds an active entry
for the corroborated findings only and the ledger one result of the incident, its latest close's; `sync` repairs
what an earlier release left otherwise. Each race is driven by hand at the point probe 21 saw it (F1, F5), through
the seam the sync writes through (the ledger's `record`, the org's `remember`), both backends."""

from __future__ import annotations

import pytest
import structlog

from grandbo.memory import OrgMemory
from grandbo.ports import DocumentWrite
from grandbo.tiers.incident_model import INCIDENTS, ClosedOutcome
from grandbo.tiers.ledger import Ledger
from tests.serving import serving


def investigate(incidents):
    """INC-100, open: f1 corroborated (the runbook RB-LRU), f2 a hypothesis."""
    incidents.open("Login latency spike", services=["auth-service"], severity="sev2", incident_id="INC-100")
    incidents.add_finding("INC-100", "Keys evicted under maxmemory", status="corroborated", runbook_id="RB-LRU",
                          root_cause="allkeys-lru policy", remediation="switched to volatile-lru")  # fmt: skip
    incidents.add_finding("INC-100", "Network partition between AZs", mechanism="packet loss on the uplink")


def _record(memory, runbook_id):
    record = memory.ledger.effectiveness(runbook_id)
    return record.attempts, record.successes


def _at_first(monkeypatch, owner, method, matches, act, *, before):
    """Run `act` once, when the first call of `owner.method` that `matches` (its arguments) starts (`before`) or
    has returned: what another writer did at that moment of a sync."""
    real, landed = getattr(owner, method), []

    def hooked(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if landed or not matches(*args, **kwargs):
            return real(self, *args, **kwargs)
        landed.append(True)
        if before:
            act()
            return real(self, *args, **kwargs)
        done = real(self, *args, **kwargs)
        act()
        return done

    monkeypatch.setattr(owner, method, hooked)
    return landed


@pytest.mark.parametrize("moment", ["before its result", "after its result", "its sync runs after"])
def test_a_re_close_while_the_close_syncs_leaves_only_its_result(memory, monkeypatch, moment):
    """Probe 21, F1: the first close's sync recorded RB-LRU's success; a re-close naming RB-FAILOVER (failed) landed
    before that sync saved, which then dropped what it had recorded, and the re-close's sync found nothing to take
    back: RB-LRU kept counting the incident, for good (1/1 here, on the previous commit)."""
    incidents = memory.incidents
    investigate(incidents)
    refused: list[bool] = []

    def re_close() -> None:
        if moment == "its sync runs after":  # its sync fails at once (the store went away) and is re-driven later
            _at_first(monkeypatch, Ledger, "record", lambda rb, *a, **k: rb == "RB-FAILOVER", fail, before=True)
        incidents.close("INC-100", runbook_used="RB-FAILOVER", succeeded=False)

    def fail() -> None:
        refused.append(True)
        raise ConnectionError("the store went away mid-sync")

    landed = _at_first(monkeypatch, Ledger, "record", lambda rb, *a, **k: rb == "RB-LRU", re_close,
                       before=moment == "before its result")  # fmt: skip
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True)
    assert landed and refused == ([True] if moment == "its sync runs after" else [])
    incidents.sync("INC-100")  # the re-close's recorded sync, re-driven (or once more: it changes nothing)
    assert (_record(memory, "RB-LRU"), _record(memory, "RB-FAILOVER")) == ((0, 0), (1, 0))
    incident = incidents.get("INC-100")
    assert incident.closed_outcome == ClosedOutcome(runbook_id="RB-FAILOVER", succeeded=False)
    assert incident.pending_outcome is None and incident.memory_sync == "done"


def test_a_sync_that_took_back_a_later_close_s_result_records_it_again(memory, monkeypatch):
    """A re-close naming RB-LRU again landed while the sync of the close naming RB-FAILOVER ran: the later close's
    sync kept RB-LRU's success, then the earlier sync took it back as it had read it should. On the previous commit
    RB-FAILOVER's failure stayed as well; now the incident counts for RB-LRU only."""
    incidents = memory.incidents
    investigate(incidents)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True)
    landed = _at_first(monkeypatch, Ledger, "withdraw", lambda rb, *a, **k: rb == "RB-LRU",
                       lambda: incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True), before=True)  # fmt: skip
    incidents.close("INC-100", runbook_used="RB-FAILOVER", succeeded=False)
    assert landed
    assert (_record(memory, "RB-LRU"), _record(memory, "RB-FAILOVER")) == ((1, 1), (0, 0))
    assert incidents.get("INC-100").closed_outcome == ClosedOutcome(runbook_id="RB-LRU", succeeded=True)


def test_a_re_close_naming_another_runbook_without_a_result_is_credited_with_none(memory, monkeypatch):
    """A re-close naming RB-FAILOVER without a result landed while the sync of a close that said RB-LRU failed ran,
    and its own sync had not run yet (it failed at once): the earlier sync asked RB-LRU's held success again, for
    RB-FAILOVER. On the previous commit RB-FAILOVER was credited with a success nobody reported (1/1)."""
    incidents = memory.incidents
    investigate(incidents)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True)

    def re_close() -> None:
        _at_first(monkeypatch, Ledger, "withdraw", lambda *a, **k: True, fail, before=True)
        incidents.close("INC-100", runbook_used="RB-FAILOVER")

    def fail() -> None:
        raise ConnectionError("the store went away mid-sync")

    landed = _at_first(monkeypatch, Ledger, "record", lambda rb, *a, **k: rb == "RB-LRU", re_close, before=False)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=False)
    assert landed
    incidents.sync("INC-100")  # the re-close's recorded sync, re-driven
    assert (_record(memory, "RB-LRU"), _record(memory, "RB-FAILOVER")) == ((0, 0), (0, 0))
    assert incidents.get("INC-100").closed_outcome is None


@pytest.mark.parametrize("before", [True, False], ids=["before its entry", "after its entry"])
def test_a_finding_demoted_while_the_close_syncs_keeps_no_entry(memory, monkeypatch, before):
    """Probe 21, F5: a finding demoted (and another corroborated) while the close's sync wrote the finding's entry:
    the sync that followed the demotion read no entry to retire, and the close's sync saved its mapping over it
    (on the previous commit the demoted finding's entry stayed active and mapped)."""
    incidents = memory.incidents
    investigate(incidents)

    def meanwhile() -> None:
        incidents.add_finding("INC-100", "Client retries amplified the storm", status="corroborated")
        incidents.update_finding("INC-100", "f1", status="hypothesis")

    landed = _at_first(monkeypatch, OrgMemory, "remember", lambda entry, **k: entry.get("id") == "INC-100-f1",
                       meanwhile, before=before)  # fmt: skip
    incidents.close("INC-100")
    assert landed
    assert [e.id for e in memory.entries()] == ["INC-100-f3"]
    incident = incidents.get("INC-100")
    assert incident.memory == {"f3": "INC-100-f3"} and incident.memory_sync == "done"
    assert "INC-100-f1" not in [hit.entry.id for hit in memory.recall("Keys evicted under maxmemory").hits]


def test_a_sync_that_finds_the_entry_retired_by_another_sync_does_not_fail(memory, monkeypatch):
    """Two syncs after a demotion retired the finding's entry at once: the second was refused (only an active entry
    can be retired), logged `write_behind.failed` and left to the re-driver (6 of 36 incidents in a run of probe 21's
    close race, where each sync now also looks up the finding's own entry)."""
    incidents = memory.incidents
    investigate(incidents)
    incidents.close("INC-100")
    landed = _at_first(monkeypatch, OrgMemory, "retire", lambda entry_id, **k: entry_id == "INC-100-f1",
                       lambda: incidents.sync("INC-100"), before=True)  # fmt: skip
    with structlog.testing.capture_logs() as logs:
        incidents.update_finding("INC-100", "f1", status="hypothesis")
    assert landed and [line for line in logs if line["event"] == "write_behind.failed"] == []
    assert memory.entries() == [] and incidents.get("INC-100").memory == {}


@pytest.fixture
def admin(grandbo, memory):
    with serving(grandbo) as served, served.client(memory.keys.create("admin", name="repair")[1]) as client:
        yield client


def test_sync_takes_back_a_result_an_earlier_release_left_in_the_ledger(memory, admin):
    """What the previous commit left after F1's race: the re-close's result recorded, and the first close's
    still in the ledger though the incident no longer names its runbook. `POST .../sync` answered with nothing
    to do and left it; it takes it back."""
    incidents = memory.incidents
    investigate(incidents)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True)
    incidents.close("INC-100", runbook_used="RB-FAILOVER", succeeded=False)
    memory.ledger.record("RB-LRU", "succeeded", incident_id="INC-100", comment="close of incident INC-100",
                         cited=True)  # as the first close's sync wrote it, after the re-close's had run  # fmt: skip
    assert (_record(memory, "RB-LRU"), _record(memory, "RB-FAILOVER")) == ((1, 1), (1, 0))
    assert admin.post("/v1/incidents/INC-100/sync").status_code == 200
    assert (_record(memory, "RB-LRU"), _record(memory, "RB-FAILOVER")) == ((0, 0), (1, 0))


def test_sync_retires_the_entry_of_a_demoted_finding_an_earlier_release_left_active(memory, admin):
    """What the previous commit left after F5's race: the finding demoted, the incident's mapping without it, its
    entry active. `POST .../sync` answered `unchanged` and recall kept serving it; it is retired."""
    incidents = memory.incidents
    investigate(incidents)
    closed = incidents.close("INC-100")
    assert closed.memory == {"f1": "INC-100-f1"}
    data = closed.model_dump(mode="json", exclude={"version"})
    data["findings"][0]["status"], data["memory"] = "hypothesis", {}
    incidents.documents.put([DocumentWrite(INCIDENTS, "INC-100", data, "incident.memory_synced", ref="closed",
                                           expected_version=closed.version)], "api")  # fmt: skip
    assert [e.id for e in memory.entries()] == ["INC-100-f1"]
    answer = admin.post("/v1/incidents/INC-100/sync")
    assert answer.status_code == 200 and answer.json()["retired"] == ["INC-100-f1"]
    assert memory.entries() == [] and incidents.get("INC-100").memory == {}
