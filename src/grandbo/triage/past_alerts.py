"""The received alerts a triage compares an alert with, read from the store for an org of more alerts than a process
keeps (`triage.run.KEPT_ALERTS`): only those that can count, each read as `evidence.seen` reads a kept one, so that
the plan is the one the kept alerts give.

What can count is what `evidence.recurrence`, `evidence.outlier` and `changes.first_alerts` look at: the alerts
received since RECENT_ALERT_DAYS before the triage's `now` with the alert's fingerprint or on its service (for an
alert that names none, those that name none: only they can be alike it), those on the burst's path received
within the change window before the burst ends, and the alert itself. They are found by the store's indexes of the
fingerprint and the service by write time (`OrgDocuments.newest` with a match, each one's `id` and `alert` alone): an
alert is written when it is received, and again when it is redelivered or triaged, never before, so the alerts
written since a window began hold every one received in it; RECEIPT_SLACK allows for the clocks of the process that
received one and of the database that wrote it. An alert that is not alike the triaged one keeps no marks of its
words (it counts only towards the alerts its service had): a storm's tens of thousands on one service are read a page
at a time, and the triage holds a few hundred bytes of each. Its words are marked only when it could be alike: of the
alert's service with another fingerprint, and sharing enough of the words the alert is compared by
(`ingest.alert.may_be_alike`): a storm's 2,000-character summaries unlike the alert cost a split each, not 660 marks.
Each read seeks the index of the alerts' service or fingerprint by write time (migration 20,
`store/sql/alert_indexes.py`): it reads the alerts it matches, not the window's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta

import structlog

from grandbo.errors import UnreadableRecordError
from grandbo.ingest.alert import Alert, marked_words, may_be_alike, summary_words
from grandbo.ports import Document, Matching, OrgDocuments
from grandbo.tiers.operations import ALERTS
from grandbo.tiers.records import every_newest
from grandbo.triage.evidence import RECENT_ALERT_DAYS, SEEN_KEYS, Seen, alike, seen, seen_unmarked

RECEIPT_SLACK = timedelta(minutes=10)  # a receipt later than its write by this much (the two clocks) is still read
PAGE = 1_000  # documents a read asks for at once
# How much earlier than the newest write a read saw another may be timed that lands after it: a write's time is its
# transaction's start, so one that began before that newest write and committed after it.
REWRITE_SLACK = timedelta(minutes=1)
log = structlog.get_logger(__name__)


def stored_recent(
    documents: OrgDocuments, alert: Alert, now: datetime, path: Sequence[str] = (), burst_since: datetime | None = None
) -> list[Seen]:
    """The org's received alerts that can count in `alert`'s plan at `now` (see the module), read from the store:
    those of its fingerprint and service received since RECENT_ALERT_DAYS before `now`, those on the services of
    `path` received since `burst_since` (None: no burst is read), and the alert itself once stored. Each one not
    alike `alert` (`evidence.alike`) comes without its words."""
    since = now - timedelta(days=RECENT_ALERT_DAYS)
    reads: list[tuple[Matching, datetime]] = [
        ({("alert", "fingerprint"): alert.fingerprint}, since),
        ({("alert", "service"): alert.service}, since),  # None: those that name none, the only ones alike it
    ]
    if burst_since is not None:  # the alert's own service is read already, unless the burst began before `since`
        reads += [({("alert", "service"): s}, burst_since) for s in path if s != alert.service or burst_since < since]
    found, unreadable = dict[str, Seen](), dict[str, None]()
    fingerprint, service, own = alert.fingerprint, alert.service, documents.get(ALERTS, alert.id)
    marked = marked_words(summary_words(alert.summary))
    marks, ours = frozenset(marked), set(marked.values())

    def take(doc: Document, start: datetime) -> None:
        if doc.doc_id in found or doc.doc_id in unreadable:
            return
        try:
            other, summary = seen_unmarked(doc)
        except UnreadableRecordError:
            unreadable[doc.doc_id] = None
            return
        if other.received_at < start:
            return
        # Only one of its service and another fingerprint is alike by its words, and only one sharing enough words
        # with the alert's marked ones can be: the rest are told without marking their words (a storm's are, mostly).
        if other.fingerprint != fingerprint and other.service == service:
            words = summary_words(summary)
            if may_be_alike(ours, words):
                marked_other = other._replace(words=frozenset(marked_words(words)))
                if alike(marks, fingerprint, service, marked_other):
                    other = marked_other
        found[doc.doc_id] = other

    newest: list[datetime | None] = []  # each read's newest write when it began, on the database's clock
    for match, start in reads:
        newest.append(None)
        for doc in _written_since(documents, match, start - RECEIPT_SLACK):
            newest[-1] = newest[-1] or doc.updated_at
            take(doc, start)
    # An alert written again while the pages were read (redelivered, triaged) moved above them: each read's writes
    # since its newest one less REWRITE_SLACK are listed once more (times of one clock, the database's, whatever the
    # app's says), which in a storm is the last minute's alerts, not the window's; by id only, and the few the first
    # read did not hold are read whole.
    for (match, start), top in zip(reads, newest, strict=True):
        again = start - RECEIPT_SLACK if top is None else max(start - RECEIPT_SLACK, top - REWRITE_SLACK)
        for listed in _written_since(documents, match, again, keys=()):
            if listed.doc_id not in found and listed.doc_id not in unreadable:
                whole = documents.get(ALERTS, listed.doc_id)
                if whole is not None:
                    take(whole, start)
    if own is not None and own.doc_id not in found:
        try:
            found[own.doc_id] = seen(own)
        except UnreadableRecordError:
            unreadable[own.doc_id] = None
    if unreadable:
        log.warning("records.unreadable", what=ALERTS, count=len(unreadable), ids=list(unreadable)[:20])
    return list(found.values())


def _written_since(
    documents: OrgDocuments, match: Matching, since: datetime, keys: tuple[str, ...] = SEEN_KEYS
) -> Iterator[Document]:
    """The alerts holding `match`'s values written at or after `since`, the newest first, a page at a time, with
    `keys` of their data."""
    return every_newest(documents, ALERTS, PAGE, since=since, match=match, keys=keys)
