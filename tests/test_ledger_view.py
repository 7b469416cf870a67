"""The ledger as recall and the runbook records read it (`Snapshot.effectiveness`, `used_on`, `win_rates`): counted by
the store, the counts of the runbooks no write named kept from one snapshot to the next (`LedgerSource.carried`),
equal to those a fresh process counts and to the plain computation over every outcome, and not read once per runbook
asked for (probe 19, F4 and F5)."""

from __future__ import annotations

import random
import statistics
from datetime import UTC, datetime, timedelta

import pytest

from grandbo.mcp import tools
from grandbo.ports import DocumentWrite
from grandbo.tiers.effectiveness import Outcome, OutcomeKind, summarize, trend
from grandbo.tiers.operations import OUTCOMES, Snapshots
from tests.plain_ledger import every_outcome
from tests.serving import serving

RUNBOOKS = [f"RB-{n}" for n in range(5)]
SERVICES = ["auth", "billing", "search", None]
START = datetime(2026, 1, 1, tzinfo=UTC)


def _outcome(rng: random.Random, runbook_id: str | None = None) -> Outcome:
    return Outcome(
        org_id="acme", runbook_id=runbook_id or rng.choice(RUNBOOKS), kind=rng.choice(list(OutcomeKind)),
        service=rng.choice(SERVICES), time_to_mitigate_s=rng.choice([None, 60.0, 600.0, 3600.0]),
        rating=rng.choice([1, -1]), comment=rng.choice(["", "vote", "close"]),
        at=START + timedelta(minutes=rng.randrange(40)),  # few distinct times: ties ordered by id
    )  # fmt: skip


def _write(memory, doc_id: str, outcome: Outcome | None) -> None:
    data = None if outcome is None else outcome.model_dump(mode="json", exclude={"seq", "org_id"})
    ref = outcome.runbook_id if outcome is not None else None
    memory._documents.put([DocumentWrite(OUTCOMES, doc_id, data, "outcome.test", ref=ref)], "test")


def test_the_kept_snapshot_counts_what_a_fresh_one_counts_after_random_writes_on_the_store(grandbo):
    """Through the store: every step's snapshot (the counts it kept from before a write, and those it counts again)
    gives the records, services and win rates a fresh process counts, and the records of every outcome read plainly."""
    memory = grandbo.org("acme", create=True)
    memory.incidents.open("login failures", services=["payments"], incident_id="INC-1")
    memory.incidents.add_finding("INC-1", "token expired", status="corroborated", runbook_id="RB-1")
    rng, ids = random.Random(5), []
    runbooks = [*RUNBOOKS, "RB-new"]
    for step in range(14):
        snapshot = grandbo._snapshots.get("acme", memory._documents)
        for runbook_id in runbooks:  # counted before the write: kept where no write named the runbook
            snapshot.used_on(runbook_id)
            for service in SERVICES:
                snapshot.effectiveness(runbook_id, service)
        for _ in range(rng.choice([1, 2, 19])):
            roll = rng.random()
            if ids and roll < 0.2:
                _write(memory, ids.pop(rng.randrange(len(ids))), None)
            elif ids and roll < 0.5:
                _write(memory, rng.choice(ids), _outcome(rng, rng.choice(runbooks)))  # changed or moved
            elif roll < 0.55:
                ids.append(f"bad-{step}")
                memory._documents.put([DocumentWrite(OUTCOMES, ids[-1], {"runbook_id": "RB-1", "kind": "?"},
                                                     "outcome.test", ref="RB-1")], "test")  # fmt: skip
            else:
                ids.append(f"o-{step}-{rng.randrange(10**6)}")
                _write(memory, ids[-1], _outcome(rng))
        if step == 9:
            _write(memory, "secret", _outcome(rng, "RB-2").model_copy(update={"service": "zanzibar"}))
            memory.erasure.purge_text("zanzibar", reason="a secret in a service's name", actor="test")
        kept = grandbo._snapshots.get("acme", grandbo.org("acme")._documents)
        fresh = Snapshots().get("acme", memory._documents)
        outcomes = every_outcome(memory)
        assert "payments" in kept.used_on("RB-1")  # the incident's service, after the outcomes'
        for runbook_id in runbooks:
            mine = [o for o in outcomes if o.runbook_id == runbook_id]
            assert kept.used_on(runbook_id) == fresh.used_on(runbook_id)
            for service in SERVICES:
                assert kept.effectiveness(runbook_id, service) == fresh.effectiveness(runbook_id, service)
                assert kept.effectiveness(runbook_id, service) == summarize(runbook_id, mine, service)
        assert kept.win_rates(runbooks, ["auth"]) == fresh.win_rates(runbooks, ["auth"])
    assert not any("zanzibar" in kept.used_on(runbook_id) for runbook_id in runbooks)


