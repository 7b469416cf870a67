"""Every entry of an organization, of any status, kept by the console between requests: the listing and the
analytics read all of them, and reading 10,000 rows from the store takes longer than a page may. A sign-in
starts that one full read in the background (so it is done by the time the first listing is asked for; the
first page of a process without a sign-in pays it); later pages ask the handle only for what changed since
(one query that finds nothing when nothing changed), so a write costs the entries it touched, not the
corpus.

What it keeps is bounded by memory as well as by count (`max_bytes`, about each entry's text and its object): 16
orgs' whole corpora made no bound at all in a shared process (probe 17: one view of 20,000 small entries added 59
MB). Past it the least recently viewed orgs go; an org larger than the bound alone is read for its view and not
kept (its pages pay its size, not the process's memory).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from grandbo.memory import OrgMemory
from grandbo.model import Entry

MAX_ORGS = 16
ENTRY_OVERHEAD = 800  # about what an Entry takes beyond its title and body: the object, its fields, its lists


def _size(entry: Entry) -> int:
    return ENTRY_OVERHEAD + len(entry.title) + len(entry.body)


@dataclass
class _Held:
    """One org's entries as kept: its generation, the newest sequence number read, the entries by id, and the two
    orders the pages read, each sorted once per change (sorting 20,000 entries on every view cost most of a page)."""

    generation: int | None
    seq: int
    by_id: dict[str, Entry]
    orders: dict[str, list[Entry]] = field(default_factory=dict)
    nbytes: int = 0

    def __post_init__(self) -> None:
        self.nbytes = sum(_size(entry) for entry in self.by_id.values())

    def ordered(self, order: str) -> list[Entry]:
        if order not in self.orders:
            key = (lambda e: e.seq) if order == "seq" else (lambda e: (e.updated_at, e.id))
            self.orders[order] = sorted(self.by_id.values(), key=key, reverse=order != "seq")
        return self.orders[order]


class EntryCache:
    """Kept by (org, generation): an org dropped and created again under its name (maybe by another process) is
    another generation, whose sequence numbers start again, so it is read afresh."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._orgs: OrderedDict[str, _Held] = OrderedDict()

    def entries(self, memory: OrgMemory) -> list[Entry]:
        """The organization's entries (every status), oldest event first."""
        return self._held(memory).ordered("seq")

    def marked(self, memory: OrgMemory) -> tuple[list[Entry], tuple[int | None, int]]:
        """The organization's entries as `entries` gives them, and where they stand: its generation and the newest
        event read (what a view built from them is kept by: they are the same while both are)."""
        held = self._held(memory)
        return held.ordered("seq"), (held.generation, held.seq)

    def newest_first(self, memory: OrgMemory) -> list[Entry]:
        """The organization's entries (every status), the most recently changed first (ties by id, descending)."""
        return self._held(memory).ordered("newest")

    def _held(self, memory: OrgMemory) -> _Held:
        generation = memory.generation()  # read first: entries read after it are of this generation or newer
        with self._lock:
            held = self._orgs.get(memory.org)
        if held is None or held.generation != generation:
            every = memory.entries(include_inactive=True)
            held = _Held(generation, max((entry.seq for entry in every), default=0), {e.id: e for e in every})
        newest, changed = memory.changed_since(held.seq)
        if changed:
            held = _Held(generation, newest, {**held.by_id, **{entry.id: entry for entry in changed}})
        else:
            held.seq = max(held.seq, newest)
        with self._lock:
            if held.nbytes > self.max_bytes:  # alone over the bound: read for this view, not kept
                self._orgs.pop(memory.org, None)
                return held
            self._orgs[memory.org] = held
            self._orgs.move_to_end(memory.org)
            while len(self._orgs) > MAX_ORGS or sum(kept.nbytes for kept in self._orgs.values()) > self.max_bytes:
                self._orgs.popitem(last=False)  # the least recently viewed first
        return held

    def kept_bytes(self) -> int:
        """About what the kept entries take."""
        with self._lock:
            return sum(kept.nbytes for kept in self._orgs.values())

    def warm(self, memory: OrgMemory) -> None:
        """Read the organization's entries ahead of its first listing (on sign-in, in the background)."""
        self.entries(memory)

    def forget(self, org: str) -> None:
        with self._lock:
            self._orgs.pop(org, None)
