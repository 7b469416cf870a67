"""A list of received alerts in brief (`GET /v1/alerts`), read without each alert's recall: its brief is kept beside
it (`alert_text.RECALLED`), so a page of 500 reads a few KB of each, not the ~28 KB of its recall and plan (four
readers of such pages took another org's recall p95 from 25 ms to 1 s: probe 20a)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grandbo.ports import Position
from grandbo.tiers.alert_text import RECALLED
from grandbo.tiers.alerts import ALERTS, LISTED, AlertBrief, Alerts, StoredAlert
from grandbo.tiers.records import read_records
from grandbo.triage.plan import TriagePlan


def briefs(
    alerts: Alerts, limit: int, current: Callable[[TriagePlan], TriagePlan], **page: Any
) -> tuple[list[AlertBrief], Position]:
    """`Alerts.page`'s alerts (`page` its filters) in brief, and where the next page starts, each read without its
    recall, its plan's top runbook as `current` gives it (the ledger's now). An alert kept before briefs were (no
    `RECALLED`), once recalled, is read whole."""
    docs, more = alerts.newest_docs(limit, keys=(*LISTED, "plan", RECALLED), **page)
    older = [doc.doc_id for doc in docs if RECALLED not in doc.data and doc.data.get("state") != "received"]
    whole = {doc.doc_id: doc for doc in alerts.documents.find(ALERTS, ids=older)} if older else {}
    said = {doc.doc_id: doc.data.get(RECALLED) or {} for doc in docs if doc.doc_id not in whole}
    found = read_records(StoredAlert, [whole.get(doc.doc_id, doc) for doc in docs], "alert")
    listed = [stored.model_copy(update={"plan": current(stored.plan)}) if stored.plan else stored for stored in found]
    return [stored.brief(said.get(stored.id)) for stored in listed], more
