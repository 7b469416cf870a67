"""What an organization's entries add up to, counted by the store (`ports.OrgEntries.figures`): the analytics
page's charts over entries, without reading them.

The page counted them in the process from every entry of the org (the console kept each org's entries for it):
the first view of an org the process had not seen read them all, 26-57 s of the shared process's GIL at 228,000
entries (probe 20a), and each other org's requests on that process waited meanwhile. The store counts them in
SQL now and hands up a few numbers per day and per service. What the SQL cannot work out alike on both backends,
the incident a memory belongs to (a pattern, Python's `str` of a JSON value), is worked out by the projection
when the entry is written and kept beside it (`incident_key`, migration 24).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

INCIDENT_ID = re.compile(r"\bINC-\d+\b")
INCIDENT_KINDS = ("finding", "post-mortem")  # the kinds whose entries tell an incident (`Kind`'s values)


def incident_of(entry_id: str, tags: Sequence[str], meta: Mapping[str, Any]) -> str | None:
    """The incident a memory belongs to: meta.incident_id (the incident tier's findings), else an INC-<n> id
    in its id or tags (the shipped set's and hand-written memories' convention)."""
    value = meta.get("incident_id")
    if value:
        return str(value)
    for text in (entry_id, *tags):
        found = INCIDENT_ID.search(text)
        if found:
            return found.group(0)
    return None


def incident_key(entry_id: str, tags: Sequence[str], meta: Mapping[str, Any]) -> str:
    """What the store keeps of an entry as its incident (`incident_key`): its incident, else its own id (its
    findings and post-mortem are one incident; a memory of none is one of its own)."""
    return incident_of(entry_id, tags, meta) or entry_id


@dataclass(frozen=True)
class EntryFigures:
    """An organization's entries counted, read in one snapshot.

    `stored` and `happened` count every entry (any status) by the day of its creation and of what it tells, as the
    entry read from the same store gives the day (its time's own zone on the embedded store, the session's on
    Postgres). `incidents`: per service, the incidents its findings and post-mortems that are not superseded belong
    to (`incident_key`); `linked`: of those, the (service, incident) pairs whose incident is one of the ids asked
    about, so that a caller counts the union with incidents it knows of otherwise (the incident tier's) exactly."""

    entries: int = 0
    seq: int = 0  # the newest event that shaped one of them: the figures are the same while it is
    stored: dict[date, int] = field(default_factory=dict)
    happened: dict[date, int] = field(default_factory=dict)
    incidents: dict[str, int] = field(default_factory=dict)
    linked: list[tuple[str, str]] = field(default_factory=list)
