"""Write-behinds are durable work (issue 26, item 1): recorded with the write that acknowledges them, re-driven
from the record alone until done, idempotently, fairly across organizations, and counted while they wait.

A process that "died" is played by one whose write-behind threads are held: what it acknowledged is in the
store and nowhere else, and another runner (`Grandbo.redriver`) finds it there. A real `kill -9` is in
`tests/test_write_behind_chaos.py`."""

from __future__ import annotations

import json
import threading

import pytest

from grandbo.model import Status
from grandbo.ports import NewWork
from grandbo.redrive import ALERT_TRIAGE, INCIDENT_SYNC
from grandbo.service import Grandbo
from grandbo.tiers.alerts import ALERTS
from grandbo.tiers.edit_rules import Category
from grandbo.tiers.incident_model import IncidentStatus
from tests.serving import until
from tests.test_incidents import hold_write_behind, investigate
from tests.test_webhooks import ALERTMANAGER


def _reopened(settings, **changes) -> Grandbo:  # type: ignore[no-untyped-def]
    """Another process on the same store: re-drives at once (no grace), retries at once."""
    tuned = settings.model_copy(update={"write_behind_grace_seconds": 0, "write_behind_retry_seconds": 0, **changes})
    return Grandbo.open(tuned)


@pytest.fixture
def writer(grandbo, settings):  # type: ignore[no-untyped-def]
    """A server process whose write-behinds anyone may re-drive at once (no grace) and that looks for them
    itself only at start-up: the process that will "die"."""
    tuned = settings.model_copy(update={"write_behind_grace_seconds": 0, "write_behind_poll_seconds": 3600})
    with Grandbo.open(tuned, background=True) as opened:
        yield opened


def _closed_while_the_writer_hangs(background, **close):  # type: ignore[no-untyped-def]
    """Close INC-100 in a process whose write-behind threads never get to it; the gate that frees them."""
    memory = background.org("acme", create=True)
    investigate(memory.incidents)
    gate = hold_write_behind(memory)
    closed = memory.incidents.close("INC-100", **close)
    assert closed.memory_sync == "pending" and memory.stats().write_behinds == 1
    return memory, gate


def test_an_acknowledged_close_is_made_whole_from_its_record_by_another_process_once(writer, settings):
    memory, gate = _closed_while_the_writer_hangs(writer, runbook_used="RB-LRU", succeeded=True,
                                                  postmortem="Eviction storm: LRU policy.")  # fmt: skip
    with _reopened(settings) as other:
        first = other.redriver.drain()
        again = other.redriver.drain()  # nothing left: the record was deleted when the sync was done
        acme = other.org("acme")
        incident = acme.incidents.get("INC-100")
        assert (first.done, first.failed, again.done) == (1, 0, 0)
        assert incident.memory_sync == "done" and set(incident.memory) == {"f1"}
        assert acme.get("INC-100-f1").status is Status.ACTIVE and acme.get("INC-100-postmortem").body
        assert acme.ledger.effectiveness("RB-LRU").attempts == 1
        assert (acme.stats().write_behinds, other.readiness()[3:]) == (0, (0, 0))
        entries = len(acme.entries())
    gate.set()  # the first process's threads wake: the work is gone, nothing is written twice
    writer.flush(timeout=60)
    memory.incidents.sync("INC-100")  # and a sync by hand on top changes nothing either
    assert len(memory.entries()) == entries and memory.ledger.effectiveness("RB-LRU").attempts == 1


def test_redriving_a_close_twice_gives_the_same_memory_and_one_ledger_outcome(writer, settings):
    _, gate = _closed_while_the_writer_hangs(writer, runbook_used="RB-LRU", succeeded=True)
    with _reopened(settings) as other:
        acme = other.org("acme")
        for _ in range(2):  # two runners each holding a copy of the record (a lease that ran out) run it twice
            acme.incidents.sync("INC-100", actor="write-behind")
        snapshot = sorted((e.id, e.status.value, e.body) for e in acme.entries(include_inactive=True))
        assert other.redriver.drain().done == 1  # the record itself, a third run: still the same
        assert sorted((e.id, e.status.value, e.body) for e in acme.entries(include_inactive=True)) == snapshot
        assert acme.ledger.effectiveness("RB-LRU").attempts == 1
    gate.set()


