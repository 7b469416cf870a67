"""The memory bound of the indexes a process keeps (`IndexKeeper`, whose state this reads and changes under its lock).

The indexes kept take at most about `max_bytes` together (`OrgIndex.nbytes`). Past it, caches go before whole
indexes (their entries and term weights, read again at a row's cost, against an image's load), and the indexes over
a `HOG_SHARE`-th of the bound go before the others, the org just read included (an org whose index does not fit its
share pays its own loads); within each, the least recently used first.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable

import structlog

from grandbo.retrieval.index import OrgIndex

log = structlog.get_logger(__name__)


class MemoryBound:
    """The bound's half of `IndexKeeper` (which sets every attribute below)."""

    HOG_SHARE = 4  # an index over this share of the bound goes before a recently read other's caches (`_account`)
    IDLE_SECONDS = 30.0  # an index not read for this long goes before the large ones
    REMADE_SECONDS, WARN_SECONDS = 60.0, 300.0  # `_remade`: an index made again soon after the bound let it go

    max_bytes: int
    counts: dict[str, int]
    _lock: threading.Lock
    _indexes: OrderedDict[str, OrgIndex]
    _sizes: dict[str, int]
    _read_at: dict[str, float]  # org -> time.monotonic() of its last read
    _shed: set[str]  # orgs whose caches were let go and that no read has used since
    _total: int
    _saving: set[str]
    _leaving: dict[str, OrgIndex]  # let go with a save queued: held until it is saved (`_evict`)
    _gone: weakref.WeakValueDictionary[str, OrgIndex]  # let go, and still held by a read of it (`_evict`)
    _evicted_at: OrderedDict[str, float]  # org -> time.monotonic() it was let go
    _warned_at: float | None

    def _let_go(self, org_id: str) -> None:
        """Forget the org's index, its size and its shed mark (the caller holds `_lock`)."""
        self._indexes.pop(org_id, None)
        self._gone.pop(org_id, None)
        self._total -= self._sizes.pop(org_id, 0)
        self._shed.discard(org_id)
        self._read_at.pop(org_id, None)

    def kept_bytes(self) -> int:
        """About what the kept indexes take together."""
        with self._lock:
            return self._total

    def _account(self, org_id: str, index: OrgIndex) -> None:
        """Note the index's size; while the kept ones take too much, let caches go, then whole indexes: first of
        the others not read for `IDLE_SECONDS`, then of the indexes over a `HOG_SHARE`-th of the bound (the org just
        read included), then of the others, the least recently used first each time.

        Caches before indexes: with many orgs each index's cached entries (up to its whole corpus) took as much as
        its vectors, so the bound let whole indexes go to keep the caches of others, and a process serving orgs at
        random loaded an image for one recall in eight (200 orgs of 2,000 entries against the 1 GB default).
        Large indexes before the others: one org's 40 MB index under a 48 MB bound let every other org's index go at
        each of its reads, and their recalls' p95 went from 30 to 204 ms (probe 16 F4); now the large org loads its
        own image again, and the others keep theirs. Idle ones before the large: a large org that fits the bound but
        for orgs read once and left loaded its image at every read to keep them (review)."""
        size = index.nbytes()
        with self._lock:
            if self._indexes.get(org_id) is not index:
                return
            self._total += size - self._sizes.get(org_id, 0)
            self._sizes[org_id] = size
            self._shed.discard(org_id)  # read now: its caches fill again
            now = self._read_at[org_id] = time.monotonic()
            if self._total <= self.max_bytes:
                return
        idle = now - self.IDLE_SECONDS
        tiers: list[tuple[Callable[[str], bool], bool]] = [
            (lambda other: other != org_id and self._read_at.get(other, idle) <= idle, False),
            (lambda other: self._sizes.get(other, 0) > self.max_bytes // self.HOG_SHARE, True),
            (lambda other: other != org_id, False),
        ]
        for which, saved in tiers:
            self._shed_caches(which)
            self._evict(which, saved=saved)

    def _shed_caches(self, which: Callable[[str], bool]) -> None:
        """While the kept indexes take too much, let go of the caches of those `which` admits, least recently used
        first (an index in use right now is passed over: not the least recently used for long)."""
        with self._lock:
            if self._total <= self.max_bytes:
                return
            candidates = [(o, kept) for o, kept in self._indexes.items() if o not in self._shed and which(o)]
        for other, kept in candidates:
            if self.kept_bytes() <= self.max_bytes:
                return
            if not kept.lock.acquire(blocking=False):
                continue
            try:  # noted before the org's lock goes: a read of it right after records its full size, not this
                kept.drop_caches()
                shed = kept.nbytes()
                with self._lock:  # a leaf lock: nothing holding it waits for an index's
                    if self._indexes.get(other) is kept and shed < self._sizes.get(other, 0):
                        self._total += shed - self._sizes[other]
                        self._sizes[other] = shed
                        self.counts["shed"] += 1
                        self._shed.add(other)
            finally:
                kept.lock.release()

    def _evict(self, which: Callable[[str], bool], *, saved: bool = False) -> None:
        """While the kept indexes take too much, let go of those `which` admits, least recently used first; one
        index is always kept. `saved`: one whose save is queued is saved before its memory goes (`_leaving`, one
        at a time; a read of it meanwhile takes it back, `IndexKeeper._kept`), as a
        large org's index let go at each of its reads would otherwise never save one, and each load of it would
        apply more rows (the others' saves hold no index: a process loading many orgs cold queues many).

        An index let go is remembered weakly (`_gone`) while a read still holds it: a read of the org meanwhile
        takes that one back (`IndexKeeper._kept`) rather than load another copy. An org whose index alone is over
        the bound is let go at each of its reads, and four recalls of it at once held four copies and loaded its
        image four times (a 90 MB index under a 64 MB bound: the process 300 MB past the bound, probe 23b)."""
        with self._lock:
            for victim in [o for o in self._indexes if which(o)]:
                if self._total <= self.max_bytes or len(self._indexes) <= 1:
                    return
                if saved and victim in self._saving and not self._leaving:  # one at a time: memory past the bound
                    self._leaving[victim] = self._indexes[victim]
                index = self._indexes[victim]
                self._let_go(victim)
                self._gone[victim] = index  # gone with its last read
                self.counts["evicted"] += 1
                self._evicted_at[victim] = time.monotonic()
                while len(self._evicted_at) > 4 * len(self._indexes) + 64:  # bounded: the oldest go
                    self._evicted_at.popitem(last=False)

    def _remade(self, org_id: str) -> None:
        """Count an index made again soon after the bound let it go, and say so (a warning at most every
        WARN_SECONDS): a process whose orgs do not fit keeps loading images and reading entries again (under
        `grandbo bench tenants`, 200 orgs of 2,000 entries over the 1,024 MB default: about half of what a
        random-org recall costs beyond a warm one), and nothing else showed it."""
        now = time.monotonic()
        with self._lock:
            evicted = self._evicted_at.pop(org_id, None)
            if evicted is None or now - evicted > self.REMADE_SECONDS:
                return
            self.counts["remade"] += 1
            if self._warned_at is not None and now - self._warned_at < self.WARN_SECONDS:
                return
            self._warned_at = now
            kept, count, remade = self._total, len(self._indexes), self.counts["remade"]
        log.warning("index.memory_bound_too_small", org_id=org_id, kept_mb=kept >> 20, max_mb=self.max_bytes >> 20,
                    kept_orgs=count, remade=remade, remedy="raise GRANDBO_INDEX_MEMORY_MB until it holds every org "
                    "this process serves (docs/benchmarks.md)")  # fmt: skip
