"""The API keys a process verified a moment ago (`VerifiedKeys`), each with the incarnation of the organization it
was read in, so that a handle opened for it acts for that organization only (`grandbo.incarnation`)."""

from __future__ import annotations

import hashlib
import threading
import time
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from grandbo.tiers.keys import ApiKey


def key_hash(key: str) -> str:
    """What a key is stored and cached as (SHA-256 of its text)."""
    return hashlib.sha256(key.encode()).hexdigest()


class Verified(NamedTuple):
    """An active key's record, and the incarnation of the organization it was read in (None: not read)."""

    record: ApiKey
    incarnation: int | None


class VerifiedKeys:
    """Keys this process verified in the last `seconds`, by hash: a request with a key seen a moment ago reads
    no store (under load that read was a fifth of a recall's server time, measured with py-spy). A key revoked
    through this process is refused from the next request on; one revoked by another process (the CLI) is
    trusted until `seconds` after this process last read it from the store, so for at most `seconds` after the
    revocation.

    Each key is kept with its organization's generation (`OrgMemory.generation`) when it was read, and is
    trusted only while that is the newest generation this process has seen of the org (`seen`: every
    verification that reads the store, and every refresh of the org's search index, which reads its marks on
    each recall, tell it): a key of a dropped org is never taken for one of a same-named org created after it,
    once this process has read anything of the new one. Before that, it is kept with the org's incarnation
    too: the handle it authenticates is opened for that incarnation, and reads again that it is still the org's
    before its first read or write (`store.scoped.confirming`), so it never acts on the new org either.

    A verification takes a `ticket` before it reads the store and hands it to `put`: a record read before a
    revocation (or an organization's deletion) in this process ended is not kept, since the read may have
    seen the key still active while the revocation was clearing it."""

    def __init__(self, seconds: float = 2.0) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._by_hash: dict[str, tuple[Verified, float, str, int | None]] = {}
        self._generations: dict[str, int] = {}  # the newest generation seen of each org (they only grow)
        self._forgotten = 0  # how many times keys were forgotten: what a ticket holds

    def verified(self, hashed: str) -> Verified | None:
        """The key of hash `hashed`, with its org's incarnation, if this process verified it a moment ago."""
        with self._lock:
            held = self._by_hash.get(hashed)
            if held is None or time.monotonic() - held[1] >= self.seconds:
                return None
            verified, _, org, generation = held
            return verified if generation is not None and generation == self._generations.get(org) else None

    def get(self, hashed: str) -> ApiKey | None:
        found = self.verified(hashed)
        return found.record if found is not None else None

    def held(self, key: str) -> Verified | None:
        """`key`'s record and org incarnation if this process verified it a moment ago (`verified`); reads no store."""
        return self.verified(key_hash(key))

    def seen(self, org: str, generation: int | None) -> None:
        """This process read generation `generation` of `org` (None: there is no such org now)."""
        with self._lock:
            if generation is None:
                self._generations.pop(org, None)
            elif generation > self._generations.get(org, 0):
                if len(self._generations) > 100_000:  # org names come from outside: never grow without bound
                    self._generations.clear()
                self._generations[org] = generation

    def ticket(self) -> int:
        """Taken before the store is read; `put` keeps a record only if nothing was forgotten since."""
        with self._lock:
            return self._forgotten

    def put(
        self, hashed: str, record: ApiKey, ticket: int, org: str, generation: int | None, incarnation: int | None = None
    ) -> None:
        """Keep a key read from the store of `org`, whose generation was `generation` (and incarnation
        `incarnation`) before it was read."""
        self.seen(org, generation)
        if self.seconds <= 0:  # caching off: nothing would ever be read back
            return
        with self._lock:
            if ticket != self._forgotten:  # a revocation ended while this record was read: it may be stale
                return
            if len(self._by_hash) > 10_000:  # keys come from outside: never grow without bound
                self._by_hash.clear()
            self._by_hash[hashed] = (Verified(record, incarnation), time.monotonic(), org, generation)

    def forget(self, key_id: str | None = None) -> None:
        """Forget a key (by id), or every key; a verification under way when this is called is not kept."""
        with self._lock:
            self._forgotten += 1
            if key_id is None:
                self._by_hash.clear()
            else:
                self._by_hash = {h: held for h, held in self._by_hash.items() if held[0].record.id != key_id}
