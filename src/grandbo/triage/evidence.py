"""The deterministic plan: recall's hits -> mechanisms, runbooks in order, citations, confidence, or the
explicit "no precedent" checklist. Pure given its inputs (the recall result, the runbooks' entries and
outcomes, the catalog, the org's recent alerts), so it is tested and calibrated on its own.

Confidence of a suggestion (documented in docs/evaluation.md, calibrated on the incident set's dev split
by `benchmarks/calibrate_triage.py`):

    confidence = sigmoid(a + b * evidence + c / rank)

where `evidence` is max(cosine, lexical idf coverage) of the best memory behind the suggestion (the
same strength recall's "seen before" verdict compares with its bar) and `rank` that memory's rank in
recall. Runbooks and mechanisms have their own (a, b, c). It estimates the probability that the
suggestion is the one the alert needs (a runbook the judged incident used, a mechanism of a judged
incident); the win rate says how often the runbook then worked, and is reported beside it, not in it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from grandbo import figures
from grandbo.errors import UnreadableRecordError
from grandbo.ingest.alert import Alert, fired_at, start_of, summary_marks, words_alike
from grandbo.model import Entry, Hit, Kind, RecallResult, Status
from grandbo.ports import Document
from grandbo.retrieval.rerank import runbook_of
from grandbo.tiers.effectiveness import Effectiveness
from grandbo.tiers.ledger_records import NEVER, Counted
from grandbo.tiers.runbooks import steps_of
from grandbo.tiers.topology import Topology
from grandbo.triage.origin_model import Outlier

if TYPE_CHECKING:
    from grandbo.triage.changes import WhatChanged
from grandbo.triage.plan import Citation, Mechanism, NoPrecedent, Recurrence, RunbookSuggestion, TriagePlan

# (a, b, c) of the confidence formula, fitted on the dev split (benchmarks/calibrate_triage.py).
RUNBOOK_CONFIDENCE = (-2.149, 1.407, 3.146)
MECHANISM_CONFIDENCE = (-5.246, 4.494, 4.115)
# A lexical-only answer (recall past its budget) counts when its best match carries 30% of the alert's idf;
# then the matches with at least half the best one's coverage qualify.
LEXICAL_BAR, LEXICAL_SHARE = 0.3, 0.5
MIN_SERVICE_ATTEMPTS = 3  # as the re-ranker: a service's own record once it has three results
MAX_RUNBOOKS, MAX_MECHANISMS = 5, 3
RECENT_ALERT_DAYS, FREQUENT_ALERTS = 30, 3
# PagerDuty's Outlier Incident: of the service's incidents in the 30 days before, the share like this one.
OUTLIER_FREQUENT, OUTLIER_RARE = 0.20, 0.05


def confidence(constants: tuple[float, float, float], evidence: float, rank: int) -> float:
    a, b, c = constants
    return round(1.0 / (1.0 + math.exp(-(a + b * evidence + c / max(rank, 1)))), 4)


def strength(hit: Hit) -> float:
    """A match's own evidence: max(cosine, lexical idf coverage), each on its own scale, the higher kept."""
    cosine = hit.why.vector.similarity if hit.why.vector else 0.0
    coverage = hit.why.lexical.coverage if hit.why.lexical else 0.0
    return max(cosine, coverage)


def incident_of(entry: Entry) -> str | None:
    """The incident a memory belongs to (`figures.incident_of`: the store keeps it beside the entry too)."""
    return figures.incident_of(entry.id, entry.tags, entry.meta)


def qualifying(result: RecallResult) -> list[Hit]:
    """The hits strong enough to build a plan on: those recall did not call novel (re-ranked), or, for a
    lexical-only answer, see LEXICAL_BAR."""
    if result.seen_before is False:
        return []
    if result.seen_before is None:
        covered = [(hit, hit.why.lexical.coverage if hit.why.lexical else 0.0) for hit in result.hits]
        best = max((coverage for _, coverage in covered), default=0.0)
        if best < LEXICAL_BAR:
            return []
        return [hit for hit, coverage in covered if coverage >= LEXICAL_SHARE * best]
    return [hit for hit in result.hits if hit.label != "novel"]


def citations(hits: Sequence[Hit]) -> list[Citation]:
    return [
        Citation(id=h.entry.id, kind=h.entry.kind.value, title=h.entry.title, incident_id=incident_of(h.entry),
                 rank=h.rank, evidence=round(strength(h), 4))
        for h in hits
    ]  # fmt: skip


