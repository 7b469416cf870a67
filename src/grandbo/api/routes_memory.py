"""`/v1/memories`, `/v1/erasures`, `/v1/recall`, `/v1/triage`, `/v1/stats`, `/v1/context`, `/v1/examples`,
alerts and their webhooks; `/healthz`, `/readyz`."""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Header, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from grandbo.api.deliveries import answered, delivery_route, receive
from grandbo.api.deps import AdminMemory, ReadMemory, WriteMemory
from grandbo.api.paging import LARGEST_ENTRY, Page, PageAsked, bounded_page, entries_read
from grandbo.api.payloads import PAYLOADS
from grandbo.api.recalling import recalled
from grandbo.errors import GrandboError, InvalidInputError
from grandbo.ingest import flow
from grandbo.model import MAX_BODY_CHARS, MAX_SERVICES, Arm, CorpusStats, Entry, Event, Kind, Listing, RecallResult
from grandbo.names import service_name
from grandbo.pages import encode
from grandbo.query_ahead import embedded_first
from grandbo.retrieval.recall import MAX_K
from grandbo.retrieval.text import MAX_TOPIC_CHARS
from grandbo.service import Grandbo
from grandbo.tiers.alert_briefs import briefs
from grandbo.tiers.alerts import AlertBrief, StoredAlert
from grandbo.tiers.context import DEFAULT_BUDGET, MAX_BUDGET, ContextBlock
from grandbo.tiers.keys import SOURCES
from grandbo.triage import TriagePlan
from grandbo.values import IsoTime

router = APIRouter(prefix="/v1")
EntryId = Annotated[str, Path(min_length=1, max_length=128)]


class Remember(BaseModel):
    """A memory to keep (the fields of `NewEntry`)."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=500)
    body: str = Field(default="", max_length=MAX_BODY_CHARS)
    kind: Kind = Kind.FACT
    tags: list[str] = Field(default_factory=list, max_length=100)
    services: list[str] = Field(default_factory=list, max_length=MAX_SERVICES)
    severity: str | None = None
    occurred_at: IsoTime | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    id: str | None = Field(default=None, max_length=128)


class Correct(BaseModel):
    """What changed (the other fields are carried over), and why."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000)
    title: str | None = Field(default=None, min_length=1, max_length=500)
    body: str | None = Field(default=None, max_length=MAX_BODY_CHARS)
    kind: Kind | None = None
    tags: list[str] | None = Field(default=None, max_length=100)
    services: list[str] | None = Field(default=None, max_length=MAX_SERVICES)
    severity: str | None = None
    meta: dict[str, Any] | None = None


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str = Field(
        min_length=1,
        max_length=MAX_TOPIC_CHARS,
        description="The problem in a sentence: mechanism, component, symptom.",
    )
    k: int = Field(default=5, ge=1, le=MAX_K, strict=True)  # as MCP: `true` or "5" is no count
    arm: Arm = Arm.RERANKED
    services: list[str] | None = Field(default=None, max_length=50)
    severity: str | None = Field(default=None, max_length=32)


class MemoryWithHistory(BaseModel):
    entry: Entry
    history: list[Event] | None = None


