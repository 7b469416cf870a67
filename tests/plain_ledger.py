"""An org's ledger computed plainly, for tests to hold the store's counts to: every outcome document read whole and
read as a record (those none can be read from left out, as every path leaves them out); and what counts the outcome
documents a path reads (`loaded`), to hold it to reading none whole."""

from __future__ import annotations

import pytest

from grandbo.memory import OrgMemory
from grandbo.tiers.effectiveness import Outcome, summarize
from grandbo.tiers.ledger_source import MIN_SERVICE_RESULTS
from grandbo.tiers.operations import OUTCOMES
from grandbo.tiers.records import read_records


def every_outcome(memory: OrgMemory) -> list[Outcome]:
    """Every outcome of the org, oldest first (by time, then document id)."""
    docs = sorted(memory._documents.find(OUTCOMES), key=lambda doc: doc.doc_id)
    read = read_records(Outcome, docs, "outcome", given={"org_id": memory.org})
    return sorted(read, key=lambda o: o.at)  # stable: by time, then id


def win_rates_plainly(outcomes: list[Outcome], runbook_ids: list[str], services: tuple[str, ...]) -> dict[str, object]:
    """Win rates by their definition: each runbook's outcomes summarized, on the first of `services` with enough
    results (its outcomes on exactly that service), else on every service."""
    rates: dict[str, object] = {}
    for runbook_id in runbook_ids:
        mine = [o for o in outcomes if o.runbook_id == runbook_id]
        chosen, scope = summarize(runbook_id, mine), "all services"
        for service in services if chosen.attempts else ():
            specific = summarize(runbook_id, [o for o in mine if o.service == service], service)
            if specific.attempts >= MIN_SERVICE_RESULTS:
                chosen, scope = specific, service
                break
        note = (f"{runbook_id}: never tried (prior)" if not chosen.attempts else
                f"{runbook_id}: {chosen.successes}/{chosen.attempts} succeeded ({scope}), win rate "
                f"{chosen.win_rate:.2f} [{chosen.interval[0]:.2f}, {chosen.interval[1]:.2f}]")  # fmt: skip
        rates[runbook_id] = (chosen.win_rate, note)
    return rates


def used_plainly(outcomes: list[Outcome], runbook_id: str, cited: list[str]) -> set[str]:
    """The services a runbook was used on by their definition: its outcomes', and the incidents' that cited it."""
    return {o.service for o in outcomes if o.runbook_id == runbook_id and o.service} | set(cited)


@pytest.fixture
def loaded(store, monkeypatch: pytest.MonkeyPatch) -> list[int]:  # type: ignore[no-untyped-def]
    """The outcome documents the store reads (every read of documents goes through its `_documents`)."""
    counts = [0]
    read = type(store)._documents

    def reading(self, org_id, collection, *args, **kwargs):  # type: ignore[no-untyped-def]
        found = read(self, org_id, collection, *args, **kwargs)
        counts[0] += len(found) if collection == OUTCOMES else 0
        return found

    monkeypatch.setattr(type(store), "_documents", reading)
    return counts
