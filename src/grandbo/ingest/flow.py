"""One webhook delivery, end to end: verify, parse, store durably, then recall for each new alert."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog

from grandbo.errors import GrandboError, SignatureError
from grandbo.ingest import adapters, signatures
from grandbo.tiers.alerts import StoredAlert

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)


def receive(memory: OrgMemory, source: str, body: bytes, headers: Mapping[str, str]) -> list[tuple[StoredAlert, bool]]:
    """Take one delivery from `source` for `memory`'s organization; return each alert and whether it was new.

    A PagerDuty delivery must carry a valid `X-PagerDuty-Signature` for one of the org's pagerduty secrets.
    Nothing is stored unless the whole delivery parses; once stored, an alert is never lost to a failing
    recall (it keeps the error instead).
    """
    if source == "pagerduty":
        held = memory.webhook_secrets.secrets("pagerduty")
        if not held:
            raise SignatureError(
                "No pagerduty webhook secret is set for this organization, so no delivery can be verified. "
                "Set the subscription's secret with `grandbo webhooks add pagerduty --org ORG --secret S`.",
                detail={"source": source},
            )
        if not signatures.verify(body, headers.get("x-pagerduty-signature"), held):
            raise SignatureError(
                "The X-PagerDuty-Signature does not match the body signed with this organization's pagerduty "
                "secret. Check the secret (`grandbo webhooks add pagerduty`) and that the body reaches Grandbo "
                "unmodified.",
                detail={"source": source},
            )
    alerts = adapters.parse(source, body)
    received = memory.alerts.receive(alerts)
    out = []
    for stored, new in received:
        if new and stored.alert.status == "firing":
            stored = recall_for(memory, stored)
        out.append((stored, new))
    return out


def recall_for(memory: OrgMemory, stored: StoredAlert) -> StoredAlert:
    """Triage a stored alert without an LLM (fast: the acknowledgement waits for it) and keep the recall result
    and the plan (or the error) with it. With an LLM configured, the narrated plan replaces it later, off the
    request (`OrgMemory.defer`)."""
    try:
        plan, result = memory.triage.run(stored.alert, narrate=False)
    except Exception as error:  # a stored alert is never lost to a failing triage: it keeps the error
        message = error.message if isinstance(error, GrandboError) else f"triage failed ({type(error).__name__})"
        log.warning("alert.triage_failed", org_id=memory.org, alert_id=stored.id, error=type(error).__name__)
        return memory.alerts.record_recall(stored, None, message)
    recall = result.model_dump(mode="json") if result is not None else None
    kept = memory.alerts.record_recall(stored, recall, None, plan.model_dump(mode="json"))
    try:
        narrator = memory.triage.configured
    except GrandboError:  # a misconfigured LLM is reported by the triage that asks it, not here
        narrator = None
    if narrator is not None:
        memory.defer(lambda: _narrated(memory, stored), waits_on_llm=True)
    return kept


def _narrated(memory: OrgMemory, stored: StoredAlert) -> None:
    plan, result = memory.triage.run(stored.alert)
    if plan.path == "llm":
        recall = result.model_dump(mode="json") if result is not None else None
        memory.alerts.record_recall(stored, recall, None, plan.model_dump(mode="json"))
