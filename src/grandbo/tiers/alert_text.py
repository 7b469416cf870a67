"""What of a received alert is text an organization's patterns mask (`tiers.alerts`): masked before it is stored
and asked, and again in a replayed export; its ids, times and the rest are kept as sent."""

from __future__ import annotations

from typing import Any

from grandbo.ingest.alert import Alert
from grandbo.redaction import Redactor


def masked_alert(alert: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """An alert's text fields masked (summary, description, label values); ids, times and the rest kept. A
    masked summary or description is cut to its field's limit again, as the adapter cut the sender's: a mask is
    longer than a short secret, and an alert over the limit could not be read back (the list, each redelivery)."""
    return {
        "summary": _fitted("summary", redactor.text(str(alert.get("summary", "")))),
        "description": _fitted("description", redactor.text(str(alert.get("description", "")))),
        "labels": {key: redactor.text(str(value)) for key, value in dict(alert.get("labels") or {}).items()},
        "links": {key: redactor.text(str(value)) for key, value in dict(alert.get("links") or {}).items()},
    }


def _fitted(field: str, text: str) -> str:
    limit: int = next(m.max_length for m in Alert.model_fields[field].metadata if hasattr(m, "max_length"))
    return text[:limit]


def masked(data: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A stored alert's JSON (a document or one of its history's) with its text masked, for a replayed export."""
    out = dict(data)
    if isinstance(out.get("alert"), dict):
        out["alert"] = {**out["alert"], **masked_alert(out["alert"], redactor)}
    if isinstance(out.get("query"), str):
        out["query"] = redactor.text(out["query"])
    return out
