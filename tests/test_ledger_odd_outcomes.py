"""Outcome documents as an older release (or a hand-edited export) left them, written as raw rows, one odd and one good
outcome a runbook: the ledger counted by the store (the analytics page's `Ledger.tally`, the runbook records, recall's
candidate counts) against the ledger read whole (`Outcome` of each document), on both backends, for rows written
before migration 33 (flagged by it) and after (flagged as written). The counts took an outcome `Outcome` refuses (no
time, a rating "up", a service 5: 1/2 against 1/1), a numeric service counted on Postgres only (review 24b MEDIUM 4),
the analytics tally dropped " Succeeded " and kept a success's service unnormalized; odd values `Outcome` reads (a
time with a space, a rating "1") must count too."""

from __future__ import annotations

import json
from typing import Any

import pytest

from grandbo import Grandbo
from grandbo.memory import OrgMemory
from grandbo.store.sql.odd_outcomes import COLUMN, OUTCOME_SHAPES
from grandbo.tiers.effectiveness import Outcome, OutcomeKind, summarize
from grandbo.tiers.operations import OUTCOMES, Snapshots
from tests.conftest import undo_migration
from tests.plain_ledger import every_outcome, used_plainly, win_rates_plainly

AT = "2024-03-01T10:00:00Z"
GOOD: dict[str, Any] = {"kind": "succeeded", "service": "svc-a", "at": AT, "time_to_mitigate_s": 60}
# (case, what differs from GOOD), each written beside one GOOD outcome of its own runbook
REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("no-at", {"at": None}),
    ("at-words", {"at": "yesterday"}),
    ("at-no-day", {"at": "2023-02-29T10:00:00Z"}),
    ("at-april-31", {"at": "2024-04-31T10:00:00+05:30"}),
    ("at-century", {"at": "2100-02-29"}),
    ("at-month-13", {"at": "2024-13-01"}),
    ("at-hour-24", {"at": "2024-03-01T24:00:00Z"}),
    ("at-offset-24", {"at": "2024-03-01T10:00:00+24:00"}),
    ("at-before-year-1", {"at": "0001-01-01T00:00:00+01:00"}),
    ("at-true", {"at": True}),
    ("ttm-negative", {"time_to_mitigate_s": -5}),
    ("ttm-words", {"time_to_mitigate_s": "fast"}),
    ("rating-up", {"kind": "rated", "rating": "up"}),
    ("rating-half", {"kind": "rated", "rating": 0.5}),
    ("service-number", {"service": 5}),
    ("service-list", {"service": ["svc-a"]}),
    ("incident-number", {"incident_id": 7}),
    ("comment-null", {"comment": None}),
    ("seq-null", {"seq": None}),
    ("kind-unknown", {"kind": "?"}),
    ("runbook-number", {"runbook_id": 12}),
]
READ: list[tuple[str, dict[str, Any]]] = [  # `Outcome` reads these: counted by both
    ("at-date", {"at": "2024-02-29"}),
    ("at-leap-century", {"at": "2000-02-29T23:59:59.999999Z"}),
    ("at-no-zone", {"at": "2024-03-01T10:00:00.123456"}),
    ("at-offset-2359", {"at": "2024-03-01T10:00:00-23:59"}),
    ("at-space", {"at": "2024-03-01 10:00:00Z"}),
    ("at-tenth", {"at": "2024-03-01T10:00:00.5+02:00"}),
    ("at-year-9999", {"at": "9999-12-31T00:00:00Z"}),
    ("at-seconds", {"at": 1700000000}),
    ("ttm-text", {"time_to_mitigate_s": "90.5"}),
    ("ttm-zero", {"time_to_mitigate_s": 0}),
    ("ttm-true", {"time_to_mitigate_s": True}),
    ("rating-text", {"kind": "rated", "rating": "1"}),
    ("rating-float", {"kind": "rated", "rating": -1.0}),
    ("rating-big", {"kind": "rated", "rating": 7}),
    ("kind-spaced", {"kind": " Failed "}),
    ("succeeded-spaced", {"kind": " Succeeded "}),
    ("service-spaced", {"service": " SVC-A "}),
    ("service-empty", {"service": ""}),
    ("seq-number", {"seq": 3}),
]
CASES = REFUSED + READ


def _rows(raw: Any, backend: str, org: str) -> list[str]:
    """Every case's two outcomes written as raw rows of `documents` (no model, no flag of ours), as an older release
    wrote them; their runbooks."""
    runbooks = []
    data = "%s" if backend == "sqlite" else "%s::jsonb"
    for number, (case, changed) in enumerate(CASES):
        runbook_id = f"RB-{case}"
        odd = {"runbook_id": runbook_id, **GOOD, "incident_id": f"INC-{case}", **changed}
        odd = {key: value for key, value in odd.items() if not (key == "at" and value is None)}
        for doc_id, held in ((f"good-{case}", {"runbook_id": runbook_id, **GOOD}), (f"odd-{case}", odd)):
            raw(f"INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
                f"VALUES (%s, %s, %s, %s, {data}, 1, %s)",
                (org, OUTCOMES, doc_id, runbook_id, json.dumps(held), f"2024-03-02T00:00:{number:02d}+00:00"),
                org=org)  # fmt: skip
        runbooks.append(runbook_id)
    return runbooks


