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

A handle can also be opened for an incarnation known beforehand: the one an API key was verified against (kept
with the key in the process's key cache), or the one a re-driven piece of work was recorded in. Its writes are
checked against that number from the first, and its first read (`confirm`, through `store.scoped.confirming`)
reads the org's incarnation once more: a key of a dropped org, or its work, never reads or writes the org created
again under its name, however long ago the key was checked or the work claimed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from grandbo.errors import OrgDroppedError

# When the org went, and what to do: the refusal's message (`Incarnation.dropped`).
WHILE_RUNNING = ("while this work ran", "Run it again if it belongs in the organization of that name now.")
AFTER_KEY = (
    "after this request's API key was checked, and its keys with it",
    "Send a key of the organization of that name now (`grandbo keys create --org ORG`).",
)
AFTER_SIGN_IN = (
    "after this console session was signed in, and its keys with it",
    "Sign in again with a key of the organization of that name now (`grandbo keys create --org ORG`).",
)


class Incarnation:
    """The incarnation of `org_id` one handle writes for: unknown (None) until its first write or `pin`, then
    fixed; or `number`, known when the handle is opened, and confirmed at its first read. `read` reads the
    org's incarnation now (None: no such org). `why` says when the org went, for the message of the refusal."""

    def __init__(
        self,
        org_id: str,
        read: Callable[[], int | None],
        number: int | None = None,
        why: tuple[str, str] = WHILE_RUNNING,
    ) -> None:
        self.org_id, self._read, self.why = org_id, read, why
        self._number = number
        self.confirmed = number is None  # a number known beforehand is read again before the handle's first read
        self._lock = threading.Lock()

    @property
    def number(self) -> int | None:
        """The incarnation kept (None: not known yet)."""
        return self._number

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
        self.confirmed = True

    def confirm(self) -> None:
        """Before a read of a handle opened for a known incarnation: `pin`, once (OrgDroppedError when the org is
        gone or is another one now); nothing for any other handle, whose reads are of the org of its name."""
        if not self.confirmed:
            self.pin()

    def seen(self, found: int | None) -> None:
        """The org's incarnation `found` by a read the handle made anyway (a recall's watermarks): confirms a handle
        opened for a known one as `confirm` would, without a read of its own (OrgDroppedError when it is another
        one, or none); nothing for any other handle, or one confirmed already (as `confirm`)."""
        if self.confirmed:
            return
        if found is None or found != self._number:
            raise self.dropped()
        self.confirmed = True

    def dropped(self) -> OrgDroppedError:
        when, remedy = self.why
        return OrgDroppedError(
            f"Organization {self.org_id!r} was deleted {when} (and may have been created again since, as a new "
            f"organization, which this never reads or writes): nothing more of it was written. {remedy}",
            detail={"org_id": self.org_id},
        )