def test_a_write_behind_that_keeps_failing_backs_off_then_counts_as_failed_until_backfill(grandbo, settings):
    memory = grandbo.org("acme", create=True)
    grandbo._store.put_documents("acme", [], "test", [NewWork(INCIDENT_SYNC, "INC-404", {"actor": "api"})])
    with _reopened(settings, write_behind_max_attempts=2) as other:
        assert other.redriver.drain().failed == 2  # retried at once (retry 0 s), then it gives up
        assert other.redriver.drain().failed == 0  # given up: not tried again
        stats = other.org("acme").stats()
        assert (stats.write_behinds, stats.write_behinds_failed) == (0, 1)
        assert other.readiness()[3:] == (0, 1)
        memory.incidents.open("What it failed on is there now", incident_id="INC-404")
        assert other.redriver.retry_failed().done == 1  # `grandbo backfill`
        assert other.readiness()[3:] == (0, 0)


def test_a_retry_waits_its_backoff(grandbo, settings):
    grandbo.org("acme", create=True)
    grandbo._store.put_documents("acme", [], "test", [NewWork(INCIDENT_SYNC, "INC-404")])
    tuned = settings.model_copy(update={"write_behind_grace_seconds": 0, "write_behind_retry_seconds": 3600})
    with Grandbo.open(tuned) as other:
        assert other.redriver.drain().failed == 1
        assert other.redriver.drain().failed == 0  # due in an hour
        assert other.readiness()[3:] == (1, 0)


def test_a_fresh_record_is_left_to_the_process_that_wrote_it(grandbo, background, settings):
    memory, gate = _closed_while_the_writer_hangs(background)
    with Grandbo.open(settings) as other:  # the default grace: 30 s
        assert other.redriver.drain().done == 0
    gate.set()
    background.flush(timeout=60)
    assert memory.incidents.get("INC-100").memory_sync == "done" and memory.stats().write_behinds == 0


def test_one_orgs_backlog_does_not_starve_another(grandbo, store):
    for org in ("big", "small"):
        grandbo.org(org, create=True)
    store.put_documents("big", [], "t", [NewWork(INCIDENT_SYNC, f"INC-{n}") for n in range(40)])
    store.put_documents("small", [], "t", [NewWork(INCIDENT_SYNC, "INC-1")])
    claimed = store.claim_work(4, 8, 60)
    assert [w.org_id for w in claimed].count("small") == 1 and len(claimed) == 4
    assert store.claim_work_of("small", INCIDENT_SYNC, ["INC-1"], 8, 60) == []  # leased: not run twice at once


@pytest.mark.org_made_again_at_once
def test_dropping_an_org_drops_its_pending_work(grandbo, store):
    grandbo.org("acme", create=True)
    grandbo.org("beta", create=True)
    for org in ("acme", "beta"):
        store.put_documents(org, [], "t", [NewWork(INCIDENT_SYNC, "INC-1")])
    grandbo.drop_org("acme")
    assert store.work_counts(8) == (1, 0)
    grandbo.org("acme", create=True)
    assert store.org_work_counts("acme", 8) == (0, 0)


def _delivery(count: int) -> bytes:
    """An Alertmanager group of `count` firing alerts: more than a delivery triages before its answer."""
    first = ALERTMANAGER["alerts"][0]
    alerts = [{**first, "fingerprint": f"{n:016x}", "labels": {**first["labels"], "instance": f"redis-{n}:6379"}}
              for n in range(count)]  # fmt: skip
    return json.dumps({**ALERTMANAGER, "alerts": alerts}).encode()


def test_a_large_deliverys_triage_is_recorded_with_it_and_redriven(writer, settings):
    from grandbo.ingest import flow

    memory = writer.org("acme", create=True)
    gate = hold_write_behind(memory)
    seats = memory.reserve_alerts(2)  # the alert pool's threads too
    assert seats is not None
    with seats:
        for _ in range(2):
            seats.submit(lambda: gate.wait(30) and None)
    received = flow.receive(memory, "alertmanager", _delivery(12), {})
    assert len(received) == 12 and all(stored.state == "received" for stored, _ in received)
    assert memory.stats().write_behinds == 12
    with _reopened(settings) as other:
        assert other.redriver.drain().done == 12
        assert {a.state for a in other.org("acme").alerts.recent(50)} == {"recalled"}
    gate.set()
    writer.flush(timeout=60)
    assert memory.stats().write_behinds == 0


def _recalled(memory, alert_id: str) -> int:  # type: ignore[no-untyped-def]
    """How many triage results the alert's log holds."""
    return sum(event["type"] == "alert.recalled" for event in memory.alerts.documents.history(ALERTS, alert_id))


