"""The operational facts recall joins at query time: the service catalog, the effectiveness ledger
and the organization's re-ranking weights. They are read from the store's documents, never embedded."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

from grandbo.effectiveness import Effectiveness, Outcome, summarize
from grandbo.model import RerankWeights
from grandbo.store.base import Store
from grandbo.topology import Service, Topology

OUTCOMES, SERVICES, SETTINGS = "outcome", "service", "settings"
MIN_SERVICE_RESULTS = 3


def topology(store: Store, org_id: str) -> Topology:
    return Topology(Service.model_validate(doc.data) for doc in store.find_documents(org_id, SERVICES))


def rerank_weights(store: Store, org_id: str) -> RerankWeights:
    doc = store.get_document(org_id, SETTINGS, "rerank")
    return RerankWeights.model_validate(doc.data) if doc else RerankWeights()


def outcomes(store: Store, org_id: str, runbook_ids: Sequence[str] | None) -> list[Outcome]:
    """Outcomes of those runbooks (of every runbook with None), oldest first."""
    docs = store.find_documents(org_id, OUTCOMES, list(runbook_ids) if runbook_ids is not None else None)
    return sorted((Outcome.model_validate({**doc.data, "org_id": org_id}) for doc in docs), key=lambda o: o.at)


@dataclass
class Snapshot:
    """An org's catalog, weights and ledger as of one documents version, summaries computed on demand."""

    version: int
    topology: Topology
    weights: RerankWeights
    outcomes: dict[str, list[Outcome]]
    _summaries: dict[tuple[str, str | None], Effectiveness] = field(default_factory=dict)

    def effectiveness(self, runbook_id: str, service: str | None = None) -> Effectiveness:
        key = (runbook_id, service)
        found = self._summaries.get(key)
        if found is None:
            found = self._summaries[key] = summarize(runbook_id, self.outcomes.get(runbook_id, []), service)
        return found

    def win_rates(self, runbook_ids: Sequence[str], services: Sequence[str] = ()) -> dict[str, tuple[float, str]]:
        """Runbook id -> (win rate, explanation); for one of `services` when that pair has enough results."""
        rates: dict[str, tuple[float, str]] = {}
        for runbook_id in dict.fromkeys(runbook_ids):
            chosen, scope = self.effectiveness(runbook_id), "all services"
            for service in services:
                specific = self.effectiveness(runbook_id, service)
                if specific.attempts >= MIN_SERVICE_RESULTS:
                    chosen, scope = specific, service
                    break
            if chosen.attempts == 0:
                rates[runbook_id] = (chosen.win_rate, f"{runbook_id}: never tried (prior)")
            else:
                rates[runbook_id] = (
                    chosen.win_rate,
                    f"{runbook_id}: {chosen.successes}/{chosen.attempts} succeeded ({scope}), win rate "
                    f"{chosen.win_rate:.2f} [{chosen.interval[0]:.2f}, {chosen.interval[1]:.2f}]",
                )
        return rates


_snapshots: weakref.WeakKeyDictionary[Store, dict[str, Snapshot]] = weakref.WeakKeyDictionary()
_snapshots_lock = threading.Lock()


def snapshot(store: Store, org_id: str) -> Snapshot:
    """The org's operational facts, reread only when one of its documents changed."""
    version = store.documents_version(org_id)
    with _snapshots_lock:
        cached = _snapshots.setdefault(store, {}).get(org_id)
    if cached is not None and cached.version == version:
        return cached
    by_runbook: dict[str, list[Outcome]] = {}
    for outcome in outcomes(store, org_id, None):
        by_runbook.setdefault(outcome.runbook_id, []).append(outcome)
    fresh = Snapshot(version, topology(store, org_id), rerank_weights(store, org_id), by_runbook)
    with _snapshots_lock:
        _snapshots.setdefault(store, {})[org_id] = fresh
    return fresh
