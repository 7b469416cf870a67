"""The ledger as recall and the runbook records read it (`tiers/ledger_view.py`, `Snapshot.outcomes`): brought up to
date with only the outcomes written since, equal to the ledger read whole, and read from the store once per ledger
change, not once per runbook asked for (probe 19, F4 and F5)."""

from __future__ import annotations

import random
import statistics
from datetime import UTC, datetime, timedelta

import pytest

from grandbo.mcp import tools
from grandbo.ports import DocumentWrite
from grandbo.tiers.effectiveness import Outcome, OutcomeKind, summarize, trend
from grandbo.tiers.ledger_view import FEW, LedgerView
from grandbo.tiers.operations import OUTCOMES, Snapshots
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


def _same(view: LedgerView, whole: LedgerView) -> None:
    """Equal as a reader sees them, the runbooks' order included."""
    assert list(view.by_runbook.items()) == list(whole.by_runbook.items())
    assert list(view.keys.items()) == list(whole.keys.items())
    assert {r: list(s) for r, s in view.services.items()} == {r: list(s) for r, s in whole.services.items()}
    assert view.where == whole.where


def test_placing_what_changed_gives_the_view_made_whole_for_any_sequence_of_writes():
    """Adds, changes (another time, another service), moves to another runbook, deletions, a runbook emptied, the
    same change read twice, and batches past FEW (merged, not placed one by one): each step equals `made`."""
    rng = random.Random(19)
    held: dict[str, Outcome] = {f"o{n}": _outcome(rng) for n in range(60)}
    view = LedgerView.made(held.items())
    for step in range(400):
        changed: dict[str, Outcome] = {}
        gone: list[str] = []
        for _ in range(rng.choice([1, 1, 2, 3, FEW + 5])):
            doc_id, roll = rng.choice([*held, f"o{rng.randrange(10_000)}"]), rng.random()
            if roll < 0.25 and doc_id in held:
                gone.append(doc_id)
            elif roll < 0.35:
                changed[doc_id] = _outcome(rng, "RB-new")  # a runbook that was not there, or moved to it
            elif roll < 0.5:  # newer than every outcome held (a thumbs-up)
                changed[doc_id] = _outcome(rng).model_copy(update={"at": START + timedelta(days=1, seconds=step)})
            else:
                changed[doc_id] = _outcome(rng)
        if step % 50 == 49:  # a runbook emptied at once
            emptied = rng.choice(RUNBOOKS)
            gone += [doc_id for doc_id, outcome in held.items() if outcome.runbook_id == emptied]
        before = dict(view.by_runbook)
        again = rng.random() < 0.2  # a write that landed between the stamp and the read is read twice
        view, touched = view.applied(changed, gone)
        if again:
            view, _ = view.applied(changed, [])
        moved = {held[d].runbook_id for d in [*gone, *changed] if d in held} | {o.runbook_id for o in changed.values()}
        assert touched == moved  # whose summaries are stale
        for doc_id in gone:
            held.pop(doc_id, None)
        held.update(changed)
        _same(view, LedgerView.made(held.items()))
        assert all(view.get(doc_id) == outcome for doc_id, outcome in held.items())  # by id, in one look-up
        assert all(view.get(doc_id) is None for doc_id in gone if doc_id not in held)
        for runbook_id, lines in view.by_runbook.items():
            if runbook_id not in moved:
                assert lines is before.get(runbook_id, lines)  # shared with the view before, not made again
    asked = sorted((o.at, doc_id, o) for doc_id, o in held.items() if o.runbook_id in ("RB-1", "RB-3"))
    assert view.of(["RB-3", "RB-1", "RB-3"]) == [o for _, _, o in asked]  # merged in time order, ties by id


def _write(memory, doc_id: str, outcome: Outcome | None) -> None:
    data = None if outcome is None else outcome.model_dump(mode="json", exclude={"seq", "org_id"})
    ref = outcome.runbook_id if outcome is not None else None
    memory._documents.put([DocumentWrite(OUTCOMES, doc_id, data, "outcome.test", ref=ref)], "test")


