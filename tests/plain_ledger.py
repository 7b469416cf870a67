"""An org's ledger computed plainly, for tests to hold the store's counts to: every outcome document read whole and
read as a record (those none can be read from left out, as every path leaves them out); and what counts the outcome
documents a path reads (`loaded`), to hold it to reading none whole."""

from __future__ import annotations

import pytest

from grandbo.memory import OrgMemory
from grandbo.tiers.effectiveness import Outcome
from grandbo.tiers.operations import OUTCOMES
from grandbo.tiers.records import read_records


def every_outcome(memory: OrgMemory) -> list[Outcome]:
    """Every outcome of the org, oldest first (by time, then document id)."""
    docs = sorted(memory._documents.find(OUTCOMES), key=lambda doc: doc.doc_id)
    read = read_records(Outcome, docs, "outcome", given={"org_id": memory.org})
    return sorted(read, key=lambda o: o.at)  # stable: by time, then id


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
