"""An outcome's time given without a zone is UTC. `Ledger.import_outcomes` stored "2024-01-01" as
"2024-01-01T00:00:00", as did an export replayed into another org (and an older release's store holds such times):
every recall that ranked that runbook, and its record, failed with a TypeError (comparing a time without a zone with
the others, review 24). It is written with its zone now, and one stored without is read as UTC."""

from __future__ import annotations

from datetime import UTC, datetime

from grandbo.ports import DocumentWrite
from grandbo.tiers.operations import OUTCOMES

RUNBOOK = ("RB-1", "Restart the checkout-api pods", ["drain the node", "restart checkout-api"])
TOPIC = "restart the checkout-api pods"


def _ranked(memory) -> None:  # type: ignore[no-untyped-def]
    """The runbook ranked by a recall, with its record, and the org's ledger figures: what read the outcomes."""
    assert [hit.entry.id for hit in memory.recall(TOPIC).hits][:1] == ["RB-1"]
    assert memory.ledger.effectiveness("RB-1").attempts == 2


def test_an_imported_outcome_time_without_a_zone_is_stored_as_utc_and_ranks(memory):
    memory.runbooks.add(*RUNBOOK)
    memory.ledger.record("RB-1", "succeeded", time_to_mitigate_s=30.0)
    memory.ledger.import_outcomes([{"runbook_id": "RB-1", "kind": "failed", "at": "2024-01-01"}])
    (stored,) = [d for d in memory._documents.find(OUTCOMES) if d.doc_id.startswith("imported-")]
    assert datetime.fromisoformat(stored.data["at"]) == datetime(2024, 1, 1, tzinfo=UTC)
    _ranked(memory)


def test_an_outcome_stored_without_a_zone_is_read_as_utc(memory):
    memory.runbooks.add(*RUNBOOK)
    memory.ledger.record("RB-1", "succeeded", time_to_mitigate_s=30.0)
    older = {"runbook_id": "RB-1", "kind": "failed", "at": "2024-01-01T00:00:00", "actor": "import"}  # as it was kept
    memory._documents.put([DocumentWrite(OUTCOMES, "imported-000000", older, "outcome.imported", ref="RB-1")], "t")
    _ranked(memory)
    (held,) = [o for o in memory.ledger.outcomes(["RB-1"]) if o.kind.value == "failed"]
    assert held.at == datetime(2024, 1, 1, tzinfo=UTC)


def test_an_export_holding_an_outcome_time_without_a_zone_is_replayed_with_its_zone(grandbo, memory, tmp_path):
    memory.runbooks.add(*RUNBOOK)
    memory.ledger.record("RB-1", "succeeded", time_to_mitigate_s=30.0)
    older = {"runbook_id": "RB-1", "kind": "failed", "at": "2024-01-01T00:00:00", "actor": "import"}
    memory._documents.put([DocumentWrite(OUTCOMES, "imported-000000", older, "outcome.imported", ref="RB-1")], "t")
    memory.export_log(tmp_path / "acme.jsonl")
    moved = grandbo.org("moved", create=True)
    moved.import_log(tmp_path / "acme.jsonl")
    (stored,) = [d for d in moved._documents.find(OUTCOMES) if d.doc_id == "imported-000000"]
    assert datetime.fromisoformat(stored.data["at"]) == datetime(2024, 1, 1, tzinfo=UTC)
    _ranked(moved)