def mechanism_text(entry: Entry) -> str:
    for line in entry.body.splitlines():
        if line.startswith("Mechanism:"):
            return line.removeprefix("Mechanism:").strip()
    return entry.title


def mechanisms(hits: Sequence[Hit]) -> list[Mechanism]:
    """One per past incident among the findings and post-mortems, best first."""
    by_incident: dict[str, list[Hit]] = {}
    for hit in hits:
        if hit.entry.kind in (Kind.FINDING, Kind.POSTMORTEM):
            by_incident.setdefault(incident_of(hit.entry) or hit.entry.id, []).append(hit)
    out = []
    for group in list(by_incident.values())[:MAX_MECHANISMS]:
        best = group[0]
        findings = [h for h in group if h.entry.kind is Kind.FINDING] or group
        out.append(Mechanism(
            text=mechanism_text(findings[0].entry), incident_id=incident_of(best.entry),
            cites=[h.entry.id for h in group], confidence=confidence(MECHANISM_CONFIDENCE, strength(best), best.rank),
        ))  # fmt: skip
    return out


def backing(hits: Sequence[Hit]) -> dict[str, list[Hit]]:
    """Runbook id -> the hits that are it or used it, in recall order (the order runbooks are suggested in)."""
    out: dict[str, list[Hit]] = {}
    for hit in hits:
        runbook = runbook_of(hit.entry)
        if runbook:
            out.setdefault(runbook, []).append(hit)
    return out


def record(runbook_id: str, counted: Counted, service: str | None) -> tuple[Effectiveness, str]:
    """The runbook's record for the alert's service once that has MIN_SERVICE_ATTEMPTS results, else overall."""
    if service:
        local = counted.effectiveness(runbook_id, service)
        if local.attempts >= MIN_SERVICE_ATTEMPTS:
            return local, service
    return counted.effectiveness(runbook_id), "all services"


def runbooks(
    hits: Sequence[Hit], entries: dict[str, Entry], records: Mapping[str, Counted], service: str | None
) -> tuple[list[RunbookSuggestion], list[str]]:
    """Suggested runbooks (those that exist in this org as active runbooks) and notes on the ones left out."""
    suggestions: list[RunbookSuggestion] = []
    notes: list[str] = []
    for runbook_id, group in backing(hits).items():
        entry = entries.get(runbook_id)
        if entry is None or entry.kind is not Kind.RUNBOOK or entry.status is not Status.ACTIVE:
            notes.append(f"runbook {runbook_id} (used by {group[0].entry.id}) is not an active runbook here")
            continue
        if len(suggestions) == MAX_RUNBOOKS:
            break
        best = group[0]
        suggestions.append(_with_record(RunbookSuggestion(
            id=runbook_id, title=entry.title, steps=steps_of(entry)[:20],
            win_rate=0.5, interval=(0.0, 1.0), attempts=0, successes=0, scope="all services",
            cites=[h.entry.id for h in group], confidence=confidence(RUNBOOK_CONFIDENCE, strength(best), best.rank),
        ), records.get(runbook_id, NEVER), service))  # fmt: skip
    ordered, moved = tried_first(suggestions)
    return ordered, notes + moved


def _with_record(suggestion: RunbookSuggestion, counted: Counted, service: str | None) -> RunbookSuggestion:
    stats, scope = record(suggestion.id, counted, service)
    return suggestion.model_copy(update={
        "win_rate": stats.win_rate, "interval": stats.interval, "attempts": stats.attempts,
        "successes": stats.successes, "mttr_median_s": stats.mttr_median_s, "scope": scope,
        "untried": stats.attempts == 0,
    })  # fmt: skip


def tried_first(suggestions: Sequence[RunbookSuggestion]) -> tuple[list[RunbookSuggestion], list[str]]:
    """The runbooks in recall's order, except that one with no record (never tried: its win rate is the prior, its
    interval nearly 0-1) never comes before one with a record; and a note for each one that moved down for it."""
    tried = [s for s in suggestions if s.attempts]
    untried = [s for s in suggestions if not s.attempts]
    moved = [
        f"runbook {s.id} has no record yet (never tried): listed after the runbooks with one, though recall ranked "
        "it higher"
        for position, s in enumerate(suggestions)
        if not s.attempts and any(t.attempts for t in suggestions[position + 1 :])
    ]
    return tried + untried, moved


