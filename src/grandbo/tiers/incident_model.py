"""What an incident is: its document's value types (the incident, its findings, their statuses) and the
report of a sync. The workflow that opens, argues over and closes incidents is `tiers.incidents`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from grandbo.errors import InvalidInputError, UnreadableRecordError, validation_problems
from grandbo.model import Severity
from grandbo.names import service_name
from grandbo.ports import Document
from grandbo.values import check_timestamp, identifiers
from grandbo.words import Vocabulary

if TYPE_CHECKING:
    from grandbo.redaction import Redactor

INCIDENTS = "incident"
# The free text of an incident and of each finding: masked by the organization's redaction patterns before it is
# stored, as an entry's title and body are. Ids, services, severities, statuses and times are not text.
TEXT_FIELDS = ("title", "symptoms", "alerts", "resolution", "pending_postmortem")
MAX_SYMPTOM_CHARS = 2000  # a symptom's line as REST and MCP take it (as a finding's `symptom`)
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
        return identifiers([service_name(v) for v in value], "service")


def finding_number(finding_id: str) -> int:
    """n of a finding id `f<n>`; 0 for any other id."""
    digits = finding_id[1:]
    return int(digits) if finding_id[:1] == "f" and digits.isascii() and digits.isdigit() and len(digits) < 10 else 0


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
        return identifiers([service_name(v) for v in value], "service")

    @field_validator("severity", mode="before")
    @classmethod
    def _severity(cls, value: Any) -> Any:
        return Severity.parse(value) if isinstance(value, str | int) and value != "" else value or None

    @field_validator("started_at", "closed_at")
    @classmethod
    def _aware(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        return None if value is None else check_timestamp(value, str(info.field_name))


@dataclass(frozen=True, slots=True)
class PastIncident:
    """What a triage's plan and the console's analytics need of an incident of the org (opened here or imported):
    read without validating the incident whole, and kept once per process (`Incidents.summaries`)."""

    id: str
    title: str
    services: tuple[str, ...]
    started_at: datetime
    open: bool
    closed_at: datetime | None = None
    time_to_mitigate_s: float | None = None
    severity: Severity | None = None
    cites: tuple[tuple[str, tuple[str, ...]], ...] = ()  # each runbook it names, with the services it was used on


SUMMARY_KEYS = (
    "id", "title", "services", "started_at", "status", "closed_at", "time_to_mitigate_s", "severity", "runbook_used",
    "findings",
)  # fmt: skip
"""The keys of an incident's data `past_incident` reads: all a read for it asks the store for (its findings only
for the runbooks they cite; not its symptoms, alerts, resolution, memory nor pending post-mortem)."""


def past_incident(stored: Document) -> PastIncident:
    """An incident document as `PastIncident`; UnreadableRecordError when it lacks what the plan needs (a triage
    and the analytics leave it out)."""
    data = stored.data
    try:
        started = _aware(datetime.fromisoformat(str(data["started_at"])))
        services = tuple(service_name(str(s)) for s in _listed(data.get("services")))
        closed, ttm, severity = data.get("closed_at"), data.get("time_to_mitigate_s"), data.get("severity")
        return PastIncident(
            str(data["id"]), str(data.get("title") or "").strip(), services, started, data.get("status") == "open",
            _aware(datetime.fromisoformat(str(closed))) if closed else None,
            float(ttm) if isinstance(ttm, int | float) and not isinstance(ttm, bool) else None,
            _severity(severity), _cited(data, services),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise UnreadableRecordError(
            f"The stored incident {stored.doc_id!r} cannot be read ({type(error).__name__}).",
            detail={"id": stored.doc_id, "fields": ["started_at"]},
        ) from error


def _aware(at: datetime) -> datetime:
    """A stored time as `Incident` reads it: one without a zone (written by hand, or by an older release) is UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _severity(value: Any) -> Severity | None:
    """A stored severity, or None when it is none or not one (the incident still counts, as it did when whole)."""
    try:
        return Severity.parse(value) if isinstance(value, str | int) and value != "" else None
    except ValueError:
        return None


def _cited(data: dict[str, Any], services: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The runbooks an incident names, each with the services it was used on: the one its close names, on the
    incident's services; each corroborated finding's, on those and the finding's own. TypeError for a list that
    is not one."""
    cited = [(data.get("runbook_used"), services)]
    cited += [
        (f.get("runbook_id"), (*services, *(str(s) for s in _listed(f.get("services")))))
        for f in _listed(data.get("findings"))
        if isinstance(f, dict) and f.get("status") == FindingStatus.CORROBORATED.value
    ]
    return tuple((str(runbook_id), where) for runbook_id, where in cited if runbook_id)


def _listed(value: Any) -> list[Any]:
    """`value` when it is a list (nothing when it is missing); TypeError for any other shape."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(type(value).__name__)
    return value


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


def asked_outcome(incident: Incident, previous: str | None, succeeded: bool | None, ttm: float | None) -> bool | None:
    """The result a close (`incident` as it makes it, naming `previous` runbook before) asks its sync to record for
    the runbook it names: its `succeeded` (again: the same result counts once, the other replaces it); else, with
    a corrected time to mitigate, the result recorded, once more; else a result still waiting for its sync, unless
    the close names another runbook than that result's."""
    if not incident.runbook_used:
        return incident.pending_outcome
    if succeeded is not None:
        return succeeded
    if incident.runbook_used != previous:
        return None
    recorded = incident.closed_outcome
    if incident.pending_outcome is None and recorded and recorded.runbook_id == previous and ttm is not None:
        return recorded.succeeded
    return incident.pending_outcome
