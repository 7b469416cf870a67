"""An organization's corpus counts (`OrgMemory.stats`) as the console's entry page shows them, read at most once
every STATS_SECONDS per org and process.

The counts join every active entry of the org with its vector: 0.4-1.7 s of the database at 150,000 entries, on each
view of any entry's page, so a few viewers clicking through one large org kept the shared machine's cores busy. The
page says how current they are; the entry's own embedding is read on every view."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from grandbo.memory import OrgMemory
from grandbo.model import CorpusStats

STATS_SECONDS = 10.0  # as the analytics page's: the counts change with no write of the org's (the worker embeds)
MAX_ORGS = 64


class CorpusCounts:
    """Each org's counts as last read, by its generation (an org dropped and created again under its name is read
    afresh), read again once older than `seconds`; at most `max_orgs` orgs, the least recently viewed going first."""

    def __init__(self, seconds: float = STATS_SECONDS, max_orgs: int = MAX_ORGS) -> None:
        self.seconds, self.max_orgs = seconds, max_orgs
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, tuple[int | None, float, CorpusStats]] = OrderedDict()

    def get(self, memory: OrgMemory) -> tuple[CorpusStats, float]:
        """The org's counts and how many seconds ago they were read."""
        generation, now = memory.generation(), time.monotonic()
        with self._lock:
            kept = self._kept.get(memory.org)
        if kept is None or kept[0] != generation or now - kept[1] >= self.seconds:
            kept = (generation, now, memory.stats())
        with self._lock:
            self._kept[memory.org] = kept
            self._kept.move_to_end(memory.org)
            while len(self._kept) > self.max_orgs:
                self._kept.popitem(last=False)
        return kept[2], now - kept[1]