def test_a_triage_that_outlived_its_lease_keeps_no_second_result(settings):
    """A process leased a delivery's triages and stalled mid-triage past its lease; another re-drove them and kept
    their results. When the first wakes, its result is not kept: the result's write completes the work, and the
    work was gone. Before, each alert's result and its work's completion were two commits, and the stalled triage
    wrote its alert's result a second time."""
    from grandbo.ingest import flow

    slow = settings.model_copy(update={
        "write_behind_grace_seconds": 0, "write_behind_poll_seconds": 3600, "write_behind_lease_seconds": 0.01,
        "triage_workers": 1, "work_org_share": 1, "triage_budget_ms": 60_000, "triage_recall_budget_ms": 60_000,
    })  # fmt: skip
    Grandbo.init(settings, embedding="deterministic").close()
    with Grandbo.open(slow, background=True) as writer:
        memory = writer.org("acme", create=True)
        memory.remember({"title": "redis-sessions evicting keys", "body": "maxmemory reached"})
        gate = threading.Event()  # the triage pool's one thread: the writer's triages wait in their recall
        writer.pools.triage.submit("acme", lambda: gate.wait(30) and None)
        received = flow.receive(memory, "alertmanager", _delivery(12), {})
        until(lambda: writer.pools.alerts.stats().by_org.get("acme", (0, 0))[0] >= 1, "a triage started")  # type: ignore[union-attr]
        with _reopened(settings) as other:
            assert other.redriver.drain().done == 12  # the writer's leases ran out: re-driven, results kept
        gate.set()
        writer.flush(timeout=60)
        assert memory.stats().write_behinds == 0
        assert [_recalled(memory, stored.id) for stored, _ in received] == [1] * 12


def test_a_deliverys_triages_are_leased_together_and_a_dropped_ones_lease_is_given_back(grandbo, store):
    memory = grandbo.org("acme", create=True)
    subjects = [f"A-{n}" for n in range(3)]
    store.put_documents("acme", [], "t", [NewWork(ALERT_TRIAGE, subject) for subject in subjects])
    leases = memory.leases(ALERT_TRIAGE, subjects)
    ran: list[list[str]] = []
    assert leases.run("A-0", lambda claimed: ran.append([w.subject for w in claimed]))
    assert ran == [["A-0"]] and memory.stats().write_behinds == 2
    assert store.claim_work_of("acme", ALERT_TRIAGE, subjects, 8, 60) == []  # leased with A-0
    leases.release("A-1")  # its task will not run (the pool closed): another runner may take it at once
    assert [w.subject for w in store.claim_work_of("acme", ALERT_TRIAGE, subjects, 8, 60)] == ["A-1"]


@pytest.mark.parametrize("kind", [ALERT_TRIAGE, "kind.from.a.newer.release"])
def test_work_on_something_gone_or_unknown_does_not_block_the_rest(grandbo, settings, kind):
    memory = grandbo.org("acme", create=True)
    investigate(memory.incidents)
    memory.incidents.close("INC-100")  # done inline (no threads): nothing left
    grandbo._store.put_documents("acme", [], "t", [NewWork(kind, "gone"), NewWork(INCIDENT_SYNC, "INC-100")])
    with _reopened(settings, write_behind_max_attempts=1) as other:
        report = other.redriver.drain()
    assert (report.done, report.failed) == ((2, 0) if kind == ALERT_TRIAGE else (1, 1))
    assert memory.incidents.get("INC-100").status is IncidentStatus.CLOSED


