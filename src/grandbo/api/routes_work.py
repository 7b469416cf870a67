"""`/v1/incidents` (findings, close, sync), `/v1/runbooks` (outcomes, feedback, effectiveness), `/v1/signals`
(record an edit, read one back)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from grandbo.api.deps import ReadMemory, WriteMemory
from grandbo.api.paging import LARGEST_ENTRY, Page, PageAsked, bounded_page, entries_read
from grandbo.errors import InvalidInputError
from grandbo.model import Entry, Kind, Listing
from grandbo.names import service_name
from grandbo.pages import Mark
from grandbo.ports import Position
from grandbo.tiers.alert_groups import refuse_what_alerts_give
from grandbo.tiers.effectiveness import Effectiveness, Outcome, OutcomeKind, ReportedOutcome
from grandbo.tiers.incident_model import MAX_SYMPTOM_CHARS, Finding, FindingStatus, Incident, IncidentStatus, SyncReport
from grandbo.tiers.incidents import LARGEST_INCIDENT
from grandbo.tiers.learning_model import MAX_EDIT_CHARS, Note, Signal
from grandbo.values import IsoTime
from grandbo.words import folded_word

router = APIRouter(prefix="/v1")
Id = Annotated[str, Path(min_length=1, max_length=128)]


class OpenIncident(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(default=None, min_length=1, max_length=500, description="Required unless from_alerts.")
    id: str | None = Field(default=None, max_length=128)
    services: list[Annotated[str, Field(max_length=128)]] = Field(default_factory=list, max_length=50)
    severity: str | None = Field(default=None, max_length=16)
    started_at: IsoTime | None = None
    symptoms: list[Annotated[str, Field(max_length=MAX_SYMPTOM_CHARS)]] = Field(default_factory=list, max_length=100)
    alerts: list[Annotated[str, Field(max_length=128)]] = Field(default_factory=list, max_length=100)
    from_alerts: list[Annotated[str, Field(max_length=128)]] = Field(
        default_factory=list, max_length=100,
        description="Received alerts' ids: the incident lists them, their services, starts when the first fired and "
        "is titled after it (unless `title`); a group all of whose alerts are named becomes `opened`.",
    )  # fmt: skip


class NewFinding(BaseModel):
    model_config = ConfigDict(extra="forbid")
    summary: str = Field(min_length=1, max_length=500)
    status: FindingStatus = FindingStatus.HYPOTHESIS
    mechanism: str = Field(default="", max_length=2000)
    component: str = Field(default="", max_length=500)
    symptom: str = Field(default="", max_length=2000)
    root_cause: str = Field(default="", max_length=4000)
    remediation: str = Field(default="", max_length=4000)
    runbook_id: str | None = Field(default=None, max_length=128)
    services: list[str] = Field(default_factory=list, max_length=50)


class FindingChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    summary: str | None = Field(default=None, min_length=1, max_length=500)
    status: FindingStatus | None = None
    mechanism: str | None = Field(default=None, max_length=2000)
    component: str | None = Field(default=None, max_length=500)
    symptom: str | None = Field(default=None, max_length=2000)
    root_cause: str | None = Field(default=None, max_length=4000)
    remediation: str | None = Field(default=None, max_length=4000)
    runbook_id: str | None = Field(default=None, max_length=128)
    services: list[str] | None = Field(default=None, max_length=50)


class CloseIncident(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resolution: str = Field(default="", max_length=4000)
    runbook_used: str | None = Field(default=None, max_length=128)
    succeeded: bool | None = None
    time_to_mitigate_s: float | None = Field(default=None, ge=0, le=10**8)
    postmortem: str | None = Field(default=None, max_length=100_000)


@router.post("/incidents", status_code=201, response_model=Incident, tags=["incidents"])
def open_incident(body: OpenIncident, memory: WriteMemory) -> dict[str, Any]:
    if body.from_alerts:
        refuse_what_alerts_give(services=body.services, severity=body.severity, started_at=body.started_at,
                                symptoms=body.symptoms, alerts=body.alerts)  # fmt: skip
        opened = memory.alert_groups.open_from_alerts(body.from_alerts, title=body.title, incident_id=body.id)
        return opened.model_dump(mode="json")
    if body.title is None:
        raise InvalidInputError("An incident needs a title (what is happening), or from_alerts.", detail={})
    incident = memory.incidents.open(
        body.title, services=body.services, severity=body.severity, started_at=body.started_at,
        symptoms=body.symptoms, alerts=body.alerts, incident_id=body.id, actor="api",
    )  # fmt: skip
    return incident.model_dump(mode="json")


class IncidentPage(Page[Incident]):
    """A page of incidents, the most recently changed first."""


@router.get("/incidents", response_model=IncidentPage, tags=["incidents"])
def list_incidents(memory: ReadMemory, asked: PageAsked, status: IncidentStatus | None = None) -> Response:
    """The org's incidents (of `status`), the most recently changed first, a page of at most `limit` and 2 MiB at a
    time (`next_cursor` gives the rest). Reads the incidents of the page only."""
    return bounded_page(lambda n, after: memory.incidents.page(n, after=after, status=status), asked, LARGEST_INCIDENT)


@router.get("/incidents/{incident_id}", response_model=Incident, tags=["incidents"])
def get_incident(incident_id: Id, memory: ReadMemory) -> dict[str, Any]:
    return memory.incidents.get(incident_id).model_dump(mode="json")


@router.post("/incidents/{incident_id}/findings", status_code=201, response_model=Finding, tags=["incidents"])
def add_finding(incident_id: Id, body: NewFinding, memory: WriteMemory) -> dict[str, Any]:
    """Add a finding; only corroborated findings become memory, when the incident closes."""
    fields = body.model_dump(exclude={"summary", "status"})
    finding = memory.incidents.add_finding(incident_id, body.summary, status=body.status, actor="api", **fields)
    return finding.model_dump(mode="json")


@router.patch("/incidents/{incident_id}/findings/{finding_id}", response_model=Finding, tags=["incidents"])
def update_finding(incident_id: Id, finding_id: Id, body: FindingChange, memory: WriteMemory) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True)
    return memory.incidents.update_finding(incident_id, finding_id, actor="api", **changes).model_dump(mode="json")


@router.post("/incidents/{incident_id}/close", response_model=Incident, tags=["incidents"])
def close_incident(incident_id: Id, body: CloseIncident, memory: WriteMemory) -> dict[str, Any]:
    """Close: corroborated findings become memory after the close commits; the runbook's outcome enters the ledger."""
    incident = memory.incidents.close(incident_id, actor="api", **body.model_dump())
    return incident.model_dump(mode="json")


