"""The operational facts recall joins at query time: the service catalog, the effectiveness ledger
and the organization's re-ranking weights. They are read from the store's documents, never embedded."""

from __future__ import annotations

from collections.abc import Sequence

from grandbo.effectiveness import Outcome, summarize
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


def outcomes(store: Store, org_id: str, runbook_ids: Sequence[str]) -> list[Outcome]:
    docs = store.find_documents(org_id, OUTCOMES, list(runbook_ids))
    return sorted((Outcome.model_validate({**doc.data, "org_id": org_id}) for doc in docs), key=lambda o: o.at)


def win_rates(
    store: Store, org_id: str, runbook_ids: Sequence[str], services: Sequence[str] = ()
) -> dict[str, tuple[float, str]]:
    """Runbook id -> (win rate, explanation); for one of `services` when that pair has enough results."""
    known = outcomes(store, org_id, runbook_ids) if runbook_ids else []
    rates: dict[str, tuple[float, str]] = {}
    for runbook_id in dict.fromkeys(runbook_ids):
        chosen, scope = summarize(runbook_id, known), "all services"
        for service in services:
            specific = summarize(runbook_id, known, service)
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
