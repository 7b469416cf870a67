"""Recall's win rates and runbooks' services counted by the store for the runbooks among its candidates
(`tiers.ledger_source`), against the straightforward computation over every outcome read whole, on both backends:
the same rates and explanations, to the bit. The first
recall in a process read the org's whole ledger (1.6 s alone at 100,000 outcomes, 3.2-6.8 s at load 8, holding the
GIL); an outcome written or erased shows in the next recall: a new one added to its runbook's kept results, and
only the runbooks another write named counted again."""

from __future__ import annotations

from datetime import UTC, datetime

from grandbo.memory import OrgMemory
from grandbo.ports import DocumentWrite
from grandbo.service import Grandbo
from grandbo.tiers.operations import OUTCOMES, Snapshot, Snapshots
from grandbo.tiers.topology import Service
from tests.plain_ledger import every_outcome, loaded, used_plainly, win_rates_plainly  # noqa: F401  (a fixture)
from tests.test_ledger_tally import _fill

RUNBOOKS = [f"RB-{n:02d}" for n in range(24)] + ["RB-30", "RB-31", "RB-never", "RB-unknown"]
SITUATIONS = [(), ("svc-1",), ("svc-3", "svc-1"), ("svc-min",), ("svc-few", "svc-min"), ("svc-r",), ("SVC-MIN",),
              ("svc-edge", "orders-db"), ("nowhere",)]  # fmt: skip
NOW = datetime(2025, 6, 1, tzinfo=UTC)


def _edges(memory: OrgMemory) -> None:
    """Beyond `_fill`: a runbook with exactly MIN_SERVICE_RESULTS results on one service and one fewer on another, one
    recommended and rated only (used, never tried), a service stored as an older release wrote it (upper case, spaces
    around), outcomes no record can be read from, a result moved to another runbook, and a runbook only cited."""
    for runbook_id in ("RB-30", "RB-31", "RB-never"):
        memory.runbooks.add(runbook_id, f"Runbook {runbook_id}", ["check", "mitigate"])
    at = "2024-03-01T10:00:00Z"
    results = [("svc-min", "succeeded"), ("svc-min", "failed"), ("svc-few", "succeeded"), ("svc-few", "failed"),
               ("svc-min", "succeeded"), ("", "succeeded")]  # fmt: skip
    memory.ledger.import_outcomes([{"runbook_id": "RB-30", "kind": kind, "service": service, "at": at}
                                   for service, kind in results], prefix="edge")  # fmt: skip
    memory.ledger.import_outcomes([{"runbook_id": "RB-31", "kind": kind, "service": "svc-r", "at": at, "rating": 1}
                                   for kind in ("recommended", "rated", "executed")], prefix="used")  # fmt: skip
    raw = [("raw-1", {"runbook_id": "RB-30", "kind": " Succeeded ", "service": " SVC-Min ", "at": at}),
           ("raw-2", {"runbook_id": "RB-30", "kind": "?", "service": "svc-min", "at": at}),
           ("raw-3", {"kind": "failed", "service": "svc-min", "at": at})]  # fmt: skip
    memory._documents.put([DocumentWrite(OUTCOMES, doc_id, data, "outcome.test", ref="RB-30")
                           for doc_id, data in raw], "test")  # fmt: skip
    moved = {"kind": "failed", "service": "svc-few", "at": at}
    memory.ledger.import_outcomes([{**moved, "runbook_id": "RB-30"}], prefix="moved")
    memory.ledger.import_outcomes([{**moved, "runbook_id": "RB-31"}], prefix="moved")  # the same id, another runbook
    memory.incidents.open("cited only", services=["billing"], incident_id="INC-CITED")
    memory.incidents.close("INC-CITED", runbook_used="RB-never")


def _check(memory: OrgMemory) -> Snapshot:
    """The counted path's rates and services against the plain computation over every outcome; the snapshot."""
    counted = Snapshots().get(memory.org, memory._documents)
    rates = {services: counted.win_rates(RUNBOOKS, services) for services in SITUATIONS}
    used = {runbook_id: counted.used_on(runbook_id) for runbook_id in RUNBOOKS}
    outcomes = every_outcome(memory)
    for services in SITUATIONS:
        assert rates[services] == win_rates_plainly(outcomes, RUNBOOKS, services)
    for runbook_id in RUNBOOKS:
        cited = list(counted.cited.get(runbook_id, {}))
        assert len(used[runbook_id]) == len(set(used[runbook_id]))
        assert set(used[runbook_id]) == used_plainly(outcomes, runbook_id, cited)
    return counted


def test_win_rates_counted_by_the_store_are_those_of_every_outcome(grandbo, memory):
    _fill(grandbo.org("beta", create=True))  # another org's outcomes, of the same runbook ids, never counted
    _edges(grandbo.org("beta"))
    _fill(memory)
    _edges(memory)
    counted = _check(memory)
    rates = counted.win_rates(RUNBOOKS, ("svc-few", "svc-min"))  # svc-few: 2 results; svc-min: 3 and the one stored
    assert rates["RB-30"][1].startswith("RB-30: 3/4 succeeded (svc-min), win rate 0.67 [")  # as " SVC-Min "
    assert counted.win_rates(["RB-30"], ("svc-few",))["RB-30"][1].startswith("RB-30: 5/7 succeeded (all services)")
    assert counted.win_rates(["RB-31"])["RB-31"][1].startswith("RB-31: 0/1 succeeded (all services), win rate 0.33 [")
    assert counted.used_on("RB-31") == ["svc-few", "svc-r"] and counted.used_on("RB-never") == ["billing"]
    many = [*(f"RB-none-{n}" for n in range(1200)), *RUNBOOKS]  # more refs than one statement's parameters
    rates = Snapshots().get(memory.org, memory._documents).win_rates(many, ("svc-1",))
    assert {runbook_id: rates[runbook_id] for runbook_id in RUNBOOKS} == counted.win_rates(RUNBOOKS, ("svc-1",))
    assert rates["RB-none-7"] == (0.5, "RB-none-7: never tried (prior)")


