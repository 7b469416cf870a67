"""The paths that read the effectiveness ledger beside recall and the analytics page: a runbook's record (`grandbo
runbook stats`, `GET /v1/runbooks`, triage's plan), a withdrawal (the console's vote), the incident close's sync
(`Ledger.results_of`), triage's change records (`Ledger.of_incidents`) and an outcome of a runbook with no entry.
Each read the org's every outcome whole the first time in a process (~2 s of the shared GIL at 100,000 outcomes); now
each reads what it needs from the store. Their answers against the straightforward computation over every outcome read
whole, on both backends."""

from __future__ import annotations

import pytest

from grandbo.errors import NotFoundError, UnreadableRecordError
from grandbo.memory import OrgMemory
from grandbo.names import service_name
from grandbo.ports import DocumentWrite
from grandbo.tiers.effectiveness import Outcome, OutcomeKind, summarize
from grandbo.tiers.ledger import incident_outcome_id
from grandbo.tiers.operations import OUTCOMES, Snapshots
from grandbo.tiers.records import read_record
from tests.plain_ledger import loaded  # noqa: F401  (a fixture)
from tests.test_ledger_recall import RUNBOOKS, _edges
from tests.test_ledger_tally import _fill

SERVICES = [None, "svc-1", "svc-3", "svc-min", "svc-few", "svc-r", "svc-edge", "orders-db", "nowhere", "SVC-MIN", ""]


def _every(memory: OrgMemory) -> dict[str, Outcome]:
    """Every outcome read whole, by document id (those no record can be read from left out), oldest first."""
    read = {}
    for doc in memory._documents.find(OUTCOMES):
        try:
            read[doc.doc_id] = read_record(Outcome, doc, "outcome", given={"org_id": memory.org})
        except UnreadableRecordError:  # left out, as a whole read leaves it out
            continue
    return dict(sorted(read.items(), key=lambda item: (item[1].at, item[0])))


def _closes(memory: OrgMemory) -> None:
    """Incidents closed with a runbook, closed again with another (the first result taken back), reported on by an
    agent too, one result under the id an earlier release wrote (`<incident>-outcome`), and a console's votes."""
    for n, (first, then) in enumerate([("RB-01", "RB-02"), ("RB-03", None), ("RB-30", "RB-30")]):
        incident_id = f"INC-CLOSE-{n}"
        memory.incidents.open(f"incident {n}", services=["svc-1"], incident_id=incident_id)
        memory.incidents.close(incident_id, runbook_used=first, succeeded=True)
        memory.ledger.record(first, "executed", incident_id=incident_id, service="svc-1", comment="agent report")
        if then:
            memory.incidents.close(incident_id, runbook_used=then, succeeded=n % 2 == 0)
    legacy = {"runbook_id": "RB-04", "kind": "succeeded", "incident_id": "INC-CLOSE-1", "service": "svc-1",
              "comment": "close of incident INC-CLOSE-1", "at": "2024-06-01T00:00:00Z"}  # fmt: skip
    memory._documents.put([DocumentWrite(OUTCOMES, "INC-CLOSE-1-outcome", legacy, "outcome.test", ref="RB-04")], "t")
    for runbook_id in ("RB-05", "RB-05", "RB-06"):
        memory.ledger.record(runbook_id, "succeeded", service="svc-2", comment="vote on INC-9")


def _by_runbook(outcomes: list[Outcome]) -> dict[str, list[Outcome]]:
    """Runbook id -> its outcomes, oldest first; the runbooks in the order of their oldest outcome."""
    held: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        held.setdefault(outcome.runbook_id, []).append(outcome)
    return held


def _by_incident(ledger: dict[str, list[Outcome]]) -> dict[str, list[Outcome]]:
    """Incident id -> the outcomes reported for it, in the ledger's order (by runbook, then oldest first)."""
    held: dict[str, list[Outcome]] = {}
    for outcome in (outcome for outcomes in ledger.values() for outcome in outcomes):
        if outcome.incident_id:
            held.setdefault(outcome.incident_id, []).append(outcome)
    return held