@router.post("/incidents/{incident_id}/sync", response_model=SyncReport, tags=["incidents"])
def sync_incident(incident_id: Id, memory: WriteMemory) -> dict[str, Any]:
    """Finish a write-behind that failed, or repair what one left: make memory match the incident (an active entry
    for each corroborated finding, none for the others) and leave in the ledger only its latest close's result."""
    return memory.incidents.sync(incident_id, actor="api").model_dump(mode="json")


# ------------------------------------------------------------------------------------ runbooks


class NewRunbook(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128)
    title: str = Field(min_length=1, max_length=500)
    steps: list[str] = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=20_000)
    services: list[str] = Field(default_factory=list, max_length=50)
    tags: list[str] = Field(default_factory=list, max_length=50)


class NewOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Annotated[ReportedOutcome, BeforeValidator(folded_word)]
    incident_id: str | None = Field(default=None, max_length=128)
    service: str | None = Field(default=None, max_length=128)
    time_to_mitigate_s: float | None = Field(default=None, ge=0, le=10**8)
    comment: str = Field(default="", max_length=4000)


class Feedback(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rating: Literal[1, -1] = Field(description="+1 (thumbs up) or -1 (thumbs down).")
    incident_id: str | None = Field(default=None, max_length=128)
    service: str | None = Field(default=None, max_length=128)
    comment: str = Field(default="", max_length=4000)


class RunbookView(BaseModel):
    runbook: Entry
    effectiveness: Effectiveness


@router.post("/runbooks", status_code=201, response_model=Entry, tags=["runbooks"])
def add_runbook(body: NewRunbook, memory: WriteMemory) -> dict[str, Any]:
    entry = memory.runbooks.add(
        body.id, body.title, body.steps, description=body.description, services=body.services, tags=body.tags,
        actor="api",
    )  # fmt: skip
    return entry.model_dump(mode="json")


class RunbookPage(Page[RunbookView]):
    """A page of runbooks with their records, and where the next one starts."""


@router.get("/runbooks", response_model=RunbookPage, tags=["runbooks"])
def list_runbooks(
    memory: ReadMemory,
    asked: PageAsked,
    service: Annotated[str | None, Query(max_length=128, description="Only runbooks for this service.")] = None,
) -> Response:
    """The organization's active runbooks, the newest first, a page of at most `limit` and 2 MiB at a time
    (`next_cursor` gives the rest), each with its record over all services (`GET /v1/runbooks/{id}?service=` gives
    one service's)."""
    wanted = service_name(service) if service is not None else None
    entries = entries_read(lambda n, after: memory.entries(listing=Listing(n, after, Kind.RUNBOOK, wanted)))

    def read(n: int, after: Position) -> tuple[list[tuple[RunbookView, Mark]], Position]:
        found, more = entries(n, after)
        records = memory.ledger.records([e.id for e, _ in found])  # the page's counted in one read
        return [(RunbookView(runbook=e, effectiveness=records[e.id]), at) for e, at in found], more

    return bounded_page(read, asked, LARGEST_ENTRY)


@router.get("/runbooks/{runbook_id}", response_model=RunbookView, tags=["runbooks"])
def get_runbook(
    runbook_id: Id, memory: ReadMemory, service: Annotated[str | None, Query(max_length=128)] = None
) -> dict[str, Any]:
    """The runbook and what it did: attempts, win rate with its 90% interval, MTTR and trend, thumbs."""
    return {
        "runbook": memory.runbooks.get(runbook_id).model_dump(mode="json"),
        "effectiveness": memory.ledger.effectiveness(runbook_id, service).model_dump(mode="json"),
    }


@router.post("/runbooks/{runbook_id}/outcomes", status_code=201, response_model=Outcome, tags=["runbooks"])
def report_outcome(runbook_id: Id, body: NewOutcome, memory: WriteMemory) -> dict[str, Any]:
    outcome = memory.ledger.record(runbook_id, OutcomeKind(body.kind), actor="api", **body.model_dump(exclude={"kind"}))
    return outcome.model_dump(mode="json")


@router.post("/runbooks/{runbook_id}/feedback", status_code=201, response_model=Outcome, tags=["runbooks"])
def feedback(runbook_id: Id, body: Feedback, memory: WriteMemory) -> dict[str, Any]:
    """Thumbs up or down on a suggested runbook."""
    outcome = memory.ledger.record(runbook_id, OutcomeKind.RATED, actor="api", **body.model_dump())
    return outcome.model_dump(mode="json")


# ------------------------------------------------------------------------------------ edit signals


class EditSignal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    draft: str = Field(min_length=1, max_length=MAX_EDIT_CHARS)
    edited: str = Field(min_length=1, max_length=MAX_EDIT_CHARS)
    content_type: str = Field(min_length=1, max_length=100)
    author: str = Field(min_length=1, max_length=200)


class Learned(BaseModel):
    signal: Signal
    note: Note | None


@router.post("/signals", status_code=201, response_model=Learned, tags=["learning"])
def record_edit(body: EditSignal, memory: WriteMemory) -> dict[str, Any]:
    """How a person edited an agent's draft; every third edit of a kind teaches a rule. The signal is stored
    before the answer, classified by the rules; with an LLM configured it is `awaiting_llm`, and the LLM's
    classification and the note it may fold follow after the answer (`GET /v1/signals/{signal_id}`, `GET
    /v1/notes`)."""
    signal, note = memory.learning.record_edit(
        body.draft, body.edited, content_type=body.content_type, author=body.author, actor="api"
    )
    return {"signal": signal.model_dump(mode="json"), "note": note.model_dump(mode="json") if note else None}


@router.get("/signals/{signal_id}", response_model=Signal, tags=["learning"])
def get_signal(signal_id: Id, memory: WriteMemory) -> dict[str, Any]:
    """An edit signal as it stands: `awaiting_llm` until the LLM's classification has replaced the rules' (or
    the LLM failed, and the rules' stays). A write key, as recording one takes: a signal carries the whole draft
    and edit, and a read key can list the signal ids of every note."""
    return memory.learning.signal(signal_id).model_dump(mode="json")
