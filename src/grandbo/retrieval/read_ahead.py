"""The entries of an org's new index read ahead of its recalls (`IndexKeeper`, whose state this reads under its lock).

A new index leaves its entries to the reads (`OrgIndex.apply`: no row parsed that no recall returns); after a
later read of the org, they are cached on the keeper's fetch thread, the newest first, so that a topic asked first
reads none of its entries, and only while the kept indexes stay within the memory bound (`bound.MemoryBound`).
"""

from __future__ import annotations

import itertools
import weakref
from concurrent.futures import ThreadPoolExecutor

import structlog

from grandbo.ports import IndexFeed
from grandbo.retrieval.bound import MemoryBound
from grandbo.retrieval.index import OrgIndex, entries_of, entries_size, space_of

log = structlog.get_logger(__name__)


class ReadAhead(MemoryBound):
    """The read-ahead's part of `IndexKeeper` (which sets every attribute below)."""

    PRECACHE_CHUNK = 500  # entries `_precache` reads and caches at once (the index's lock held for one chunk)

    _feed: IndexFeed
    _fetcher: ThreadPoolExecutor  # the fetch thread, which reads ahead too
    _fetches_closed: bool

    def _precache_if_owed(self, org_id: str, index: OrgIndex) -> None:
        if not index.precache_owed:
            return
        index.precache_owed = False
        with self._lock:
            if not self._fetches_closed:
                self._fetcher.submit(self._precache, org_id)  # its name: the bound may let the index go meanwhile

    def _precache(self, org_id: str) -> None:
        """Cache a new index's entries (it leaves them to the reads, `OrgIndex.apply`), the newest first, on the
        fetch thread after a later read, so that a topic asked first reads none of its entries: from one snapshot at
        the index's marks (none once a refresh applied rows since: a write, a purge or an erasure uncaches what it
        changed only in what is cached when it applies), a chunk at a time, while the kept indexes stay within the
        bound (never letting another's caches go for it)."""
        # Held weakly between chunks: an index the bound lets go meanwhile must not be kept alive here (`_evict`).
        with self._lock:
            kept = self._indexes.get(org_id)
        if kept is None:
            return
        held, limit = weakref.ref(kept), kept.ENTRY_PREFILL
        del kept
        try:
            with self._feed.snapshot(org_id, vectors=False) as snapshot:
                at = snapshot.marks
                records = iter(snapshot.recent(0, limit))
                while chunk := list(itertools.islice(records, self.PRECACHE_CHUNK)):
                    entries = entries_of(chunk)
                    index = held()
                    if index is None or not self._precaching(org_id, index, entries_size(entries.values())):
                        return
                    with index.lock:
                        if (index.entry_seq, index.epoch, space_of(index)) != (at.entry_seq, at.epoch, at.space):
                            return
                        index.cache_behind(entries)
                    self._account(org_id, index)
                    del index
        except Exception as error:  # a cache: the reads read the entries instead
            log.warning("index.entries_not_precached", org_id=org_id, error=str(error)[:200])

    def _precaching(self, org_id: str, index: OrgIndex, size: int) -> bool:
        """Whether `index` is still the org's kept one, and `size` more bytes fit the bound."""
        with self._lock:
            return self._indexes.get(org_id) is index and self._total + size <= self.max_bytes