def current(plan: TriagePlan, records: Callable[[Sequence[str]], Mapping[str, Counted]]) -> TriagePlan:
    """A kept plan with its runbooks' records read again from the ledger (`records` of runbook ids) and put in order
    again (`tried_first`, over recall's order): the plan an alert kept when it was triaged does not go stale when
    outcomes are recorded later. Its other parts are recall's, which a new outcome does not change."""
    if not plan.runbooks:
        return plan
    ranks = {c.id: c.rank for c in plan.citations}
    by_recall = sorted(plan.runbooks, key=lambda r: min((ranks.get(c, 10**6) for c in r.cites), default=10**6))
    held = records([r.id for r in by_recall])
    refreshed = [_with_record(r, held.get(r.id, NEVER), plan.service) for r in by_recall]
    ordered, moved = tried_first(refreshed)
    kept_notes = [note for note in plan.notes if not note.startswith("runbook ") or "never tried" not in note]
    return plan.model_copy(update={"runbooks": ordered, "notes": kept_notes + moved})


_COLLECT = [
    (("memory", "evict", "oom", "heap", "maxmemory"), "memory use, evictions and OOM kills of {where}"),
    (("connection", "reset", "timeout", "refused", "pool", "socket"),
     "connection counts, pool saturation, resets and timeouts from {svc} to each dependency"),
    (("disk", "volume", "inode", "storage"), "disk and inode usage on {where}"),
    (("cpu", "throttl", "load"), "CPU use and throttling of {where}"),
    (("lag", "queue", "consumer", "backlog", "kafka"), "queue depth and consumer lag around {svc}"),
    (("latency", "slow", "p99", "p95"), "latency by endpoint of {svc} and of each call it makes"),
    (("5xx", "503", "502", "500", "error"), "which status codes {svc} returns and which upstream call fails first"),
    (("cert", "tls", "ssl", "expir"), "certificate expiry dates on {where}"),
    (("dns", "resolve", "eai_again"), "DNS resolution errors from {svc}"),
]  # fmt: skip


def no_precedent(alert: Alert, query: str, topology: Topology, reason: str) -> NoPrecedent:
    """What to collect first, and which services to look at, when no memory is close enough."""
    service = alert.service or next(iter(topology.mentioned_in(query)), None)
    known = topology.services.get(service) if service else None
    depends_on = list(known.depends_on) if known else []
    callers = sorted(s.name for s in topology.services.values() if service and service in s.depends_on)
    svc = service or "the alerting service"
    where = ", ".join([svc, *depends_on])
    since = f" since {alert.started_at.isoformat(timespec='minutes')}" if alert.started_at else ""
    collect = [f"what changed on {where} in the two hours before the alert: deploys, config, feature flags"]
    text = query.lower()
    collect += [item.format(svc=svc, where=where) for words, item in _COLLECT if any(w in text for w in words)]
    collect.append(f"error rate and latency of {svc}{since}, and its first error in the logs")
    if depends_on:
        collect.append(f"health of what {svc} calls: {', '.join(depends_on)}")
    if callers:
        collect.append(f"impact on its callers: {', '.join(callers)}")
    return NoPrecedent(reason=reason, collect=collect, service=service, depends_on=depends_on, callers=callers)


class Seen(NamedTuple):
    """What the recurrence label needs of a received alert (read once per documents version)."""

    id: str
    fingerprint: str
    service: str | None
    words: frozenset[int]
    """Its summary's marks (`summary_marks`: at most WORD_MARKS, a sample of a longer summary's words), as alert
    grouping keeps them: a storm's summaries of 2,000 characters are compared 64 marks a side, not 660 words."""
    received_at: datetime
    began: datetime
    """When it started firing (`fired_at`), not when received: a sender's delivery waits (Alertmanager's group_wait,
    a retry) do not reorder a burst."""


SEEN_KEYS = ("id", "alert")  # what `seen` reads of a stored alert: not the recall and plan kept with it
_NO_WORDS: frozenset[int] = frozenset()


def seen(stored: Document) -> Seen:
    """A received alert (a document of the `alert` collection, as stored) as `Seen`, without validating it whole;
    UnreadableRecordError when it lacks what `Seen` needs."""
    unmarked, summary = seen_unmarked(stored)
    return unmarked._replace(words=summary_marks(summary))


