"""Every entry of an organization, of any status, kept by the console between requests for its analytics (the
growth and incidents-per-service charts count every entry; the memory explorer pages from the store and reads
none of it): reading 10,000 rows from the store takes longer than a page may. A sign-in starts that one full read
in the background (so it is done by the time analytics is asked for); later views ask the handle only for what
changed since (one query that finds nothing when nothing changed), and apply it in place: a write costs the
entries it touched, not a copy of the org's entries and a sort of them (probe 20a F0: at 228,000 entries each
change copied the dict and summed every entry's size again, and the next view sorted them all).

What it keeps is bounded by memory as well as by count (`max_bytes`, about each entry's text and its object): 16
orgs' whole corpora made no bound at all in a shared process (probe 17: one view of 20,000 small entries added 59
MB). Past it the least recently viewed orgs go; of an org larger than the bound alone only its mark is kept (its
generation and newest event), so its analytics are read whole when its data changed, not on every view.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from grandbo.memory import OrgMemory
from grandbo.model import Entry

MAX_ORGS = 16
ENTRY_OVERHEAD = 800  # about what an Entry takes beyond its title and body: the object, its fields, its lists
Mark = tuple[int | None, int]  # an org's generation and the newest event read: its entries are the same while both are


def _size(entry: Entry) -> int:
    return ENTRY_OVERHEAD + len(entry.title) + len(entry.body)


@dataclass
class _Held:
    """One org's entries as kept: its generation, the newest sequence number read, and the entries by id in the
    order of their last event (None: too large to keep, the mark only), changed in place under `lock`."""

    generation: int | None
    seq: int
    by_id: dict[str, Entry] | None
    nbytes: int = 0
    seen: int = 0  # what its entries took when last read whole, kept only as a mark: read again once they fit
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, newest: int, changed: list[Entry]) -> None:
        """Take the entries events up to `newest` touched: each moves to the end, as its last event did."""
        self.seq = max(self.seq, newest)
        if self.by_id is None:
            return
        for entry in sorted(changed, key=lambda e: e.seq):
            old = self.by_id.pop(entry.id, None)
            if old is not None and old.seq > entry.seq:  # another view applied a newer read first
                entry = old
            self.nbytes += _size(entry) - (_size(old) if old is not None else 0)
            self.by_id[entry.id] = entry

    def copied(self) -> list[Entry] | None:
        with self.lock:
            return None if self.by_id is None else list(self.by_id.values())


class EntryCache:
    """Kept by (org, generation): an org dropped and created again under its name (maybe by another process) is
    another generation, whose sequence numbers start again, so it is read afresh."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._orgs: OrderedDict[str, _Held] = OrderedDict()

    def entries(self, memory: OrgMemory) -> list[Entry]:
        """The organization's entries (every status), oldest event first."""
        return self.marked(memory)[0]()

    def marked(self, memory: OrgMemory) -> tuple[Callable[[], list[Entry]], Mark]:
        """Where the organization's entries stand (its generation and the newest event read: a view built from
        them is kept by it), and how to have them as of then or newer: a copy of those kept, or a read."""
        held, read = self._held(memory)

        def every() -> list[Entry]:  # a copy, made when asked (a view whose numbers are kept never asks)
            kept = held.copied()
            return kept if kept is not None else read if read is not None else memory.entries(include_inactive=True)

        return every, (held.generation, held.seq)

    def _held(self, memory: OrgMemory) -> tuple[_Held, list[Entry] | None]:
        """The org's kept entries caught up, and, when it was read whole now but is too large to keep, what was read."""
        generation = memory.generation()  # read first: entries read after it are of this generation or newer
        with self._lock:
            held = self._orgs.get(memory.org)
        read = None
        if held is None or held.generation != generation or (held.by_id is None and held.seen <= self.max_bytes):
            read = memory.entries(include_inactive=True)
            held = _Held(generation, max((entry.seq for entry in read), default=0), {})
            held.apply(held.seq, read)
        with held.lock:
            held.apply(*memory.changed_since(held.seq))
            if held.nbytes > self.max_bytes:  # alone over the bound: its mark kept, not its entries
                read = list(held.by_id.values()) if read is not None and held.by_id is not None else None
                held.by_id, held.seen, held.nbytes = None, held.nbytes, 0
        with self._lock:
            self._orgs[memory.org] = held
            self._orgs.move_to_end(memory.org)
            while len(self._orgs) > MAX_ORGS or sum(kept.nbytes for kept in self._orgs.values()) > self.max_bytes:
                self._orgs.popitem(last=False)  # the least recently viewed first
        return held, read

    def kept_bytes(self) -> int:
        """About what the kept entries take."""
        with self._lock:
            return sum(kept.nbytes for kept in self._orgs.values())

    def warm(self, memory: OrgMemory) -> None:
        """Read the organization's entries ahead of its first analytics (on sign-in, in the background)."""
        self._held(memory)

    def forget(self, org: str) -> None:
        with self._lock:
            self._orgs.pop(org, None)
