"""A list of received alerts in brief (`GET /v1/alerts`), read without each alert's recall: its brief is kept beside
it (`alert_text.RECALLED`), so a page of 500 reads a few KB of each, not the ~28 KB of its recall and plan (four
readers of such pages took another org's recall p95 from 25 ms to 1 s: probe 20a)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from grandbo.ports import Position
from grandbo.tiers.alert_text import RECALLED
from grandbo.tiers.alerts import ALERTS, LISTED, AlertBrief, Alerts, StoredAlert
from grandbo.tiers.records import read_records
from grandbo.triage.plan import TriagePlan

GONE = "[purged]"  # the title of a matched memory the org no longer holds (as a purged one reads)


def briefs(
    alerts: Alerts, limit: int, current: Callable[[TriagePlan], TriagePlan],
    titles: Callable[[list[str]], Mapping[str, str]], **page: Any,
) -> tuple[list[AlertBrief], Position]:  # fmt: skip
    """`Alerts.page`'s alerts (`page` its filters) in brief, and where the next page starts, each read without its
    recall, its plan's top runbook as `current` gives it (the ledger's now), its top match's title as `titles`
    gives it (the memory's now: "[purged]" once purged). An alert kept before briefs were (no `RECALLED`), once
    recalled, is read whole."""
    docs, more = alerts.newest_docs(limit, keys=(*LISTED, "plan", RECALLED), **page)
    older = [doc.doc_id for doc in docs if RECALLED not in doc.data and doc.data.get("state") != "received"]
    whole = {doc.doc_id: doc for doc in alerts.documents.find(ALERTS, ids=older)} if older else {}
    said = {doc.doc_id: doc.data.get(RECALLED) or {} for doc in docs if doc.doc_id not in whole}
    tops = [top["id"] for brief in said.values() if isinstance(top := brief.get("top_match"), dict)]
    named = titles(list(dict.fromkeys(tops))) if tops else {}
    said = {alert_id: {**brief, "top_match": {**top, "title": named.get(top["id"], GONE)}}
            if isinstance(top := brief.get("top_match"), dict) else brief
            for alert_id, brief in said.items()}  # fmt: skip
    found = read_records(StoredAlert, [whole.get(doc.doc_id, doc) for doc in docs], "alert")
    listed = [stored.model_copy(update={"plan": current(stored.plan)}) if stored.plan else stored for stored in found]
    return [stored.brief(said.get(stored.id)) for stored in listed], more
