"""Every entry of an organization, of any status, kept by the console between requests: the listing and the
analytics read all of them, and reading 10,000 rows from the store takes longer than a page may. A sign-in
starts that one full read in the background (so it is done by the time the first listing is asked for; the
first page of a process without a sign-in pays it); later pages ask the handle only for what changed since
(one query that finds nothing when nothing changed), so a write costs the entries it touched, not the
corpus."""

from __future__ import annotations

import threading
from collections import OrderedDict

from grandbo.memory import OrgMemory
from grandbo.model import Entry

MAX_ORGS = 16


class EntryCache:
    """Kept by (org, generation): an org dropped and created again under its name (maybe by another process) is
    another generation, whose sequence numbers start again, so it is read afresh."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._orgs: OrderedDict[str, tuple[int | None, int, dict[str, Entry]]] = OrderedDict()

    def entries(self, memory: OrgMemory) -> list[Entry]:
        """The organization's entries (every status), oldest event first."""
        generation = memory.generation()  # read first: entries read after it are of this generation or newer
        with self._lock:
            held = self._orgs.get(memory.org)
        if held is None or held[0] != generation:
            every = memory.entries(include_inactive=True)
            by_id = {entry.id: entry for entry in every}
            seq = max((entry.seq for entry in every), default=0)
        else:
            _, seq, by_id = held
        newest, changed = memory.changed_since(seq)
        if changed:
            by_id = {**by_id, **{entry.id: entry for entry in changed}}
        with self._lock:
            self._orgs[memory.org] = (generation, newest, by_id)
            self._orgs.move_to_end(memory.org)
            while len(self._orgs) > MAX_ORGS:
                self._orgs.popitem(last=False)
        return sorted(by_id.values(), key=lambda entry: entry.seq)

    def warm(self, memory: OrgMemory) -> None:
        """Read the organization's entries ahead of its first listing (on sign-in, in the background)."""
        self.entries(memory)

    def forget(self, org: str) -> None:
        with self._lock:
            self._orgs.pop(org, None)
