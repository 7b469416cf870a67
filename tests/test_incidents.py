"""Episodic memory: only corroborated findings become memory, after the close, exactly once."""

import sqlite3
import threading
from collections.abc import Callable
from contextlib import contextmanager
from urllib.parse import urlsplit

import psycopg
import pytest
import structlog

from grandbo.errors import ConflictError, InvalidInputError, NotFoundError
from grandbo.service import Grandbo
from grandbo.tiers.incident_model import FindingStatus, IncidentStatus
from grandbo.tiers.incident_sync import finding_entry
from tests.serving import until


@pytest.fixture
def incidents(memory):
    return memory.incidents


def investigate(incidents):
    incident = incidents.open(
        "Login latency spike",
        services=["auth-service"],
        severity="sev2",
        symptoms=["p99 above 1200ms"],
        alerts=["PD-7781"],
        incident_id="INC-100",
    )
    incidents.add_finding(
        incident.id,
        "Keys evicted under maxmemory",
        status="corroborated",
        mechanism="eviction storm",
        component="redis-sessions",
        root_cause="allkeys-lru policy",
        remediation="switched to volatile-lru",
        runbook_id="RB-LRU",
        services=["redis-sessions"],
    )
    incidents.add_finding(
        incident.id, "Network partition between AZs", status="hypothesis", mechanism="packet loss on the switch uplink"
    )
    incidents.add_finding(
        incident.id, "Bad deploy of auth-service 4.2", status="refuted", mechanism="regression in the token cache"
    )
    return incident


def test_closing_writes_only_corroborated_findings(incidents, memory):
    investigate(incidents)
    closed = incidents.close(
        "INC-100", resolution="volatile-lru", runbook_used="RB-LRU", succeeded=True, time_to_mitigate_s=900
    )
    assert closed.status is IncidentStatus.CLOSED and closed.memory_sync == "done"
    entries = memory.entries()
    assert [e.id for e in entries] == ["INC-100-f1"]
    entry = entries[0]
    assert "Mechanism: eviction storm" in entry.body and "Remediation: switched to volatile-lru" in entry.body
    assert entry.meta == {"incident_id": "INC-100", "finding_id": "f1", "runbook_id": "RB-LRU"}
    assert entry.kind.value == "finding" and entry.source.value == "incident" and entry.severity.value == "sev2"


def test_hypotheses_and_refuted_findings_never_reach_recall(incidents, memory):
    investigate(incidents)
    incidents.close("INC-100")
    for topic, arm in [
        ("network partition between availability zones packet loss", "hybrid"),
        ("bad deploy regression in the token cache of auth-service", "hybrid"),
        ("network partition between availability zones packet loss", "lexical"),
    ]:
        ids = [hit.entry.id for hit in memory.recall(topic, arm=arm).hits]
        assert all("f2" not in i and "f3" not in i for i in ids), (topic, ids)
    assert memory.stats().total == 1


def test_nothing_is_written_while_the_incident_is_open(incidents, memory):
    investigate(incidents)
    assert memory.stats().total == 0


def test_reclosing_and_editing_correct_instead_of_duplicating(incidents, memory):
    investigate(incidents)
    incidents.close("INC-100")
    incidents.close("INC-100")  # re-close: nothing changed, nothing written
    assert [e.id for e in memory.entries()] == ["INC-100-f1"]
    incidents.update_finding("INC-100", "f1", root_cause="allkeys-lru evicted keys without TTL")
    active = memory.entries()
    assert len(active) == 1 and active[0].supersedes == "INC-100-f1"
    assert "without TTL" in active[0].body
    incidents.update_finding("INC-100", "f2", status="corroborated")  # a hypothesis proven later
    assert len(memory.entries()) == 2
    incidents.update_finding("INC-100", "f2", status="refuted")  # and disproven again
    assert len(memory.entries()) == 1
    assert incidents.get("INC-100").memory_sync == "done"


def test_close_records_the_runbook_outcome(incidents, memory):
    investigate(incidents)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True, time_to_mitigate_s=600)
    record = memory.ledger.effectiveness("RB-LRU")
    assert record.attempts == 1 and record.successes == 1 and record.mttr_median_s == 600


def test_closing_again_with_a_corrected_time_to_mitigate_corrects_the_record(incidents, memory):
    """The same result again with another time to mitigate was counted once and its time dropped: the record kept
    100 s after the incident was corrected to 500 s (and after a sync). It is corrected, still one attempt."""
    investigate(incidents)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True, time_to_mitigate_s=100)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True, time_to_mitigate_s=500)
    record = memory.ledger.effectiveness("RB-LRU")
    assert (record.attempts, record.successes, record.mttr_median_s) == (1, 1, 500)
    incidents.sync("INC-100")  # and again, a retried write-behind: unchanged
    assert memory.ledger.effectiveness("RB-LRU").mttr_median_s == 500