@router.post("/memories", status_code=201, response_model=Entry, tags=["memories"])
def remember(
    body: Remember,
    memory: WriteMemory,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> Response:
    """Remember one entry; its vector follows after commit. With an `Idempotency-Key` header, a retry (after a
    timeout, say) returns the first write's entry instead of writing it twice."""
    entry = memory.remember(body.model_dump(exclude_none=True), actor="api", idempotency_key=idempotency_key)
    return Response(entry.model_dump_json(), status_code=201, media_type="application/json")


class MemoryPage(Page[Entry]):
    """A page of memories, and where the next one starts."""


@router.get("/memories", response_model=MemoryPage, tags=["memories"])
def list_memories(
    memory: ReadMemory,
    asked: PageAsked,
    kind: Kind | None = None,
    service: Annotated[str | None, Query(max_length=128)] = None,
    include_inactive: Annotated[bool, Query(description="Retired and superseded entries too.")] = False,
) -> Response:
    """The organization's memories, the newest first (by creation), a page of at most `limit` and 2 MiB at a time
    (`next_cursor` gives the rest); `kind` and `service` keep only those."""
    wanted = service_name(service) if service is not None else None
    read = entries_read(lambda n, after: memory.entries(include_inactive=include_inactive,
                                                        listing=Listing(n, after, kind, wanted)))  # fmt: skip
    return bounded_page(read, asked, LARGEST_ENTRY)


@router.get("/memories/{entry_id}", response_model=MemoryWithHistory, tags=["memories"])
def get_memory(entry_id: EntryId, memory: ReadMemory, history: bool = False) -> dict[str, Any]:
    """One entry (any status); with `history=true`, every event that shaped it."""
    out: dict[str, Any] = {"entry": memory.get(entry_id).model_dump(mode="json")}
    if history:
        out["history"] = [event.model_dump(mode="json") for event in memory.history(entry_id)]
    return out


@router.patch("/memories/{entry_id}", response_model=Entry, tags=["memories"])
def correct_memory(entry_id: EntryId, body: Correct, memory: WriteMemory) -> Response:
    """Supersede an entry with a corrected one; the old one stays in the history."""
    changes = body.model_dump(exclude_none=True, exclude={"reason"})
    entry = memory.correct(entry_id, changes, reason=body.reason, actor="api")
    return Response(entry.model_dump_json(), media_type="application/json")


@router.delete("/memories/{entry_id}", response_model=Entry, tags=["memories"])
def retire_memory(
    entry_id: EntryId, memory: WriteMemory, reason: Annotated[str, Query(min_length=1, max_length=2000)]
) -> Response:
    """Retire an entry (a tombstone): it leaves recall; its history stays."""
    entry = memory.retire(entry_id, reason=reason, actor="api")
    return Response(entry.model_dump_json(), media_type="application/json")


@router.post("/memories/{entry_id}/purge", response_model=Entry, tags=["memories"])
def purge_memory(
    entry_id: EntryId, memory: AdminMemory, reason: Annotated[str, Query(min_length=1, max_length=2000)]
) -> Response:
    """Erase an entry's text and vector everywhere (admin, audited: the purge is an event with actor and reason);
    afterwards no route, export or search returns it."""
    entry = memory.purge(entry_id, reason=reason, actor="api")
    return Response(entry.model_dump_json(), media_type="application/json")


class Erase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(
        min_length=1, max_length=2000, description="The text to erase (in the body: never in a URL or log)."
    )
    reason: str = Field(min_length=1, max_length=2000, description="Why; kept with who did it, never the text.")
    exact: bool = Field(default=False, description="Match the text's case exactly (by default any case matches).")


class Erasure(BaseModel):
    found: bool = Field(description="False: found nowhere; nothing was erased and no erasure was recorded.")
    exact: bool
    entries: list[str] = Field(description="Entries that held the text, now purged.")
    documents: int = Field(description="Documents (incidents, profile, settings...) where it now reads [purged].")
    document_events: int = Field(description="Events of their history where it now reads [purged].")
    erasure_id: str = Field(description="The audited erasure's id; empty when nothing was found.")


@router.post("/erasures", response_model=Erasure, tags=["memories"])
async def erase_text(body: Erase, memory: AdminMemory, request: Request) -> dict[str, Any]:
    """Erase a text from the whole organization (admin, audited; `grandbo purge-text`): every entry that ever
    held it is purged, and it reads "[purged]" in every document and in their history. On the process's erasure
    pool (`grandbo.background`): one per organization at a time, else 429 with Retry-After."""
    task = functools.partial(memory.erasure.purge_text, body.text, reason=body.reason, actor="api", exact=body.exact)
    grandbo: Grandbo = request.app.state.grandbo
    return (await asyncio.wrap_future(grandbo.pools.erasures.submit(memory.org, task))).to_dict()


@router.post("/recall", response_model=RecallResult, tags=["recall"])
async def recall(body: RecallRequest, memory: ReadMemory, request: Request) -> Response:
    """Has this happened before, and what worked? The same ranked, explained result as the Python API."""
    asked = functools.partial(memory.recall, body.topic, body.k, arm=body.arm, services=body.services,
                              severity=body.severity)  # fmt: skip
    return Response(await recalled(request.app.state.grandbo, body.topic, body.arm, asked),
                    media_type="application/json")  # fmt: skip


class TriageRequest(BaseModel):
    """An alert to triage: a received alert's id, or the alert itself (at least its summary)."""

    model_config = ConfigDict(extra="forbid")
    alert_id: str | None = Field(default=None, max_length=64, description="An alert the webhooks received.")
    summary: str | None = Field(default=None, min_length=1, max_length=2000, description="What fired, in a sentence.")
    service: str | None = Field(default=None, max_length=128)
    severity: str | None = Field(default=None, max_length=32)
    description: str = Field(default="", max_length=20_000)
    labels: dict[str, str] = Field(default_factory=dict, max_length=100)
    narrate: bool = Field(default=True, description="Let the configured LLM narrate the plan (within its budget).")


@router.post("/triage", response_model=TriagePlan, tags=["recall"])
def triage(body: TriageRequest, memory: ReadMemory) -> Response:
    """A ranked, cited action plan for an alert: mechanisms, runbooks with their record, confidence, or what to
    collect first; on time whatever the LLM does (`path` says which produced it)."""
    if (body.alert_id is None) == (body.summary is None):
        raise InvalidInputError("Give either alert_id (a received alert) or summary (the alert itself).", detail={})
    stored = memory.alerts.get(body.alert_id) if body.alert_id else None
    alert = stored.alert if stored else body.model_dump(
        include={"summary", "service", "severity", "description", "labels"})  # fmt: skip
    group = memory.alert_groups.plan_group(stored.group_id) if stored else None  # a grouped alert's plan: the group's
    plan, _ = memory.triage.run(alert, narrate=body.narrate, group=group)
    return Response(plan.model_dump_json(), media_type="application/json")


@router.get("/stats", response_model=CorpusStats, tags=["memories"])
def stats(memory: ReadMemory) -> dict[str, Any]:
    """How much of the memory each arm can read."""
    return memory.stats().model_dump(mode="json")


@router.get("/examples", response_model=list[Entry], tags=["context"])
def examples(
    memory: ReadMemory,
    content_type: Annotated[str, Query(min_length=1, max_length=100, description="status-update, post-mortem...")],
    limit: Annotated[int, Query(ge=1, le=MAX_K)] = 5,
) -> Response:
    """The newest examples of a content type (memories of kind `example` with `meta.content_type`), newest
    first, unscored: drafts a writing agent imitates."""
    found = memory.examples(content_type, limit)
    return Response("[" + ",".join(entry.model_dump_json() for entry in found) + "]", media_type="application/json")


@router.get("/context", response_model=ContextBlock, tags=["context"])
async def context(
    memory: ReadMemory,
    request: Request,
    content_type: Annotated[str | None, Query(max_length=100)] = None,
    topic: Annotated[str | None, Query(max_length=MAX_TOPIC_CHARS)] = None,
    budget: Annotated[
        int, Query(ge=1, le=MAX_BUDGET, description="Characters the profile part may take; learned lines go first.")
    ] = DEFAULT_BUDGET,
) -> Response:
    """The block an agent's system prompt gets: profile and learned notes; with `topic`, recall after it."""

    def block(_waited_ms: float) -> str:
        return memory.context(content_type=content_type, topic=topic, budget=budget).model_dump_json()

    # The topic's query embedded ahead (`tiers.context` recalls it by the reranked arm).
    return Response(await embedded_first(request.app.state.grandbo, topic, block), media_type="application/json")


# ------------------------------------------------------------------------------------ alerts


class Received(BaseModel):
    """What a delivery stored: each alert in brief (id, verdict, top match); the whole at `GET /v1/alerts/{id}`."""

    alerts: list[AlertBrief]
    new: int = Field(
        description="Alerts stored by this delivery, or reopened by it (a resolved PagerDuty incident reopened: "
        "triaged again); the rest were redeliveries."
    )


@router.post(
    "/webhooks/{source}",
    tags=["alerts"],
    **delivery_route(
        Received,
        "At least one alert of the delivery was new.",
        "The vendor's payload, exactly as it sends it (one of the shapes below, by `source`).",
        {"anyOf": [{"$ref": f"#/components/schemas/{model.__name__}"} for model in PAYLOADS]},
    ),
)
async def receive_webhook(
    source: Annotated[str, Path(pattern=f"^({'|'.join(SOURCES)})$")],
    request: Request,
    memory: WriteMemory,
    x_pagerduty_signature: Annotated[
        str | None,
        Header(
            max_length=4000,
            description="PagerDuty only, and required there: `v1=<hex HMAC-SHA256 of the body>`, one per secret, "
            "comma-separated (`grandbo webhooks add pagerduty`).",
        ),
    ] = None,
) -> Response:
    """Receive a paging vendor's webhook: every alert is stored before any recall, once (by the sender's event
    id or fingerprint). The answer is each alert in brief (its id, the verdict, the top match and runbook); the
    recall and the plan are at `GET /v1/alerts/{id}`."""
    received = await receive(request, flow.receive, memory, source)
    out = Received(alerts=[stored.brief() for stored, _ in received], new=sum(new for _, new in received))
    return answered(out, wrote=out.new > 0)


class AlertPage(Page[AlertBrief]):
    """A page of alerts in brief, and where the next one starts."""


@router.get("/alerts", response_model=AlertPage, tags=["alerts"])
def list_alerts(
    memory: ReadMemory,
    asked: PageAsked,
    status: Annotated[Literal["firing", "resolved"] | None, Query()] = None,
    service: Annotated[str | None, Query(max_length=128, description="A catalog name or one of its aliases.")] = None,
    source: Annotated[str | None, Query(pattern=f"^({'|'.join(SOURCES)})$")] = None,
    since: Annotated[IsoTime | None, Query(description="Changed at or after this time (ISO 8601).")] = None,
    until: Annotated[IsoTime | None, Query(description="Changed before this time (ISO 8601).")] = None,
) -> Response:
    """The received alerts in brief, the most recently changed (delivered, resolved, triaged) first, a page at a
    time; each whole at `GET /v1/alerts/{id}`. Reads the alerts of the page only, each without its recall (its
    brief is kept beside it), its top runbook as the ledger holds it now."""
    found, more = briefs(memory.alerts, asked.limit, memory.triage.current, lambda ids: {
        entry_id: entry.title for entry_id, entry in memory.get_many(ids).items()
    }, after=asked.after, status=status, service=service, source=source, since=since, until=until)  # fmt: skip
    page = AlertPage(items=found, next_cursor=encode(more))
    return Response(page.model_dump_json(), media_type="application/json")


@router.get("/alerts/{alert_id}", response_model=StoredAlert, tags=["alerts"])
def get_alert(alert_id: Annotated[str, Path(max_length=64)], memory: ReadMemory) -> Response:
    """One received alert whole: the normalized alert, the sentence asked, the recall and the plan, its
    runbooks' records as the ledger holds them now, and its group as it stands now (alerts joined since)."""
    stored = memory.alerts.get(alert_id)
    if stored.plan is not None:
        plan = memory.triage.current(stored.plan)
        if plan.group is not None:
            plan.group = memory.alert_groups.plan_group(stored.group_id) or plan.group
        stored = stored.model_copy(update={"plan": plan})
    return Response(stored.model_dump_json(), media_type="application/json")


# ------------------------------------------------------------------------------------ health


def add_health(app: FastAPI, grandbo: Grandbo) -> None:
    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Alive: the process answers. On the event loop, not a worker thread: with every thread busy (probe 17: 40
        slow calls of one key) a liveness probe that queued for one failed, and the process was restarted."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    def readyz() -> JSONResponse:
        """Ready (200): the store answers (with GRANDBO_READYZ_COUNTS, also how many embed jobs and write-behinds
        wait, and how many of each gave up, every org's together); `degraded` (still 200) when the embedding
        provider does not answer (recall lexical only, writes queued) or the embedded store's disk is full (reads go
        on, writes answer 507). 503 when the store does not answer or the provider cannot be built."""
        checks: dict[str, Any] = {}
        ready, degraded = True, False
        try:
            counts = grandbo.settings.readyz_counts  # every org's together, to a caller without a key (probe 17)
            readiness = grandbo.readiness(counts)  # 1 or 2 queries, whatever the number of orgs
            checks["store"] = {"ok": True, "schema": readiness.schema}
            if counts:
                checks["store"] |= readiness.counts()
            if (refused := grandbo.health.refused_writes()) is not None:  # reads go on; writes answer 507 meanwhile
                degraded = True
                checks["store"] |= {"writable": False, "error": refused.code, "message": refused.message,
                                    "remedy": refused.remedy}  # fmt: skip
        except GrandboError as error:
            ready, checks["store"] = False, {"ok": False, "error": error.code, "message": error.message,
                                             "remedy": error.remedy}  # fmt: skip
        try:
            provider = grandbo.provider()
            state = grandbo.health.report()
            degraded = degraded or not state["ok"]
            checks["provider"] = {**state, "space": f"{provider.name}:{provider.model}:{provider.dimension}"}
        except GrandboError as error:
            ready, checks["provider"] = False, {"ok": False, "error": error.code, "message": error.message}
        status = "not_ready" if not ready else "degraded" if degraded else "ready"
        return JSONResponse({"status": status, **checks}, status_code=200 if ready else 503)