def test_records_counted_by_the_store_are_those_of_every_outcome(grandbo, memory, loaded):  # noqa: F811
    _fill(grandbo.org("beta", create=True))  # another org's outcomes, of the same runbook ids, never counted
    _fill(memory)
    _edges(memory)
    _closes(memory)
    outcomes = list(_every(memory).values())
    loaded[0] = 0
    counted = Snapshots().get(memory.org, memory._documents)
    records = {(rid, service): counted.effectiveness(rid, service) for rid in RUNBOOKS for service in SERVICES}
    found = counted.source.counted(RUNBOOKS)
    assert loaded[0] == 0  # no outcome read whole
    for runbook_id in RUNBOOKS:
        mine = [o for o in outcomes if o.runbook_id == runbook_id]
        for service in SERVICES:
            # a runbook's record: on a service named otherwise than outcomes keep it ("SVC-MIN", ""), the empty one
            kept = service is None or (bool(service) and service_name(service) == service)
            assert records[runbook_id, service] == summarize(runbook_id, mine if kept else [], service)
            # triage's plan: the record on the alert's service, named as it came
            assert found[runbook_id].effectiveness(runbook_id, service) == summarize(runbook_id, mine, service)
    assert records["RB-30", "svc-min"].attempts == 4  # " SVC-Min " as an older release stored it
    assert memory.ledger.records(RUNBOOKS) == {rid: summarize(rid, [o for o in outcomes if o.runbook_id == rid])
                                               for rid in RUNBOOKS}  # fmt: skip
    assert memory.ledger.outcomes(["RB-01", "RB-30"]) == [o for o in outcomes if o.runbook_id in ("RB-01", "RB-30")]


def test_withdrawals_closes_and_an_incidents_outcomes_read_what_every_outcome_gives(grandbo, memory):
    _fill(memory)
    _edges(memory)
    _closes(memory)
    every = _every(memory)
    ledger = _by_runbook(list(every.values()))
    with_outcomes = {o.runbook_id for o in every.values()}
    for n in range(3):
        incident_id, marker = f"INC-CLOSE-{n}", f"close of incident INC-CLOSE-{n}"
        also = [f"{incident_id}-outcome"]
        ids = {incident_outcome_id(incident_id, rid, OutcomeKind.SUCCEEDED) for rid in with_outcomes} | set(also)
        plainly = {doc_id: o for doc_id, o in every.items() if doc_id in ids and o.comment == marker}
        assert memory.ledger.results_of(incident_id, marker, also=also) == plainly
        assert len(plainly) == (2 if n == 1 else 1)  # one result per incident, and the one an earlier release wrote
    incidents = ["INC-CLOSE-0", "INC-CLOSE-1", "INC-HELD", "INC-LIVE", "INC-7", "INC-none"]
    by_incident = _by_incident(ledger)
    assert memory.ledger.of_incidents(incidents) == {i: by_incident[i] for i in incidents if i in by_incident}
    assert len(memory.ledger.of_incidents(["INC-HELD"])["INC-HELD"]) > 10  # of many runbooks
    assert [o.runbook_id for o in memory.ledger.marked("RB-05", "vote on INC-9")] == ["RB-05", "RB-05"]
    assert memory.ledger.withdraw("RB-05", "vote on INC-9") == 2 and memory.ledger.withdraw("RB-02", "nothing") == 0
    assert not memory.ledger.marked("RB-05", "vote on INC-9") and memory.ledger.marked("RB-06", "vote on INC-9")


def test_a_fresh_process_reads_no_outcome_whole_for_records_votes_closes_triage_or_unknown_runbooks(
    grandbo,
    memory,
    loaded,  # noqa: F811
):
    _fill(memory)
    _edges(memory)
    memory.remember({"title": "payments pool exhausted", "body": "The payments runbook lives in the wiki.",
                     "kind": "finding", "meta": {"runbook_id": "RB-wiki"}})  # fmt: skip
    memory.incidents.open("payments down", services=["svc-1"], incident_id="INC-FRESH")
    held = len(_every(memory))

    def fresh() -> OrgMemory:  # the org as a new process finds it: no snapshot of its ledger
        grandbo._snapshots.forget(memory.org)
        loaded[0] = 0
        return grandbo.org(memory.org)

    steps = {
        "record": lambda m: m.ledger.effectiveness("RB-01", "svc-1"),
        "a page of records": lambda m: m.ledger.records(RUNBOOKS),
        "vote": lambda m: m.ledger.record("RB-02", "succeeded", service="svc-2", comment="vote on INC-1"),
        "undo": lambda m: (m.ledger.marked("RB-02", "vote on INC-1"), m.ledger.withdraw("RB-02", "vote on INC-1")),
        "close": lambda m: m.incidents.close("INC-FRESH", runbook_used="RB-03", succeeded=True),
        "close again": lambda m: m.incidents.close("INC-FRESH", runbook_used="RB-04", succeeded=False),
        "no entry": lambda m: m.ledger.record("RB-wiki", "succeeded", service="svc-1"),
        "triage": lambda m: m.triage({"summary": "check and mitigate svc-1", "service": "svc-1"}, narrate=False),
        "change records": lambda m: m.ledger.of_incidents(["INC-HELD", "INC-FRESH"]),
    }
    for name, step in steps.items():
        step(fresh())
        assert (name, loaded[0] <= 40) == (name, True), loaded[0]  # the old paths loaded all `held`
    with pytest.raises(NotFoundError, match="RB-0"):
        fresh().ledger.record("RB-0x", "succeeded")  # the closest ids named, from the store's counts
    assert loaded[0] == 0 and held > 400