def _record(memory, runbook_id):
    record = memory.ledger.effectiveness(runbook_id)
    return record.attempts, record.successes


def test_closing_again_naming_another_runbook_moves_the_outcome_to_it(incidents, memory):
    """The close's outcome stayed with the first runbook when a re-close named the one really used: both were
    credited with the success. The re-close takes the first back, and a retried sync changes nothing."""
    investigate(incidents)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True, time_to_mitigate_s=100)
    assert _record(memory, "RB-LRU") == (1, 1)
    closed = incidents.close("INC-100", runbook_used="RB-FAILOVER", succeeded=True)
    assert closed.closed_outcome is not None and closed.closed_outcome.runbook_id == "RB-FAILOVER"
    assert (_record(memory, "RB-LRU"), _record(memory, "RB-FAILOVER")) == ((0, 0), (1, 1))
    incidents.sync("INC-100")
    assert (_record(memory, "RB-LRU"), _record(memory, "RB-FAILOVER")) == ((0, 0), (1, 1))

    # Named again without a result: the earlier runbook's result is not carried over to it, and is taken back.
    incidents.close("INC-100", runbook_used="RB-LRU")
    assert (_record(memory, "RB-LRU"), _record(memory, "RB-FAILOVER")) == ((0, 0), (0, 0))
    assert incidents.get("INC-100").closed_outcome is None


def test_a_result_waiting_for_its_sync_is_not_moved_to_another_runbook(incidents, memory, monkeypatch):
    """The close's sync failed (its write-behind waits to be re-driven), then a re-close named another runbook
    without a result: the waiting result, the first runbook's, was recorded for the second."""
    from grandbo.tiers.ledger import Ledger

    investigate(incidents)
    recorded = Ledger.record

    def failing_once(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(Ledger, "record", recorded)
        raise ConnectionError("the store went away mid-sync")

    monkeypatch.setattr(Ledger, "record", failing_once)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True)
    assert incidents.get("INC-100").pending_outcome is True  # waiting for the re-drive
    incidents.close("INC-100", runbook_used="RB-FAILOVER")
    assert (_record(memory, "RB-LRU"), _record(memory, "RB-FAILOVER")) == ((0, 0), (0, 0))


def test_a_report_of_the_same_result_stays_when_the_close_names_another_runbook(incidents, memory):
    """An agent reported the runbook's success on the incident before the close said the same: that report is the
    agent's, not the close's, so a re-close naming another runbook leaves it."""
    investigate(incidents)
    memory.ledger.record("RB-LRU", "succeeded", incident_id="INC-100", actor="agent")
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True)
    incidents.close("INC-100", runbook_used="RB-FAILOVER", succeeded=True)
    assert (_record(memory, "RB-LRU"), _record(memory, "RB-FAILOVER")) == ((1, 1), (1, 1))


def test_closing_again_with_only_a_corrected_time_to_mitigate_corrects_the_record(incidents, memory):
    """A re-close giving the time to mitigate without `succeeded` recorded nothing: the record kept the first time."""
    investigate(incidents)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=False, time_to_mitigate_s=100)
    incidents.close("INC-100", time_to_mitigate_s=700)
    assert _record(memory, "RB-LRU") == (1, 0)
    outcome = next(o for o in memory.ledger.outcomes(["RB-LRU"]) if o.incident_id == "INC-100")
    assert outcome.kind.value == "failed" and outcome.time_to_mitigate_s == 700


@pytest.mark.parametrize("ttm", [-5.0, float("inf"), float("nan")])
def test_a_close_with_an_impossible_time_to_mitigate_is_refused_before_it_closes(incidents, memory, ttm):
    investigate(incidents)
    with pytest.raises(InvalidInputError, match="time to mitigate"):
        incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True, time_to_mitigate_s=ttm)
    incident = incidents.get("INC-100")  # still open, nothing pending that the ledger would refuse later
    assert incident.status is IncidentStatus.OPEN and incident.pending_outcome is None
    with pytest.raises(InvalidInputError, match="time to mitigate"):
        memory.ledger.record("RB-LRU", "succeeded", time_to_mitigate_s=ttm)
    assert memory.ledger.effectiveness("RB-LRU").attempts == 0


