"""Whose export a record is: the fields that mark each vendor's records, so a reader refuses another vendor's file
up front, naming the reader that reads it, instead of filing its records as untitled, open incidents.

Every vendor's record has an `id`; what sets them apart is the rest: a PagerDuty incident has a `title`, an
`incident_number` and a `service`; an incident.io one a `name`, an `incident_status` and a `reference`; an Opsgenie
alert or incident a `message` and a `tinyId`; a Jira issue a `key` and its `fields`; a Rootly resource its
`attributes`. A record with none of its reader's marks is refused (its title, its status, its services would all
be missing), and when most of a file's first `FIRST` records are, the file is: one error, nothing filed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from grandbo.errors import ImportFormatError

FIRST = 10  # records a file is judged by: past half of them without their reader's marks, the file is refused
MARKS: dict[str, tuple[str, ...]] = {
    "pagerduty": ("incident_number", "title", "urgency", "service", "escalation_policy", "incident_key"),
    "incidentio": ("name", "incident_status", "reference", "permalink", "custom_field_entries", "incident_type"),
    "opsgenie": ("message", "tinyId", "alias", "impactedServices", "ownerTeam", "extraProperties"),
    "jira": ("key", "fields"),
    "rootly": ("attributes",),
}
LABELS = {"pagerduty": "PagerDuty", "incidentio": "incident.io", "opsgenie": "Opsgenie", "jira": "Jira",
          "rootly": "Rootly"}  # fmt: skip


def has_marks(reader: str, record: Mapping[str, Any]) -> bool:
    """Whether `record` has any of the fields that mark `reader`'s records (a reader without marks: always)."""
    return reader not in MARKS or any(key in record for key in MARKS[reader])


def looks_like(reader: str, record: Mapping[str, Any]) -> str | None:
    """The other vendor whose marks `record` has most of (at least one), or None."""
    counts = {name: sum(key in record for key in marks) for name, marks in MARKS.items() if name != reader}
    best = max(counts, key=lambda name: counts[name], default=None)
    return best if best is not None and counts[best] else None


def missing(reader: str, record: Mapping[str, Any]) -> str:
    """Why a record without `reader`'s marks is refused, with the reader it looks like when there is one."""
    said = f"none of {LABELS[reader]}'s fields ({_listed(MARKS[reader][:3])})"
    other = looks_like(reader, record)
    if other is None:
        return f"a record with {said}: not filed (it would be an untitled, open incident)"
    found = _listed([key for key in MARKS[other] if key in record][:3])
    return f"a record with {said} but {LABELS[other]}'s ({found}): import it as `{other}`"


class Judge:
    """Counts a file's first `FIRST` records with and without `reader`'s marks (`read_each`); `verdict` raises
    the file's one ImportFormatError when most of them lack the marks."""

    def __init__(self, reader: str, file: str) -> None:
        self.reader, self.file = reader, file
        self.hits, self.misses = 0, 0
        self.others: Counter[str] = Counter()  # the other vendors the records look like
        self.found: dict[str, list[str]] = {}  # the first of their marks found, by vendor

    def fits(self, record: Mapping[str, Any]) -> bool:
        """Whether the record has its reader's marks; raises once most of the first records have not."""
        fits = has_marks(self.reader, record)
        if self.hits + self.misses >= FIRST:
            return fits
        if fits:
            self.hits += 1
        else:
            self.misses += 1
            if other := looks_like(self.reader, record):
                self.others[other] += 1
                self.found.setdefault(other, [key for key in MARKS[other] if key in record][:3])
            if self.misses * 2 > FIRST:
                self.verdict()
        return fits

    def verdict(self) -> None:
        """At the end of a short file too: past half of what was judged without the marks, the file is refused."""
        judged = self.hits + self.misses
        if not self.misses or self.misses * 2 <= judged:
            return
        label = LABELS[self.reader]
        said = (
            f"{self.file} does not look like {_a(label)} export: {self.misses} of its first {judged} records have none "
            f"of {label}'s fields ({_listed(MARKS[self.reader][:3])})"
        )
        if self.others:
            other = self.others.most_common(1)[0][0]
            marks = _listed(self.found[other])
            said += (
                f". It looks like {_a(LABELS[other])} export (records with {marks}): run `grandbo import-from {other} "
                f"FILE` (over REST, `POST /v1/import-from/{other}`)"
            )
        else:
            said += f": is it {_a(label)} export? Name the tool it comes from (`grandbo import-from SOURCE FILE`)"
        raise ImportFormatError(
            f"{said}; nothing was imported.",
            detail={"source": self.reader, "looks_like": self.others.most_common(1)[0][0] if self.others else None},
        )


def _a(label: str) -> str:
    return f"an {label}" if label[0] in "aeiouAEIOU" else f"a {label}"


def _listed(keys: Any) -> str:
    return ", ".join(f"`{key}`" for key in keys)
