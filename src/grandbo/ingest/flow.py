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
    """Recall for a stored alert and keep the answer (or the error) with it."""
    alert = stored.alert
    try:
        result = memory.recall(
            stored.query, 5, services=[alert.service] if alert.service else None, severity=alert.severity
        )
    except GrandboError as error:
        log.warning("alert.recall_failed", org_id=memory.org, alert_id=stored.id, code=error.code)
        return memory.alerts.record_recall(stored, None, error.message)
    return memory.alerts.record_recall(stored, result.model_dump(mode="json"), None)