def test_the_kept_snapshot_equals_one_made_whole_after_random_writes_on_the_store(grandbo, monkeypatch):
    """Through the store: every step's snapshot (its outcomes, their services, the summaries it kept from before) is
    the one a fresh process reads whole; only the first read and the purge read the ledger whole."""
    memory = grandbo.org("acme", create=True)
    memory.incidents.open("login failures", services=["payments"], incident_id="INC-1")
    memory.incidents.add_finding("INC-1", "token expired", status="corroborated", runbook_id="RB-1")
    made, whole = [], LedgerView.made
    monkeypatch.setattr(LedgerView, "made", classmethod(lambda cls, items: made.append(1) or whole(items)))
    rng, ids = random.Random(5), []
    for step in range(14):
        snapshot = grandbo._snapshots.get("acme", memory._documents)
        for runbook_id in [*RUNBOOKS, "RB-new"]:  # summaries kept from before the write, where still right
            for service in SERVICES:
                snapshot.effectiveness(runbook_id, service)
        for _ in range(rng.choice([1, 2, FEW + 3])):
            roll = rng.random()
            if ids and roll < 0.2:
                _write(memory, ids.pop(rng.randrange(len(ids))), None)
            elif ids and roll < 0.5:
                _write(memory, rng.choice(ids), _outcome(rng, rng.choice([*RUNBOOKS, "RB-new"])))  # changed or moved
            elif roll < 0.55:
                ids.append(f"bad-{step}")
                memory._documents.put([DocumentWrite(OUTCOMES, ids[-1], {"runbook_id": "RB-1", "kind": "?"},
                                                     "outcome.test", ref="RB-1")], "test")  # fmt: skip
            else:
                ids.append(f"o-{step}-{rng.randrange(10**6)}")
                _write(memory, ids[-1], _outcome(rng))
        if step == 9:
            _write(memory, "secret", _outcome(rng, "RB-2").model_copy(update={"comment": "zanzibar token"}))
            memory.erasure.purge_text("zanzibar", reason="a secret in a comment", actor="test")
        count = len(made)
        kept = grandbo._snapshots.get("acme", grandbo.org("acme")._documents)
        view = kept.ledger  # read when first asked for: whole only after the purge (it rewrites documents in place)
        assert len(made) == count + (step in (0, 9))  # a record is counted by the store: first read whole here
        fresh = Snapshots().get("acme", memory._documents)
        _same(view, fresh.ledger)
        assert list(kept.services_used.items()) == list(fresh.services_used.items())
        assert "payments" in kept.used_on("RB-1")  # the incident's service, after the outcomes'
        for runbook_id in [*RUNBOOKS, "RB-new"]:
            for service in SERVICES:
                assert kept.effectiveness(runbook_id, service) == fresh.effectiveness(runbook_id, service)
    assert not any("zanzibar" in o.comment for lines in kept.outcomes.values() for o in lines)


def test_one_thumbs_up_leaves_the_other_runbooks_and_their_summaries_as_they_were(grandbo):
    """After one outcome the next snapshot sorted and grouped every outcome again, summarized every runbook again
    and read every incident's citations again (328 ms of the next recall at 100,000 outcomes): only the runbook
    written is placed and summarized again."""
    memory = grandbo.org("acme", create=True)
    for runbook_id in ("RB-1", "RB-2"):
        memory.runbooks.add(runbook_id, f"rotate the token {runbook_id}", ["rotate it"])
    memory.ledger.import_outcomes([{"runbook_id": f"RB-{1 + n % 2}", "kind": "succeeded", "service": "auth",
                                    "at": f"2026-11-0{1 + n % 9}T10:00:00Z"} for n in range(40)])  # fmt: skip
    memory.incidents.open("login failures", services=["billing"], incident_id="INC-1")
    before = grandbo._snapshots.get("acme", memory._documents)
    assert before.ledger.by_runbook  # read whole (records are counted by the store until it is)
    untouched = before.effectiveness("RB-2"), before.effectiveness("RB-2", "auth"), before.effectiveness("RB-1")
    memory.ledger.record("RB-1", "rated", rating=1)
    after = grandbo._snapshots.get("acme", grandbo.org("acme")._documents)
    assert after.outcomes["RB-2"] is before.outcomes["RB-2"]  # not regrouped
    assert after.effectiveness("RB-2") is untouched[0] and after.effectiveness("RB-2", "auth") is untouched[1]
    assert after.effectiveness("RB-1").thumbs_up == untouched[2].thumbs_up + 1  # the runbook written: again
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
