"""What a received alert keeps of its text (`tiers.alerts`): what an organization's patterns mask (masked before it
is stored and asked, and again in a replayed export; its ids, times and the rest are kept as sent), and of the
memories its recall found (`kept`)."""

from __future__ import annotations

import json
from typing import Any

from grandbo.ingest.alert import Alert
from grandbo.model import RecallResult
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


KEPT_BODY_CHARS, KEPT_META_BYTES = 1_000, 2_048  # of each hit's memory an alert keeps with its recall


def kept(result: RecallResult | None) -> RecallResult | None:
    """A recall as an alert keeps it: each memory's body cut to KEPT_BODY_CHARS and a meta over KEPT_META_BYTES
    left out (the memory itself is whole at `GET /v1/memories/{id}`). Kept whole, one alert matching three long
    post-mortems took 1.2 MB, twice (the alert and its event): a write key's storm filled the disk all orgs share."""
    if result is None:
        return None
    hits, cut = [], False
    for hit in result.hits:
        body, meta = hit.entry.body, hit.entry.meta
        big_meta = len(json.dumps(meta, ensure_ascii=False).encode()) > KEPT_META_BYTES
        if len(body) > KEPT_BODY_CHARS or big_meta:
            short = body[:KEPT_BODY_CHARS] + " [...]" if len(body) > KEPT_BODY_CHARS else body
            entry = hit.entry.model_copy(update={"body": short, "meta": {} if big_meta else meta})
            hit, cut = hit.model_copy(update={"entry": entry}), True
        hits.append(hit)
    note = (f"kept with the alert: memory bodies cut to {KEPT_BODY_CHARS:,} characters, meta over "
            f"{KEPT_META_BYTES:,} bytes left out; GET /v1/memories/{{id}} has each whole")  # fmt: skip
    return result.model_copy(update={"hits": hits, "notes": [*result.notes, note] if cut else result.notes})


# A stored alert's recall in brief, a key of its document beside the alert's own (`recalled`): what a list of alerts
# reads instead of the recall (about 24 KB), with the plan (a few KB: its top runbook is the ledger's now).
RECALLED = "recalled"


def recalled(result: RecallResult | None) -> dict[str, Any] | None:
    """A recall in brief, as a list shows it (`StoredAlert.brief`), kept beside it (`RECALLED`): four readers of
    `GET /v1/alerts?limit=500` read and validated 14 MB of recalls and plans a page, and took another org's recall
    p95 from 25 ms to 1 s (probe 20a). No text of the memory it matched, its id only (the list reads the title):
    a purge or an erasure finds the copies of a memory's text by their shape, and a title kept here was missed."""
    if result is None:
        return None
    top = result.hits[0] if result.hits else None
    match = {"id": top.entry.id, "kind": top.entry.kind.value, "label": top.label} if top else None
    return {"seen_before": result.seen_before, "evidence": result.evidence, "top_match": match}