def test_an_outcome_written_withdrawn_moved_or_erased_shows_in_the_next_recall(grandbo, memory, store, monkeypatch):
    _fill(memory)
    _edges(memory)
    asked: list[list[str]] = []  # the runbooks of each count of the store
    tally = type(store).tally_documents

    def counting(self, org_id, collection, by, match, values, refs=None):  # type: ignore[no-untyped-def]
        asked.append(sorted(refs or []))
        return tally(self, org_id, collection, by, match, values, refs)

    monkeypatch.setattr(type(store), "tally_documents", counting)
    snapshots = Snapshots()  # a fresh process's: the writes above counted into the open store's

    def rates(services: tuple[str, ...] = ("svc-1",)) -> dict[str, tuple[float, str]]:
        return snapshots.get(memory.org, grandbo.org("acme")._documents).win_rates(RUNBOOKS, services)

    before = rates()
    assert asked == [sorted(RUNBOOKS)]
    held = snapshots.get(memory.org, memory._documents).source
    memory.ledger.record("RB-01", "succeeded", service="svc-1", incident_id="INC-NEW")
    after = rates()
    assert asked == [sorted(RUNBOOKS)]  # the new outcome added to the runbook's kept results: none counted again
    assert after == win_rates_plainly(every_outcome(memory), RUNBOOKS, ("svc-1",))
    assert after["RB-02"] == before["RB-02"] and after["RB-01"] != before["RB-01"]
    kept = snapshots.get(memory.org, memory._documents).source
    assert kept is not held and kept.tried(["RB-02"])["RB-02"] is held.tried(["RB-02"])["RB-02"]
    memory.ledger.record("RB-02", "rated", rating=-1, outcome_id="vote-77")
    memory._documents.put([DocumentWrite(OUTCOMES, "vote-77", None, "outcome.withdrawn", ref="RB-02")], "test")
    assert (
        rates(("svc-1", "svc-2")) == win_rates_plainly(every_outcome(memory), RUNBOOKS, ("svc-1", "svc-2"))
        and len(asked) == 1
    )
    memory.ledger.record("RB-02", "failed", service="svc-2", incident_id="INC-NEW")  # another runbook's result...
    memory.ledger.record("RB-03", "succeeded", service="svc-2", incident_id="INC-NEW")  # ... and a new one, both
    assert rates(("svc-2",)) == win_rates_plainly(every_outcome(memory), RUNBOOKS, ("svc-2",)) and len(asked) == 1
    memory.ledger.record("RB-02", "succeeded", service="svc-2", incident_id="INC-NEW")  # a result replaced
    rates()
    assert asked[-1] == ["RB-02"]  # one written before: counted again
    memory.ledger.import_outcomes([{"runbook_id": "RB-05", "kind": "failed", "service": "svc-few",
                                    "at": "2024-05-01T00:00:00Z"}], prefix="moved")  # fmt: skip
    rates(("svc-few",))
    assert asked[-1] == ["RB-05", "RB-30", "RB-31"]  # where it was once, and where it is
    counted = _check(memory)
    assert "svc-few" in counted.used_on("RB-05") and "svc-3" in counted.used_on("RB-03")
    memory.erasure.purge_text("svc-3", reason="a service's name is a customer's", actor="test")
    assert "svc-3" not in snapshots.get(memory.org, memory._documents).used_on("RB-03")
    assert asked[-1] == ["RB-03"]  # after an erasure every runbook is counted again, as asked
    _check(memory)


def test_a_first_recall_in_a_fresh_process_reads_no_outcome_whole(settings, loaded):  # noqa: F811
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        _fill(grandbo.org("acme", create=True))
        _edges(grandbo.org("acme"))
        grandbo.org("acme").catalog.put([Service(name="svc-min", depends_on=["svc-1"]), Service(name="svc-1"),
                                         Service(name="billing", depends_on=["svc-min"])])  # fmt: skip
    loaded[0] = 0
    topic, services = "check and mitigate with the runbook on svc-min", ["svc-min"]
    with Grandbo.open(settings) as fresh:
        answer = fresh.org("acme").recall(topic, k=40, services=services, now=NOW)
        assert loaded[0] == 0  # the old recall read every outcome into the org's snapshot
        notes = {hit.entry.id: hit.why.model_dump()["rerank"] for hit in answer.hits}
        assert notes["RB-30"]["effectiveness"]["note"].startswith("RB-30: 3/4 succeeded (svc-min)")
        assert notes["RB-30"]["service"]["note"] == "same service"  # used there (its outcomes, as " SVC-Min " too)
        assert notes["RB-01"]["service"]["note"] == "direct dependency"  # used on svc-1
        assert notes["RB-02"]["service"]["note"] == "unrelated service"
