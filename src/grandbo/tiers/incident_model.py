"""What an incident is: its document's value types (the incident, its findings, their statuses) and the
report of a sync. The workflow that opens, argues over and closes incidents is `tiers.incidents`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from grandbo.errors import InvalidInputError, validation_problems
from grandbo.model import Severity
from grandbo.values import check_timestamp, identifiers
from grandbo.words import Vocabulary

if TYPE_CHECKING:
    from grandbo.redaction import Redactor

INCIDENTS = "incident"
# The free text of an incident and of each finding: masked by the organization's redaction patterns before it is
# stored, as an entry's title and body are. Ids, services, severities, statuses and times are not text.
TEXT_FIELDS = ("title", "symptoms", "alerts", "resolution", "pending_postmortem")
FINDING_TEXT_FIELDS = ("summary", "mechanism", "component", "symptom", "root_cause", "remediation")


class FindingStatus(Vocabulary):
    HYPOTHESIS = "hypothesis"
    CORROBORATED = "corroborated"
    REFUTED = "refuted"


class IncidentStatus(Vocabulary):
    OPEN = "open"
    CLOSED = "closed"


FindingWord = Literal["hypothesis", "corroborated", "refuted"]  # FindingStatus, as a tool's schema lists it


class Finding(BaseModel):
    """One thing learned (or suspected) during an incident."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    id: str
    summary: str = Field(min_length=1, max_length=500)
    status: FindingStatus = FindingStatus.HYPOTHESIS
    mechanism: str = ""
    component: str = ""
    symptom: str = ""
    root_cause: str = ""
    remediation: str = ""
    runbook_id: str | None = None
    services: list[str] = Field(default_factory=list)
    added_at: datetime
    updated_at: datetime

    @field_validator("services")
    @classmethod
    def _services(cls, value: list[str]) -> list[str]:
        return identifiers([v.lower() for v in value], "service")


class ClosedOutcome(BaseModel):
    """The outcome an incident's close recorded in the ledger, as the incident remembers it: a re-close naming
    another runbook takes it back, and one correcting only the time to mitigate records it again."""

    model_config = ConfigDict(extra="forbid")

    runbook_id: str
    succeeded: bool


class Incident(BaseModel):
    """An incident as its document holds it."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    id: str
    title: str = Field(min_length=1, max_length=500)
    services: list[str] = Field(default_factory=list)
    severity: Severity | None = None
    started_at: datetime
    symptoms: list[str] = Field(default_factory=list)
    alerts: list[str] = Field(default_factory=list)
    status: IncidentStatus = IncidentStatus.OPEN
    findings: list[Finding] = Field(default_factory=list)
    closed_at: datetime | None = None
    resolution: str = ""
    runbook_used: str | None = None
    time_to_mitigate_s: float | None = None
    memory: dict[str, str] = Field(default_factory=dict, description="finding id -> entry id written for it")
    memory_sync: str = Field("none", description="none, done, or pending (the write-behind must be retried)")
    # What the close asked the write-behind to do besides the findings, kept with the close so that a
    # write-behind that fails loses none of it: `sync` does it (once: their ids derive from the incident).
    pending_postmortem: str | None = None
    pending_outcome: bool | None = Field(None, description="the runbook succeeded (True) or failed (False)")
    closed_outcome: ClosedOutcome | None = Field(None, description="what the close recorded in the ledger")
    version: int = 0

    @field_validator("services")
    @classmethod
    def _services(cls, value: list[str]) -> list[str]:
        return identifiers([v.lower() for v in value], "service")

    @field_validator("severity", mode="before")
    @classmethod
    def _severity(cls, value: Any) -> Any:
        return Severity.parse(value) if isinstance(value, str | int) and value != "" else value or None

    @field_validator("started_at", "closed_at")
    @classmethod
    def _aware(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        return None if value is None else check_timestamp(value, str(info.field_name))


class SyncReport(BaseModel):
    written: list[str] = Field(default_factory=list)
    corrected: list[str] = Field(default_factory=list)
    retired: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    purged: list[str] = Field(default_factory=list)  # findings whose memory was purged: never written again


def invalid(what: str, error: ValidationError) -> InvalidInputError:
    problems = validation_problems(error, what)
    return InvalidInputError(f"Invalid {what}: {problems}.", detail={"errors": error.errors(include_url=False)})


def masked(data: dict[str, Any], redactor: Redactor, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """An incident document's JSON (or one of its history's) with its free text masked; the rest as it is.
    Masking is idempotent, so an incident saved again, replayed or imported twice stays equal. A field equal to
    its value in `stored` (the document as it is now) is kept as stored: it was masked when written, and patterns
    apply to text written from now on (`OrgSettings.set_redaction`); masked again by a pattern added since, a
    title could grow past its limit and refuse every later save of the incident (a finding, the close)."""
    before = stored or {}
    out = dict(data)
    for key in TEXT_FIELDS:
        if out.get(key) is not None and (key not in before or out[key] != before[key]):
            out[key] = redactor.value(out[key])
    earlier = {f.get("id"): f for f in before.get("findings") or [] if isinstance(f, dict)}
    if isinstance(out.get("findings"), list):
        out["findings"] = [
            _masked_finding(finding, redactor, earlier.get(finding.get("id")) or {})
            if isinstance(finding, dict)
            else finding
            for finding in out["findings"]
        ]
    return out


def _masked_finding(finding: dict[str, Any], redactor: Redactor, stored: dict[str, Any]) -> dict[str, Any]:
    return {
        key: redactor.value(value)
        if key in FINDING_TEXT_FIELDS and value is not None and (key not in stored or value != stored[key])
        else value
        for key, value in finding.items()
    }