def test_an_edits_learning_is_recorded_with_it_and_redriven(grandbo, settings):
    from tests.fakes import FakeEmbeddings
    from tests.test_learning import EDITS
    from tests.test_learning_write_behind import TONE, _with_llm

    with FakeEmbeddings() as llm:
        llm.behaviour.chat_answers = [TONE]
        tuned = _with_llm(settings, llm.url).model_copy(
            update={"write_behind_grace_seconds": 0, "write_behind_poll_seconds": 3600}
        )
        with Grandbo.open(tuned, background=True) as writer:
            memory = writer.org("acme", create=True)
            gate = threading.Event()
            for _ in range(2):  # the LLM pool's threads never get to the edit: the writer "died"
                memory.defer(lambda: gate.wait(30) and None, waits_on_llm=True)
            draft, edited = EDITS[Category.VOCABULARY][0]
            stored, _ = memory.learning.record_edit(draft, edited, content_type="notice", author="alice")
            assert stored.awaiting_llm and memory.stats().write_behinds == 1
            without_llm = settings.model_copy(update={"write_behind_grace_seconds": 0})
            with Grandbo.open(without_llm) as worker:  # a process without an LLM leaves it (not settled by rules)
                assert worker.redriver.drain().failed == 1
                assert worker.org("acme").learning.signal(stored.id).awaiting_llm
            with Grandbo.open(tuned) as other:
                assert other.redriver.drain().done == 0  # it waits out its retry time...
                assert other.redriver.retry_failed().done == 1  # ...or is given back at once (`grandbo backfill`)
                settled = other.org("acme").learning.signal(stored.id)
            gate.set()
            writer.flush(timeout=60)
            assert memory.learning.signal(stored.id) == settled  # the woken writer found nothing left to do
    assert not settled.awaiting_llm and settled.category is Category.TONE
    assert settled.classified_by == "openai-chat:chat" and len(llm.behaviour.requests) == 1


def test_a_cli_command_on_the_embedded_store_finishes_what_a_dead_process_left(cli):
    from grandbo.config import Settings

    tuned = Settings().model_copy(update={"write_behind_grace_seconds": 0, "write_behind_poll_seconds": 3600})
    with Grandbo.open(tuned, background=True) as writer:
        memory, gate = _closed_while_the_writer_hangs(writer)
        cli("stats", "--org", "acme")  # any command: it re-drives first
        assert memory.incidents.get("INC-100").memory_sync == "done" and memory.stats().write_behinds == 0
        gate.set()


def test_alerts_not_seated_in_this_process_are_not_leased_by_it(writer, monkeypatch):
    """Review 22 L1: a large delivery leased its triages AHEAD at a time over every firing alert, not only those
    handed to its pool. Alerts stored as new though they were read as stored (erased meanwhile: no seat was
    reserved for them) were leased by the seated one's claim and waited out the whole lease (300 s), never run
    here, instead of the re-driver's grace."""
    from grandbo.ingest import flow
    from grandbo.ports import DocumentWrite
    from grandbo.tiers.alerts import Alerts

    memory = writer.org("acme", create=True)
    first = [alert.id for alert, _ in flow.receive(memory, "alertmanager", _delivery(12), {})]
    writer.flush(timeout=60)
    assert memory.stats().write_behinds == 0
    real = Alerts.known

    def known_then_erased(self, alerts):  # type: ignore[no-untyped-def]
        found = real(self, alerts)  # read as stored, then erased by another request before the write
        writer._store.put_documents("acme", [DocumentWrite(ALERTS, a, None, "alert.erased") for a in first[:9]], "t")
        return found

    monkeypatch.setattr(Alerts, "known", known_then_erased)
    received = flow.receive(memory, "alertmanager", _delivery(13), {})  # one more alert: one seat reserved
    monkeypatch.undo()
    assert sum(new for _, new in received) == 10
    writer.flush(timeout=60)  # the seated triage has run
    left = memory.stats().write_behinds
    assert left == 9  # the 9 not seated, left to the re-driver ...
    claimable = writer._store.claim_work_of("acme", ALERT_TRIAGE, [alert.id for alert, _ in received], 16, 60)
    assert len(claimable) == left  # ... and free for it now: none leased by this process


def test_a_flush_waits_for_the_narrations_its_alerts_triages_queued(grandbo, settings):
    """A large delivery's alerts are triaged on the alert pool, each then narrated on the LLM's write-behind pool.
    `flush` waited for the write-behinds, then the LLM's, then the alerts: a triage ending during that last wait
    queued its narration on a pool already waited for, and flush returned with it still to run (fails before:
    none of the 12 narrations asked the LLM by then)."""
    from grandbo.ingest import flow
    from tests.fakes import FakeEmbeddings
    from tests.test_learning_write_behind import _with_llm

    with FakeEmbeddings() as llm:
        tuned = _with_llm(settings, llm.url).model_copy(update={"write_behind_poll_seconds": 3600})
        with Grandbo.open(tuned, background=True) as writer:
            memory = writer.org("acme", create=True)
            received = flow.receive(memory, "alertmanager", _delivery(12), {})
            writer.flush(timeout=60)
            asked = [r for r in llm.behaviour.requests if r["path"].endswith("/chat/completions")]
            assert len(received) == len(asked) == 12 and all(r["answered"] for r in asked)