@contextmanager
def store_out_of_reach(backend, settings, pg_server):
    """The store stops answering writes, for real: SQLite's file is locked by another connection (a writer waits
    out its busy timeout, then fails); on Postgres a blocker holds the org's writer lock, and the writer's
    connection is cut while it waits."""
    if backend == "sqlite":
        blocker = sqlite3.connect(settings.home / "grandbo.db", isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            yield lambda failed: None
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        return

    def cut(failed: Callable[[], bool]) -> None:
        """Cut every runtime connection that waits for a lock until `failed` says the write gave up: the embed
        worker may be the first to wait, and a writer that reconnects waits again."""
        with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
            waiting = "FROM pg_stat_activity WHERE usename = 'grandbo_app' AND wait_event_type = 'Lock'"

            def cut_waiting() -> bool:
                conn.execute(f"SELECT pg_terminate_backend(pid) {waiting}")
                return failed()

            until(cut_waiting, "the writer gives up once its connection is cut")

    with psycopg.connect(pg_server.url(urlsplit(settings.database_url).path.lstrip("/"))) as blocker:  # admin
        blocker.execute("SELECT 1 FROM orgs WHERE org_id = 'acme' FOR UPDATE")
        yield cut
        blocker.rollback()


def hold_write_behind(memory):
    """Keep both write-behind threads of a background Grandbo busy until the returned gate is set, so the next
    write-behind (a close's) waits its turn."""
    gate = threading.Event()
    for _ in range(2):
        memory.defer(lambda: gate.wait(30) and None)
    return gate


@pytest.mark.brief_lock_waits  # the test locks the file on purpose
def test_a_close_whose_write_behind_loses_the_store_still_closes_and_sync_repairs_it(
    grandbo, background, settings, backend, request
):
    pg_server = request.getfixturevalue("pg_server") if backend == "postgres" else None
    memory = background.org("acme", create=True)
    investigate(memory.incidents)
    gate = hold_write_behind(memory)
    closed = memory.incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True)
    assert closed.status is IncidentStatus.CLOSED and closed.memory_sync == "pending"
    with structlog.testing.capture_logs() as logs, store_out_of_reach(backend, settings, pg_server) as cut:
        gate.set()
        cut(lambda: any(line["event"] == "write_behind.failed" for line in logs))
        background.flush(timeout=60)
    assert any(line["event"] == "write_behind.failed" for line in logs)
    assert memory.stats().total == 0 and memory.incidents.get("INC-100").memory_sync == "pending"
    report = memory.incidents.sync("INC-100")
    assert report.written == ["INC-100-f1"] and memory.incidents.get("INC-100").memory_sync == "done"


def test_bad_input_and_unknown_ids(incidents):
    with pytest.raises(InvalidInputError, match="title"):
        incidents.open("")
    with pytest.raises(NotFoundError):
        incidents.get("INC-404")
    incidents.open("Something broke", incident_id="INC-1")
    with pytest.raises(InvalidInputError, match="status"):
        incidents.add_finding("INC-1", "a finding", status="maybe")
    with pytest.raises(ConflictError, match="incident 'INC-1' exists already in org 'acme'"):
        incidents.open("Again", incident_id="INC-1")
    assert [i.id for i in incidents.find(IncidentStatus.OPEN)] == ["INC-1"]
    assert [h["type"] for h in incidents.history("INC-1")] == ["incident.opened"]


def test_findings_keep_their_status_history(incidents):
    investigate(incidents)
    incidents.update_finding("INC-100", "f2", status=FindingStatus.REFUTED)
    types = [h["type"] for h in incidents.history("INC-100")]
    assert types[0] == "incident.opened" and types[-1] == "finding.updated.refuted"


def test_in_a_long_running_process_the_write_behind_never_holds_up_the_close(settings):

    with Grandbo.init(settings, embedding="deterministic"):
        pass
    with Grandbo.open(settings, background=True) as grandbo:
        memory = grandbo.org("acme", create=True)
        incidents = memory.incidents
        investigate(incidents)
        gate = hold_write_behind(memory)
        closed = incidents.close(
            "INC-100",
            runbook_used="RB-LRU",
            succeeded=True,
            time_to_mitigate_s=300,
            postmortem="Eviction storm; we moved to volatile-lru and added memory alarms.",
        )
        assert closed.status is IncidentStatus.CLOSED and closed.memory_sync == "pending"
        assert memory.stats().total == 0
        gate.set()
        grandbo.flush(timeout=30)
        assert incidents.get("INC-100").memory_sync == "done"
        kinds = sorted(e.kind.value for e in memory.entries())
        assert kinds == ["finding", "post-mortem"]
        assert memory.ledger.effectiveness("RB-LRU").successes == 1


def test_a_finding_corroborated_again_after_a_refutation_is_written_anew(incidents, memory):
    investigate(incidents)
    incidents.close("INC-100")
    incidents.update_finding("INC-100", "f1", status="refuted")
    assert memory.stats().total == 0
    incidents.update_finding("INC-100", "f1", status="corroborated")
    active = memory.entries()
    assert len(active) == 1 and active[0].id != "INC-100-f1"  # the retired entry keeps its id and history
    assert incidents.get("INC-100").memory_sync == "done"
    assert incidents.sync("INC-100").unchanged == [active[0].id]