def test_one_thumbs_up_leaves_the_other_runbooks_counts_as_they_were(grandbo):
    """After one outcome the next snapshot counted every runbook again and read every incident's citations again:
    only the runbook written is counted again."""
    memory = grandbo.org("acme", create=True)
    for runbook_id in ("RB-1", "RB-2"):
        memory.runbooks.add(runbook_id, f"rotate the token {runbook_id}", ["rotate it"])
    memory.ledger.import_outcomes([{"runbook_id": f"RB-{1 + n % 2}", "kind": "succeeded", "service": "auth",
                                    "at": f"2026-11-0{1 + n % 9}T10:00:00Z"} for n in range(40)])  # fmt: skip
    memory.incidents.open("login failures", services=["billing"], incident_id="INC-1")
    before = grandbo._snapshots.get("acme", memory._documents)
    untouched, written = before.source.counted(["RB-2", "RB-1"]).values()
    memory.ledger.record("RB-1", "rated", rating=1)
    after = grandbo._snapshots.get("acme", grandbo.org("acme")._documents)
    assert after.source is not before.source and after.source.counted(["RB-2"])["RB-2"] is untouched  # kept
    assert after.effectiveness("RB-1").thumbs_up == written.effectiveness("RB-1").thumbs_up + 1  # counted again
    assert after._cited is before._cited  # the incidents' citations: not read again for an outcome


@pytest.fixture
def counted(store, monkeypatch):
    """The outcome documents the store reads whole (`find_documents`) and the reads of what changed since."""
    reads = {"find": 0, "changed": 0}
    find, changed = type(store).find_documents, type(store).changed_documents

    def finding(self, org_id, collection, *args, **kwargs):  # type: ignore[no-untyped-def]
        reads["find"] += collection == OUTCOMES
        return find(self, org_id, collection, *args, **kwargs)

    def changing(self, org_id, collection, *args, **kwargs):  # type: ignore[no-untyped-def]
        reads["changed"] += collection == OUTCOMES
        return changed(self, org_id, collection, *args, **kwargs)

    monkeypatch.setattr(type(store), "find_documents", finding)
    monkeypatch.setattr(type(store), "changed_documents", changing)
    return reads


def test_listing_runbooks_reads_no_outcome_from_the_store_per_runbook(grandbo, counted):
    """`GET /v1/runbooks` read and parsed every outcome of each runbook listed, on every request (20 runbooks of 5,000
    outcomes: 1.37 s a page, 8.5 s at limit=500); so did `GET /v1/runbooks/{id}` and MCP's get_runbook. The
    records come from the org's snapshot: the ledger is read once, then only what a write changed."""
    memory = grandbo.org("acme", create=True)
    for n in range(20):
        memory.runbooks.add(f"RB-{n}", f"restart the pods {n}", ["restart"])
    memory.ledger.import_outcomes([{"runbook_id": f"RB-{n % 20}", "kind": "succeeded" if n % 3 else "failed",
                                    "service": "auth", "at": f"2026-11-0{1 + n % 9}T10:00:00Z"}
                                   for n in range(200)])  # fmt: skip
    key = memory.keys.create("write", name="lister")[1]
    with serving(grandbo) as served, served.client(key) as client:
        first = client.get("/v1/runbooks", params={"limit": 20}).json()["items"]
        assert counted["find"] <= 1  # the ledger read once, for every runbook
        counted["find"] = 0
        again = client.get("/v1/runbooks", params={"limit": 20}).json()["items"]
        one = client.get("/v1/runbooks/RB-3", params={"service": "auth"}).json()["effectiveness"]
        assert tools.get_runbook(grandbo.org("acme"), "RB-3").effectiveness.attempts == 10
        assert counted == {"find": 0, "changed": 0}  # was 22: each runbook's outcomes, each time
        assert again == first and len(first) == 20 and one["attempts"] == 10
        assert client.post("/v1/runbooks/RB-3/feedback", json={"rating": 1}).status_code == 201
        listed = {item["runbook"]["id"]: item["effectiveness"] for item in client.get("/v1/runbooks").json()["items"]}
        assert listed["RB-3"]["thumbs_up"] == 1 and counted == {"find": 0, "changed": 1}  # what was written


def _summarized_by_definition(runbook_id: str, outcomes: list[Outcome], service: str | None) -> dict[str, object]:
    """`summarize` as it was written before it became one pass (six passes over the outcomes)."""
    relevant = [o for o in outcomes if o.runbook_id == runbook_id and (service is None or o.service == service)]
    durations = [o.time_to_mitigate_s for o in relevant if o.kind is OutcomeKind.SUCCEEDED and o.time_to_mitigate_s]
    return {
        "recommended": sum(1 for o in relevant if o.kind is OutcomeKind.RECOMMENDED),
        "successes": sum(1 for o in relevant if o.kind is OutcomeKind.SUCCEEDED),
        "attempts": sum(1 for o in relevant if o.kind in (OutcomeKind.SUCCEEDED, OutcomeKind.FAILED)),
        "mttr_median_s": statistics.median(durations) if durations else None,
        "mttr_trend": trend(durations),
        "thumbs_up": sum(1 for o in relevant if o.kind is OutcomeKind.RATED and (o.rating or 0) > 0),
        "thumbs_down": sum(1 for o in relevant if o.kind is OutcomeKind.RATED and (o.rating or 0) < 0),
    }


def test_a_record_summarized_in_one_pass_is_the_one_of_its_definition():
    rng = random.Random(7)
    for size in (0, 1, 3, 4, 9, 200):
        outcomes = [_outcome(rng).model_copy(update={"rating": rng.choice([1, -1, 0, None])}) for _ in range(size)]
        for runbook_id in RUNBOOKS[:3]:
            for service in SERVICES:
                record = summarize(runbook_id, outcomes, service).model_dump()
                expected = _summarized_by_definition(runbook_id, outcomes, service)
                assert {key: record[key] for key in expected} == expected