def _agree(memory: OrgMemory, runbooks: list[str]) -> None:
    """The store's counts of the ledger against its whole read, on every count the tiers make."""
    counted = Snapshots().get(memory.org, memory._documents)  # a fresh process's: recall counts, reads none whole
    rates = {services: counted.win_rates(runbooks, services) for services in [(), ("svc-a",)]}
    used = {runbook_id: counted.used_on(runbook_id) for runbook_id in runbooks}
    records = memory.ledger.records(runbooks)  # a runbook's record, counted (`ledger_records`)
    tally = memory.ledger.tally()
    outcomes = every_outcome(memory)  # the whole ledger, read plainly
    for services, found in rates.items():
        assert found == win_rates_plainly(outcomes, runbooks, services)
    assert {rid: set(found) for rid, found in used.items()} == {
        rid: used_plainly(outcomes, rid, list(counted.cited.get(rid, {}))) for rid in runbooks
    }
    summaries = {rid: summarize(rid, [o for o in outcomes if o.runbook_id == rid]) for rid in runbooks}
    assert {rid: tally.effectiveness(rid) for rid in runbooks} == summaries
    assert records == summaries
    assert tally.outcomes == len(outcomes)
    successes = [(o.at, o.runbook_id, o.service, o.incident_id, o.time_to_mitigate_s) for o in outcomes
                 if o.kind is OutcomeKind.SUCCEEDED and o.time_to_mitigate_s]  # fmt: skip
    mitigated = [(m.at, m.runbook_id, m.service, m.incident_id, m.seconds) for m in tally.mitigated]
    assert sorted(mitigated, key=_place) == sorted(successes, key=_place)
    # What the cases are: the refused ones' runbooks have their good outcome alone, the others both
    held = {rid: len([o for o in outcomes if o.runbook_id == rid]) for rid in runbooks}
    assert held == {f"RB-{case}": 1 if (case, changed) in REFUSED else 2 for case, changed in CASES}
    assert rates[()]["RB-service-number"][1].startswith("RB-service-number: 1/1")
    assert tally.effectiveness("RB-succeeded-spaced").successes == 2


def _place(success: tuple[Any, ...]) -> tuple[Any, ...]:
    return success[0], success[1], success[3] or ""


def test_outcomes_written_as_raw_rows_count_as_the_whole_ledger_reads_them(memory: OrgMemory, raw, backend) -> None:
    _agree(memory, _rows(raw, backend, memory.org))


def test_migration_33_flags_the_outcomes_an_older_release_left(settings, raw, backend) -> None:
    with Grandbo.init(settings, embedding="deterministic") as before:
        before.org("acme", create=True)
    upgrade = undo_migration(
        settings, 33, "DROP INDEX documents_odd_outcomes", f"ALTER TABLE documents DROP COLUMN {COLUMN}"
    )
    runbooks = _rows(raw, backend, "acme")
    with Grandbo.open(upgrade) as upgraded:
        assert 33 in upgraded.schema_versions()
        flagged = raw(
            f"SELECT doc_id FROM documents WHERE org_id = %s AND {COLUMN} ORDER BY doc_id", ("acme",), org="acme"
        )
        assert {doc_id for (doc_id,) in flagged} >= {f"odd-{case}" for case, _ in REFUSED}
        assert not [doc_id for (doc_id,) in flagged if doc_id.startswith("good-")]
        _agree(upgraded.org("acme"), runbooks)


def test_what_this_release_writes_is_not_odd(memory: OrgMemory, raw) -> None:
    memory.runbooks.add("RB-1", "Restart the pool", ["restart", "verify"])
    memory.ledger.record("RB-1", "succeeded", service="SVC-A", time_to_mitigate_s=60.5, incident_id="INC-1")
    memory.ledger.record("RB-1", "failed", service=None)
    memory.ledger.record("RB-1", "recommended")
    memory.ledger.record("RB-1", "rated", rating=-1, comment="slow")
    flags = raw(f"SELECT doc_id, {COLUMN} FROM documents WHERE org_id = %s AND collection = %s", (memory.org, OUTCOMES),
                org=memory.org)  # fmt: skip
    assert len(flags) == 4 and not any(flag for _, flag in flags)


@pytest.mark.parametrize("field", sorted(set(Outcome.model_fields) - {"org_id"}))
def test_every_field_of_an_outcome_has_its_shapes(field: str) -> None:
    """A field `Outcome` gains must say what the store counts as it is (a new migration: migration 33's shapes are
    landed), or a document holding it is counted as stored however it holds it."""
    assert field in OUTCOME_SHAPES


def test_an_odd_outcome_is_taken_from_its_keys_count_once_over_every_chunk_of_refs(memory: OrgMemory, raw, backend):
    """Outcomes of one runbook filed under more refs than one statement takes (a log imported or edited by hand: the
    ref is not the runbook id), one of them odd: the count of each chunk of refs had the odd one taken from it, so
    600 outcomes counted 598 (a chunk whose whole count was odd, none)."""
    data = "%s" if backend == "sqlite" else "%s::jsonb"
    refs = [f"ref{number:04d}" for number in range(600)]
    for number, ref in enumerate(refs):
        held = {"runbook_id": "RB-X", **GOOD, **({"kind": " Failed "} if number == 0 else {})}
        raw(f"INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
            f"VALUES (%s, %s, %s, %s, {data}, 1, %s)", (memory.org, OUTCOMES, f"o-{ref}", ref, json.dumps(held), AT),
            org=memory.org)  # fmt: skip
    groups, _, odd = memory._documents.tally(OUTCOMES, [("runbook_id",)], {}, (), refs=refs)
    assert [doc.doc_id for doc in odd] == ["o-ref0000"]
    assert groups == [("RB-X", 599)]