def test_a_sync_that_died_halfway_is_finished_by_the_next_one(incidents, memory, background):
    """A write-behind that wrote its first entry and died before saving the mapping: the next sync adopts
    that entry (no second copy) and writes the rest."""
    investigate(incidents)
    incidents.update_finding("INC-100", "f2", status="corroborated")
    stalled = background.org("acme")
    gate = hold_write_behind(stalled)
    incident = stalled.incidents.close("INC-100")  # its write-behind waits behind the gate; it never runs here
    assert incident.memory_sync == "pending"
    finding = next(f for f in incident.findings if f.id == "f1")
    written = finding_entry(incident, finding)
    memory.remember({**{k: v for k, v in written.items() if v is not None}, "id": "INC-100-f1"})  # what it wrote
    report = incidents.sync("INC-100")
    assert report.written == ["INC-100-f2"] and report.unchanged == ["INC-100-f1"]
    gate.set()
    background.flush(timeout=60)  # the stalled write-behind runs now: it finds memory already in sync
    assert sorted(e.id for e in memory.entries()) == ["INC-100-f1", "INC-100-f2"]


def test_naive_start_times_do_not_cause_endless_corrections(incidents, memory):
    from datetime import datetime

    incidents.open("Naive clock", started_at=datetime(2026, 5, 1, 12, 0), incident_id="INC-200")
    incidents.add_finding("INC-200", "a corroborated cause", status="corroborated", mechanism="m")
    incidents.close("INC-200")
    incidents.sync("INC-200")
    incidents.sync("INC-200")
    assert len(memory.entries(include_inactive=True)) == 1


def test_the_incident_list_is_read_a_page_at_a_time(grandbo, memory, backend):
    """`GET /v1/incidents` and MCP's `list_incidents` read every incident of the org (5,000: a 3 MB answer in
    190-300 ms a call, and another org's recall p50 from 6 to 85 ms while a read key polled it). The route pages by
    the store's index of write times, the most recently changed first; the tool reads its `limit`, and its cursor
    gives the rest."""
    from grandbo.mcp import tools
    from tests.serving import serving

    for n in range(7):
        memory.incidents.open(f"incident {n}", incident_id=f"INC-{n}")
    memory.incidents.close("INC-0", resolution="done")
    memory.incidents.add_finding("INC-3", "pool exhausted")  # the most recently changed
    reads = []
    real = memory.incidents.documents.newest
    memory.incidents.documents.newest = lambda *a, **k: reads.append(page := real(*a, **k)) or page
    listed = tools.list_incidents(memory, "open", limit=2)
    assert [i.id for i in listed.incidents] == ["INC-3", "INC-6"] and listed.more is True
    assert [len(page) for page in reads] == [2]  # the limit, not the org's seven
    rest = tools.list_incidents(memory, "open", limit=5, cursor=listed.next_cursor)
    assert [i.id for i in rest.incidents] == ["INC-5", "INC-4", "INC-2", "INC-1"] and rest.next_cursor is None
    del memory.incidents.documents.newest
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        first = client.get("/v1/incidents", params={"status": "open", "limit": 4}).json()
        rest = client.get("/v1/incidents", params={"status": "open", "limit": 4, "cursor": first["next_cursor"]})
        closed = client.get("/v1/incidents", params={"status": "closed"}).json()
    assert [i["id"] for i in first["items"]] == ["INC-3", "INC-6", "INC-5", "INC-4"]
    assert [i["id"] for i in rest.json()["items"]] == ["INC-2", "INC-1"] and rest.json()["next_cursor"] is None
    assert [i["id"] for i in closed["items"]] == ["INC-0"]


def test_a_re_close_landing_while_the_first_close_syncs_keeps_its_result(incidents, memory, monkeypatch):
    """The first close's sync cleared the incident's waiting result when it finished, whatever a re-close had asked
    meanwhile: the re-close's `failed` was never recorded and the ledger kept `succeeded`."""
    from grandbo.tiers.ledger import Ledger

    investigate(incidents)
    record = Ledger.record
    landed: list[bool] = []

    def re_closed_meanwhile(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not landed:
            landed.append(True)
            monkeypatch.setattr(Ledger, "record", record)
            incidents.close("INC-100", runbook_used="RB-LRU", succeeded=False)  # its own sync runs too
        return record(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "record", re_closed_meanwhile)
    incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True)
    assert landed and _record(memory, "RB-LRU") == (1, 0)
    assert incidents.get("INC-100").pending_outcome is None  # nothing left waiting
