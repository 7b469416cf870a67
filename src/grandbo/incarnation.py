"""Which incarnation of an organization a handle writes for: a dropped org takes every write in flight with it.

An organization's name can be dropped and taken again. A task that holds a handle of the first one (an import
going chunk by chunk, a write-behind on a background thread, an erasure, a re-driven sync) must never write into
the second: probe 21 filed a deleted org's REST import into the org created under its name (F7). So every org
is given an incarnation when it is created (`orgs.incarnation`, migration 26): a store-wide number from the
epoch's counter, never given twice and never changed, unlike the epoch, which a rebuild or a new language
moves. Each handle holds an `Incarnation`, learned from the handle's first write (or `pin`), and hands it to
every write of the org; the store checks it inside the write's transaction, under the org's writer lock, in the
read of the org's row that the write makes anyway (`_require_org`): no extra round trip, and no drop or
re-creation can come between the check and the write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from grandbo.errors import OrgDroppedError


class Incarnation:
    """The incarnation of `org_id` one handle writes for: unknown (None) until its first write or `pin`, then
    fixed. `read` reads the org's incarnation now (None: no such org)."""

    def __init__(self, org_id: str, read: Callable[[], int | None]) -> None:
        self.org_id, self._read = org_id, read
        self._number: int | None = None
        self._lock = threading.Lock()

    def check(self, found: int | None) -> None:
        """Called by the store inside a write of the org, holding its writer lock, with the org's incarnation
        (None: there is no such org, which the store refuses on its own). The first one found is kept; a write
        of a handle whose org is gone, or is another one of the same name, raises OrgDroppedError."""
        number = self._number
        if number is None:
            with self._lock:  # two first writes at once (a write-behind's thread): one number is kept
                if self._number is None:
                    self._number = found
                    return
                number = self._number
        if found != number:
            raise self.dropped()

    def pin(self) -> None:
        """Read the org's incarnation now and keep it, as a write would (or check it against the one kept): what
        work whose first write comes long after its handle was opened (a REST import uploads its export first)
        calls as it starts. OrgDroppedError when the org is gone, or is another one."""
        found = self._read()
        if found is None:
            raise self.dropped()
        self.check(found)

    def dropped(self) -> OrgDroppedError:
        return OrgDroppedError(
            f"Organization {self.org_id!r} was deleted while this work ran (and may have been created again since, "
            "as a new organization): nothing more of it was written. Run it again if it belongs in the "
            "organization of that name now.",
            detail={"org_id": self.org_id},
        )
