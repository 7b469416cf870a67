"""Recalls shared by the alerts of one webhook delivery that ask recall the same question (`SharedRecalls`).

A storm's alerts are often alike: 500 alerts of one Alertmanager group on a few services and a few summaries ask
recall a few dozen questions, and each one's recall searched the whole organization again (at 60,000 memories, a
third of an alert's triage on the embedded store and nine tenths on Postgres). The alerts of a delivery whose
recall would be asked the same topic, k, arm, services, severity and time, over the same index (its epoch and the
sequence numbers of its entries and vectors) and the same facts of the re-ranker (the versions of the ledger,
catalog, settings and incidents it reads: not of the alerts, which each triage writes), get the answer the first
of them got: the answer a recall of their own would have given at that moment. A memory, a vector, an outcome or
a catalog change written meanwhile moves one of them, and the next of them asks again. An answer
given without the query's vector (the embedding provider failed) is not shared: the next one may get it.

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

from grandbo.model import Arm, RecallResult, Severity
from grandbo.retrieval.index import OrgIndex

KEPT = 2  # answers kept at once: one delivery's alike alerts come one after another


class SharedRecalls:
    """The recall answers of one delivery's triage, by what was asked and the index they were read from."""

    def __init__(self) -> None:
        self._kept: OrderedDict[Hashable, RecallResult] = OrderedDict()
        self._lock = threading.Lock()
        self.asked = 0  # recalls asked through it
        self.reused = 0  # of them, answered by an earlier one's answer

    @staticmethod
    def key(
        topic: str, k: int, arm: Arm, services: Sequence[str] | None, severity: Severity | None,
        now: datetime | None, view: OrgIndex, facts: Hashable,
    ) -> Hashable:  # fmt: skip
        """What a recall's answer rests on: its question (the time, when given), the index it reads, and the
        versions its re-ranking facts were read at (`rerank.Facts.read_at`)."""
        marks = (view.epoch, view.entry_seq, view.vector_seq, facts)
        return topic, k, arm, None if services is None else tuple(services), severity, now, marks

    def get(self, key: Hashable) -> RecallResult | None:
        with self._lock:
            self.asked += 1
            found = self._kept.get(key)
            if found is not None:
                self.reused += 1
                self._kept.move_to_end(key)
            return found

    def keep(self, key: Hashable, result: RecallResult) -> None:
        with self._lock:
            self._kept[key] = result
            self._kept.move_to_end(key)
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