def seen_unmarked(stored: Document) -> tuple[Seen, str]:
    """`seen` without its summary's marks (no words), and the summary: for a reader that marks only the summaries
    that can be alike the alert it triages (`past_alerts`)."""
    data = stored.data
    try:
        alert = data["alert"]
        summary = str(alert["summary"])
        received = datetime.fromisoformat(alert["received_at"])
        began = _began(alert.get("started_at"), received)
        unmarked = Seen(str(data["id"]), str(alert["fingerprint"]), alert.get("service"), _NO_WORDS, received, began)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise UnreadableRecordError(
            f"The stored alert {stored.doc_id!r} cannot be read ({type(error).__name__}: {str(error)[:80]}). Nothing "
            "was changed and its history is kept; export the organization (`grandbo export`) and report this.",
            detail={"id": stored.doc_id, "fields": ["alert"]},
        ) from error
    return unmarked, summary


def _began(started: object, received: datetime) -> datetime:
    """`fired_at` of a stored alert's start (read as `Alert` reads it: `start_of`) and its receipt."""
    return fired_at(start_of(datetime.fromisoformat(started)) if isinstance(started, str) and started else None,
                    received)  # fmt: skip


def alike(marks: frozenset[int], fingerprint: str, service: str | None, other: Seen) -> bool:
    """Whether a received alert is like one of `marks` (its summary's, `summary_marks`), `fingerprint` and `service`:
    the same fingerprint, or the same service and at least half the summary's words in common (Jaccard; of a
    summary of more than WORD_MARKS words, of its sample), as alert grouping tests it."""
    return other.fingerprint == fingerprint or (other.service == service and words_alike(marks, other.words))


def recurrence(alert: Alert, recent: Sequence[Seen], now: datetime) -> tuple[Recurrence, int]:
    """PagerDuty-style: frequent (3+ like it in the last 30 days), rare (1-2), first (none), like it as `alike`
    reads it."""
    return labels(alert, recent, now)[0]


def outlier(alert: Alert, recent: Sequence[Seen], now: datetime) -> tuple[Outlier | None, float | None, int]:
    """PagerDuty's Outlier Incident label: among the alerts received on the alert's service in the 30 days before
    (this one left out), the share like it (as `recurrence` reads alike): `frequent` at 20% or more, `rare` at 5%
    or less (some, but few), `anomalous` with none like it (or none at all); between the two, no label. Returns
    (label, share, alerts on the service); (None, None, 0) for an alert that names no service."""
    return labels(alert, recent, now)[1]


def labels(
    alert: Alert, recent: Sequence[Seen], now: datetime
) -> tuple[tuple[Recurrence, int], tuple[Outlier | None, float | None, int]]:
    """`recurrence` and `outlier` in one pass over the received alerts, each compared with the alert once (a plan
    asks for both: an org's storm of alerts on the service is most of what a triage reads)."""
    since, marks, own = now - timedelta(days=RECENT_ALERT_DAYS), summary_marks(alert.summary), alert.id
    fingerprint, service = alert.fingerprint, alert.service  # each read once, not per alert
    count = total = like = 0
    for other in recent:
        if other.received_at < since or other.id == own:
            continue
        same = alike(marks, fingerprint, service, other)
        count += same
        if service and other.service == service and other.received_at <= now:  # the outlier's: on it, until now
            total += 1
            like += same
    recurring: Recurrence = "frequent" if count >= FREQUENT_ALERTS else "rare" if count else "first"
    if not service:
        return (recurring, count), (None, None, 0)
    if not like:
        return (recurring, count), ("anomalous", 0.0 if total else None, total)
    share = like / total
    label: Outlier | None = "frequent" if share >= OUTLIER_FREQUENT else "rare" if share <= OUTLIER_RARE else None
    return (recurring, count), (label, round(share, 4), total)


@dataclass
class Facts:
    """What the plan joins beside recall: read once per triage."""

    entries: dict[str, Entry]
    records: Mapping[str, Counted]  # the backing runbooks' records, counted by the store (`LedgerSource.counted`)
    topology: Topology
    recent: list[Seen]
    changed: WhatChanged | None = None  # what changed before the alert and where it started (`triage.changes`)
