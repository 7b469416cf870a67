"""What every history source reads into: one past incident as its tool kept it, before Grandbo files it.

A reader (`sources/<tool>.py`) turns the tool's export into a stream of `HistoricIncident`, `Refusal` for a
record it cannot read, or `Skipped` for one it leaves out on purpose (a test incident, a duplicate), and decides
nothing that needs the org: the words it finds (severity, status, tags) are kept as the tool wrote them, and an
optional field of the wrong type is read as absent and named in `ignored`. The importer maps the words (severity
words to sev1..sev5, a generic title to one derived from the content, tags to labels), counting every such decision
in its report. Readers stream: they hold one record at a time whatever the file's size.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

FindingKind = Literal["cause", "trigger", "contributing", "remediation", "lesson", "action", "note"]
MAX_RECORD = 16 << 20  # bytes of a record as read: a jsonl line, a csv row (characters), a JSON export's record
# Values (JSON's: objects, arrays, strings, numbers...) of one record: each built takes ~65 bytes, so this bounds what
# a record takes (~130 MB), as MAX_RECORD alone does not: 16 MiB of `[],` is 11 million values, 360 MB built. 16 MiB
# of the densest export, Jira's compact ADF, is 2.0 million (8.3 bytes a value; PagerDuty 13.7, incident.io 11.3).
MAX_VALUES = 2_000_000


def too_long(size: str, limit: str) -> str:
    """Why a record over a reader's bound (`MAX_RECORD`) is refused, and what to do: the same words from every
    reader. `size` is what it was ("50,331,648 bytes"), `limit` what it may be ("16,777,216 a line or row may be")."""
    return (
        f"the record is {size}, over the {limit} (no incident it files is that long): cut what it holds (keep what "
        "was seen, the cause and what fixed it) and import it again"
    )


def repeated_key(key: str) -> str:
    """Why a record whose object names `key` twice is refused (a JSON parser keeps the last value silently): the
    same words from the jsonl and the vendors' JSON readers."""
    return (
        f"names the key {key[:100]!r} more than once in one object: the record would keep its last value only; "
        "remove or rename the repeated key and import again"
    )


class HistoricFinding(BaseModel):
    """One thing the team learned about the incident: a cause, what fixed it, a lesson."""

    model_config = ConfigDict(extra="forbid")

    kind: FindingKind
    text: str = Field(min_length=1)


class HistoricIncident(BaseModel):
    """One past incident as the source kept it; the importer keys it by (`source`, `source_id`)."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="the reader's name: pagerduty, opsgenie, jira, incidentio, rootly, markdown, ...")
    source_id: str = Field(min_length=1, description="the source's own id, stable across exports")
    location: str = Field(description="where in the input it was read: 'line 12', 'incidents[3]', 'a/b.md'")
    url: str | None = None
    title: str = Field("", description="as the source has it; empty or generic titles are replaced by the importer")
    summary: str = Field("", description="what was seen: the description, the symptoms")
    postmortem: str = Field("", description="the long write-up, Markdown, when the source has one")
    started_at: datetime | None = Field(None, description="None when the source does not know (never guessed)")
    resolved_at: datetime | None = None
    status: str = Field("", description="the source's own word (resolved, closed, Done, triggered, ...)")
    severity: str = Field("", description="the source's own word (P1, SEV-2, critical, high, ...)")
    services: list[str] = Field(default_factory=list, description="as named in the source")
    labels: list[str] = Field(default_factory=list, description="free-text tags, kept as written")
    findings: list[HistoricFinding] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="timeline entries, notes, comments, in order")
    runbooks: list[str] = Field(default_factory=list, description="runbook references (ids or URLs)")
    runbook_succeeded: bool | None = Field(None, description="when the source says whether the runbook worked")
    time_to_mitigate_s: float | None = None
    ignored: list[str] = Field(
        default_factory=list,
        description="optional fields of the wrong type, read as absent: 'labels: a string, not a list'",
    )


class Refusal(BaseModel):
    """A record the reader could not read, and why, in words a user can act on."""

    location: str
    reason: str


class Skipped(BaseModel):
    """A record the reader leaves out on purpose (a test incident, a duplicate): counted apart, not an error."""

    location: str
    reason: str


class Reader(Protocol):
    """A history source: a name and one streaming read of a file (or a folder, for Markdown)."""

    name: str

    def check(self, mapping: dict[str, str] | None) -> None:
        """Raise what `read` would raise of `mapping` alone (an unknown field, a pair no record could be read through,
        a mapping given to a source that takes none): the faces call it before they open a store or take an upload."""
        ...

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal | Skipped]:
        """The records at `path` in order, one at a time; `mapping` only for csv/jsonl (`--map title=col,...`)."""
        ...
