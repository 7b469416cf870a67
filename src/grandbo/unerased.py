"""Work that copies an organization's text into other records writes nothing an erasure erased after it read it.

An erasure (`purge`, `purge-text`) rewrites every stored form of the text it finds as it runs, and each document it
rewrites moves to its next version, so a read-modify-write of that document is stale after it
(`store.sql.erasing.BUMPED`). Work that copies text into other records has no version to expect: an incident's sync
writes its findings into memory entries, a triage keeps recall's answer (the memories' text) with its alert, an
incident opened from alerts copies their summaries into a new document. Such
work that read before an erasure and wrote after it put the erased text back, into an entry or a kept recall the
erasure had searched before it held the text.

So every erasure counts itself in its transaction (`orgs.erasures`, migration 27: `store.sql.erasing.counted`), and
work run through `Unerased.run` reads that count before it reads anything. Every write it makes is checked by the
store inside the write's transaction, under the org's writer lock, in the read of the org's row the write makes
anyway (`_require_org`, where the handle's incarnation is checked: `grandbo.incarnation`), so no erasure can commit
between the check and the write. A write after an erasure committed is refused (`ErasedMeanwhileError`), and the
work runs again from what the org holds now. What such work wrote before the erasure committed, the erasure finds:
purge-text searches the entries again after its count (`tiers.erasure`), a purge's rewrite reads again the documents
written since it looked. The fence is the running thread's (a context variable): a write of the same handle from
other work is not held to it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TypeVar

from grandbo.errors import ErasedMeanwhileError

T = TypeVar("T")
ATTEMPTS = 8  # runs of one piece of work, each after an erasure of its org committed while the one before ran
_FENCE: ContextVar[tuple[str, int] | None] = ContextVar("grandbo_unerased", default=None)


def check(org_id: str, erasures: int) -> None:
    """Called by the store inside a write of `org_id`, holding its writer lock, with the org's count of erasures:
    ErasedMeanwhileError when the running work of `Unerased.run` for that org read it before one of them."""
    fence = _FENCE.get()
    if fence is not None and fence[0] == org_id and fence[1] != erasures:
        raise ErasedMeanwhileError(
            f"An erasure of organization {org_id!r} committed after this work read what it writes, so it was not "
            "written: it may have held the erased text.",
            detail={"org_id": org_id},
        )


class Unerased:
    """The fence of one organization's handle (`OrgMemory.unerased`): `read` reads the org's count of erasures."""

    def __init__(self, org_id: str, read: Callable[[], int]) -> None:
        self.org_id, self._read = org_id, read

    def run(self, work: Callable[[], T]) -> T:
        """Run `work`, which reads the org's text and writes from it, so that none of its writes commits after an
        erasure of the org that committed after it began: such a write raises ErasedMeanwhileError, and `work` runs
        again from the start, up to ATTEMPTS times. Within another `run` for the org, `work` runs once under that
        one's fence (which runs it all again)."""
        held = _FENCE.get()
        if held is not None and held[0] == self.org_id:
            return work()
        for attempt in range(ATTEMPTS):
            token = _FENCE.set((self.org_id, self._read()))
            try:
                return work()
            except ErasedMeanwhileError:
                if attempt + 1 == ATTEMPTS:
                    raise
            finally:
                _FENCE.reset(token)
        raise AssertionError("unreachable")  # the loop returns or raises
