"""Recalls shared by the alerts of one webhook delivery that ask recall the same question (`SharedRecalls`).

A storm's alerts are often alike: 500 alerts of one Alertmanager group on a few services and a few summaries ask
recall a few dozen questions, and each one's recall searched the whole organization again (at 60,000 memories, a
third of an alert's triage on the embedded store and nine tenths on Postgres). The alerts of a delivery whose
recall would be asked the same topic, k, arm, services, severity and time, over the same index (its epoch and the
sequence numbers of its entries and vectors) and the same facts of the re-ranker (the versions of the ledger,
catalog, settings and incidents it reads: not of the alerts, which each triage writes), get the answer the first
of them got while it is the answer a recall of their own would give at their own time: the re-ranking weighs each
memory's age at the time of the question, so an answer is kept with the time it was made at and the time until
which no age it rests on changes (`rerank.steady_until`: a day of age, a half day of a hit's note, the end of a
grace); a later alert past that has the same candidates (both arms' hits) re-ranked at its own time. A memory, a
vector, an outcome or a catalog change written meanwhile moves one of the marks, and the next of them asks again
too. An answer given without the query's vector (the embedding provider failed) is not shared: the next one may
get it.

A delivery's triage orders its alike alerts next to each other (`ingest.flow`), and an org's alerts are triaged one
at a time in a process: the last answer kept serves them all, whatever the delivery's size. KEPT holds one more (two
of an org's tasks at once, with GRANDBO_WORK_ORG_SHARE at 1). A kept answer is a recall result with its memories
whole (a few hundred KB at most), held until the delivery's last alert is triaged: while hundreds of organizations'
deliveries wait in the pool, a few each, not one per question asked.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from datetime import datetime
from typing import Any

from grandbo.model import Arm, RecallResult, Severity
from grandbo.retrieval.index import OrgIndex

KEPT = 2  # answers kept at once: one delivery's alike alerts come one after another


class SharedRecalls:
    """The recall answers of one delivery's triage, by what was asked and the index they were read from."""

    def __init__(self) -> None:
        self._kept: OrderedDict[Hashable, tuple[RecallResult, datetime, datetime, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.asked = 0  # recalls asked through it
        self.reused = 0  # of them, answered by an earlier one's answer
        self.rescored = 0  # of them, answered by re-ranking an earlier one's candidates at their own time

    @staticmethod
    def key(
        topic: str, k: int, arm: Arm, services: Sequence[str] | None, severity: Severity | None, view: OrgIndex,
        facts: Hashable,
    ) -> Hashable:  # fmt: skip
        """What a recall's answer rests on, but its time: its question, the index it reads, and the versions its
        re-ranking facts were read at (`rerank.Facts.read_at`)."""
        marks = (view.epoch, view.entry_seq, view.vector_seq, facts)
        return topic, k, arm, None if services is None else tuple(services), severity, marks

    def get(self, key: Hashable, now: datetime) -> RecallResult | None:
        """The answer kept for `key` if a recall of its own at `now` would give the same, else None."""
        with self._lock:
            self.asked += 1
            found = self._kept.get(key)
            if found is None or not found[1] <= now < found[2]:
                return None
            self.reused += 1
            self._kept.move_to_end(key)
            return found[0]

    def found(self, key: Hashable) -> Any:
        """What the answer kept for `key` rests on before its re-ranking (its arms' candidates), for a recall at a
        time it does not hold for; None when none is kept."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self.rescored += 1
            return None if kept is None else kept[3]

    def keep(self, key: Hashable, result: RecallResult, since: datetime, until: datetime, found: Any) -> None:
        """Keep `result`, the answer at `since`, which every recall of `key` until `until` would give too, and what
        it was `found` from (re-ranked again at a later time)."""
        with self._lock:
            self._kept[key] = (result, since, until, found)
            self._kept.move_to_end(key)
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
