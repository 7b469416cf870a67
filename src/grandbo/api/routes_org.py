"""`/v1/catalog`, `/v1/settings/rerank`, `/v1/settings/policy`, `/v1/settings/language`, `/v1/settings/redaction`,
`/v1/settings/calibration`, `/v1/profile`, `/v1/notes`, `/v1/keys`, `/v1/webhooks`: what admins keep."""

from __future__ import annotations

import bisect
import email.message
import json
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, SkipValidation, TypeAdapter, ValidationError, WithJsonSchema
from starlette.concurrency import run_in_threadpool

from grandbo.api.deps import AdminMemory, ReadMemory
from grandbo.api.paging import Page, PageAsked, bounded_page
from grandbo.memory import OrgMemory
from grandbo.model import RerankWeights
from grandbo.pages import Mark
from grandbo.ports import Position
from grandbo.redaction import described
from grandbo.retrieval.policy import RankingPolicy
from grandbo.tiers.catalog import MAX_DEPENDENCIES, MAX_OWNERS, MAX_TEXT
from grandbo.tiers.keys import MAX_KEY_NAME, SIGNED, Scope
from grandbo.tiers.learning_model import IN_FORCE, NOTE_MAX, Note
from grandbo.tiers.org_settings import CalibrationInForce
from grandbo.tiers.profile import Profile
from grandbo.tiers.topology import Service

router = APIRouter(prefix="/v1")
Id = Annotated[str, Path(min_length=1, max_length=128)]


# FastAPI checks a body on the event loop, which every org's requests share: a catalog's services are checked there
# only as a list, each service on the request's thread (`checked_services`). Checked whole, each name took 6 us
# outside ASCII, and a 1 MiB catalog within its limits held every org's requests 1.3-1.7 s (probe 25).
_SENT = Annotated[SkipValidation[Service], WithJsonSchema({"$ref": "#/components/schemas/Service"})]


class CatalogPut(BaseModel):
    model_config = ConfigDict(extra="forbid")
    services: list[_SENT] = Field(max_length=5000)
    replace: bool = Field(default=False, description="Drop services that are not in this list.")


_SERVICES = TypeAdapter(list[Service])


def checked_services(body: CatalogPut) -> list[Service]:
    """The body's services checked, or the refusal FastAPI would have made of them (422, each field named)."""
    try:
        return _SERVICES.validate_python(body.services)
    except ValidationError as error:
        raise RequestValidationError(
            [{**issue, "loc": ("body", "services", *issue["loc"])} for issue in error.errors()]
        ) from None


def _json_body(raw: bytes, content_type: str) -> Any:
    """A body parsed as FastAPI parses a model's: none is missing, one not sent as JSON is taken as its bytes."""
    if not raw:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    said = email.message.Message()
    said["content-type"] = content_type
    if (
        not content_type
        or said.get_content_maintype() != "application"
        or not (said.get_content_subtype() == "json" or said.get_content_subtype().endswith("+json"))
    ):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", error.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": error.msg}}]) from None  # fmt: skip
    except Exception as error:  # not UTF-8 (charset=latin-1), nested past the parser's depth: FastAPI's 400
        raise HTTPException(400, "There was an error parsing the body") from error


class ServicePage(Page[Service]):
    """A page of the catalog's services, by name, and where the next one starts."""


# A service's JSON at its caps, near enough: its texts escaped six bytes a character, its names of 128 characters
LARGEST_SERVICE = 6 * (2 * MAX_TEXT + 128 * (1 + MAX_DEPENDENCIES + MAX_OWNERS))
_NO_TIME = datetime(1970, 1, 1, tzinfo=UTC)  # the catalog pages by name alone: a cursor's time part, unread


@router.get("/catalog", response_model=ServicePage, tags=["catalog"])
def catalog(memory: ReadMemory, asked: PageAsked) -> Response:
    """The services, by name, a page of at most `limit` and 2 MiB at a time (`next_cursor` gives the rest; the
    process's topology of the org, read again only when the catalog changed)."""
    topology = memory.catalog.topology()
    names = sorted(topology.services)

    def read(n: int, after: Position) -> tuple[list[tuple[Service, Mark]], Position]:
        start = bisect.bisect_right(names, after[1]) if after is not None else 0
        found = [(topology.services[name], (_NO_TIME, name)) for name in names[start : start + n]]
        return found, found[-1][1] if found and start + n < len(names) else None

    return bounded_page(read, asked, LARGEST_SERVICE)


# Its body declared by hand, as FastAPI declared `CatalogPut` (a test compares them): read raw, it is parsed on the
# request's thread (`_put_catalog`), not the event loop. `api.openapi` adds it to the document's components.
CATALOG_SCHEMA = {
    "title": "CatalogPut",
    "type": "object",
    "additionalProperties": False,
    "required": ["services"],
    "properties": {
        "services": {
            "type": "array",
            "title": "Services",
            "items": {"$ref": "#/components/schemas/Service"},
            "maxItems": CatalogPut.model_fields["services"].metadata[0].max_length,
        },
        "replace": {
            "type": "boolean",
            "title": "Replace",
            "default": False,
            "description": CatalogPut.model_fields["replace"].description,
        },
    },
}
_CATALOG_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "$ref": "#/components/schemas/CatalogPut"}}}}}  # fmt: skip


@router.put("/catalog", response_model=list[Service], tags=["catalog"], openapi_extra=_CATALOG_BODY)
async def put_catalog(request: Request, memory: AdminMemory) -> Response:
    """Add or update services and what they call; `replace` drops the others."""
    # Parsed by FastAPI, a 1 MiB catalog's JSON held the event loop every org's requests share (issue 24); the
    # body is read there, then parsed, written and answered on a thread, as a delivery is (`deliveries.receive`):
    # what an async route returns FastAPI checks on the loop, a Response not at all.
    sent = await request.body()
    return await run_in_threadpool(_put_catalog, memory, sent, request.headers.get("content-type", ""))


def _put_catalog(memory: OrgMemory, raw: bytes, content_type: str) -> Response:
    """The catalog sent (`CatalogPut`), written; a body that is not one refused as FastAPI refuses it (422, the
    same problems: `_json_body`)."""
    try:
        body = CatalogPut.model_validate(_json_body(raw, content_type), from_attributes=True)
    except ValidationError as error:
        raise RequestValidationError([{**issue, "loc": ("body", *issue["loc"])} for issue in error.errors()]) from None
    put = memory.catalog.put(checked_services(body), replace=body.replace, actor="api")
    return JSONResponse([service.model_dump(mode="json") for service in put])


@router.get("/settings/rerank", response_model=RerankWeights, tags=["settings"])
def rerank_weights(memory: ReadMemory) -> dict[str, Any]:
    return memory.org_settings.rerank().model_dump()


@router.put("/settings/rerank", response_model=RerankWeights, tags=["settings"])
def set_rerank_weights(body: RerankWeights, memory: AdminMemory) -> dict[str, Any]:
    return memory.org_settings.set_rerank(body, actor="api").model_dump()


@router.get("/settings/policy", response_model=RankingPolicy, tags=["settings"])
def ranking_policy(memory: ReadMemory) -> dict[str, Any]:
    """How this organization's recall ranks: every number of the ranking policy, its own re-rank weights
    included (`grandbo settings policy`)."""
    return memory.ranking_policy().model_dump(mode="json")


class LanguageSetting(BaseModel):
    model_config = ConfigDict(extra="forbid")
    language: str = Field(
        min_length=1,
        max_length=32,
        description="auto (each text's language is detected) or the stemmer language of the organization's "
        "Latin-script words: english, german, french, spanish, italian, portuguese or dutch.",
    )


class LanguageChange(LanguageSetting):
    rederived: int = Field(description="Entries whose stored terms changed.")


@router.get("/settings/language", response_model=LanguageSetting, tags=["settings"])
def language(memory: ReadMemory) -> dict[str, Any]:
    return {"language": memory.org_settings.language()}


@router.put("/settings/language", response_model=LanguageChange, tags=["settings"])
def set_language(body: LanguageSetting, memory: AdminMemory) -> dict[str, Any]:
    """Declare the organization's language; the stored terms of its entries are derived again in it."""
    return memory.org_settings.set_language(body.language, actor="api")


@router.get("/settings/calibration", response_model=CalibrationInForce, tags=["settings"])
def calibration(memory: AdminMemory) -> dict[str, Any]:
    """Which calibration the seen-before verdict uses for the store's model: the organization's own (`grandbo
    calibrate`), the one shipped with Grandbo, or none ("uncalibrated": no verdict)."""
    return memory.org_settings.calibration_in_force().model_dump(mode="json")


@router.delete("/settings/calibration", response_model=CalibrationInForce, tags=["settings"])
def remove_calibration(memory: AdminMemory) -> dict[str, Any]:
    """Remove the organization's own calibration (its history is kept): the verdict goes back to the one shipped
    for the model, or to none. 404 when the organization has none of its own."""
    return memory.org_settings.remove_calibration(actor="api").model_dump(mode="json")


class ProfileChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    changes: dict[str, Any] = Field(description="facts (merged by key; empty text removes one), people, voice.")
    expected_version: int | None = Field(default=None, ge=0)


@router.get("/profile", response_model=Profile, tags=["profile"])
def profile(memory: ReadMemory) -> dict[str, Any]:
    return memory.profile.get().model_dump(mode="json")


@router.patch("/profile", response_model=Profile, tags=["profile"])
def update_profile(body: ProfileChange, memory: AdminMemory) -> dict[str, Any]:
    return memory.profile.update(body.changes, expected_version=body.expected_version, actor="api").model_dump(
        mode="json"
    )


class NoteText(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=NOTE_MAX)


class NotePage(Page[Note]):
    """A page of learned notes, the most recently written first, and where the next one starts."""


LARGEST_NOTE = 6 * NOTE_MAX + 4096  # a note's JSON at its caps, near enough (its text escaped, its signals' ids)


@router.get("/notes", response_model=NotePage, tags=["learning"])
def notes(
    memory: ReadMemory,
    asked: PageAsked,
    include_inactive: Annotated[bool, Query(description="Also the rejected and archived notes.")] = False,
) -> Response:
    """Rules learned from edits, for review: the notes in force and those pending review (as `grandbo notes list`
    shows them), or with `include_inactive` every note; the most recently written first, a page of at most `limit`
    and 2 MiB at a time (`next_cursor` gives the rest; `status` says which each is)."""
    statuses = None if include_inactive else (*IN_FORCE, "pending")
    return bounded_page(lambda n, after: memory.learning.page(statuses, n, after), asked, LARGEST_NOTE)


@router.patch("/notes/{note_id}", response_model=Note, tags=["learning"])
def edit_note(note_id: Id, body: NoteText, memory: AdminMemory) -> dict[str, Any]:
    return memory.learning.edit_note(note_id, body.text, actor="api").model_dump(mode="json")


@router.post("/notes/{note_id}/approve", response_model=Note, tags=["learning"])
def approve_note(note_id: Id, memory: AdminMemory) -> dict[str, Any]:
    """Accept a pending learned note: from now on it is part of the context block."""
    return memory.learning.approve_note(note_id, actor="api").model_dump(mode="json")


@router.post("/notes/{note_id}/reject", response_model=Note, tags=["learning"])
def reject_note(note_id: Id, memory: AdminMemory) -> dict[str, Any]:
    """Reject a learned note: it leaves the profile and is never learned again (it stays listed, rejected, until
    deleted or pruned)."""
    return memory.learning.reject_note(note_id, actor="api").model_dump(mode="json")


class NoteDeleted(BaseModel):
    id: str
    deleted: bool = True
    status: str = Field(description="The status the note had when it was deleted.")


@router.delete("/notes/{note_id}", response_model=NoteDeleted, tags=["learning"])
def delete_note(note_id: Id, memory: AdminMemory) -> dict[str, Any]:
    """Delete a learned note, whatever its status (`grandbo notes delete`): it leaves the profile or the review, its
    text goes and it no longer counts toward GRANDBO_NOTES_PER_ORG; its rule is never learned again, as after a
    rejection. 404 for an id the organization has no note of."""
    return {"id": note_id, "deleted": True, "status": memory.learning.delete_note(note_id, actor="api")}


class NotesPruned(BaseModel):
    deleted: int = Field(description="Notes deleted: the rejected ones and the archived ones.")
    rejected: int = Field(description="Rejected notes deleted; their rules stay unlearned (a digest is kept).")
    archived: int = Field(description="Archived notes deleted; a rule of theirs may be learned again, as before.")


@router.post("/notes/prune", response_model=NotesPruned, tags=["learning"])
def prune_notes(memory: AdminMemory) -> dict[str, Any]:
    """Delete the rejected and archived learned notes, which reach no prompt: room under GRANDBO_NOTES_PER_ORG
    (`grandbo notes prune`). A rejected rule is still never learned again; pending notes and those in force stay."""
    return memory.learning.prune_notes(actor="api").to_dict()


class NewKey(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scope: Scope
    name: str | None = Field(
        default=None, max_length=200, description="What the key is for; left out, the key has no name."
    )


class KeyView(BaseModel):
    id: str
    name: str
    scope: Scope
    created_at: datetime
    revoked_at: datetime | None = None


class MadeKey(KeyView):
    key: str = Field(description="The key itself: shown this once, stored only as a hash.")


class KeyPage(Page[KeyView]):
    """A page of the organization's keys, the most recently made or revoked first, and where the next one starts."""


LARGEST_KEY = 6 * MAX_KEY_NAME + 256  # a key's JSON at its caps, near enough (its name escaped, its id and times)


@router.get("/keys", response_model=KeyPage, tags=["keys"])
def keys(memory: AdminMemory, asked: PageAsked) -> Response:
    """The organization's keys, active and revoked (never the keys themselves), the most recently made or revoked
    first, a page of at most `limit` at a time (`next_cursor` gives the rest). An organization holds at most
    GRANDBO_KEYS_PER_ORG active keys; revoked ones stay listed."""
    return bounded_page(memory.keys.page, asked, LARGEST_KEY)


@router.post("/keys", status_code=201, response_model=MadeKey, tags=["keys"])
def create_key(body: NewKey, memory: AdminMemory) -> dict[str, Any]:
    record, key = memory.keys.create(body.scope, name=body.name, actor="api")
    return {**record.model_dump(mode="json"), "key": key}


@router.delete("/keys/{key_id}", response_model=KeyView, tags=["keys"])
def revoke_key(key_id: Id, memory: AdminMemory) -> dict[str, Any]:
    return memory.keys.revoke(key_id, actor="api").model_dump(mode="json")


class Redaction(BaseModel):
    own: dict[str, str] = Field(description="The organization's own patterns: name -> regular expression.")
    disabled: list[str] = Field(description="Default patterns switched off, by name.")
    defaults: list[str] = Field(description="Every default pattern's name (those not disabled are masked).")


class RedactionChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    add: dict[str, str] = Field(default_factory=dict, max_length=50, description="name -> regular expression.")
    remove: list[str] = Field(default_factory=list, max_length=50, description="Own patterns to drop, by name.")
    disable: list[str] = Field(default_factory=list, max_length=50, description="Default patterns to switch off.")
    enable: list[str] = Field(default_factory=list, max_length=50, description="Default patterns to switch on.")


@router.get("/settings/redaction", response_model=Redaction, tags=["settings"])
def redaction(memory: AdminMemory) -> dict[str, Any]:
    """What is masked before text is stored, embedded, indexed or sent to an LLM."""
    return described(memory.org_settings.redaction())


@router.patch("/settings/redaction", response_model=Redaction, tags=["settings"])
def change_redaction(body: RedactionChange, memory: AdminMemory) -> dict[str, Any]:
    """Add or remove the organization's own patterns, switch default ones off or on. Applies to text written
    from now on; what is stored stays as it was masked (`grandbo purge-text` erases a text already stored)."""
    change = body.model_dump()
    return described(memory.org_settings.set_redaction(**change, actor="api"))


class WebhookSource(BaseModel):
    source: str
    secrets: int = Field(description="How many signing secrets are accepted (two or more while one rotates).")


class WebhookSecret(BaseModel):
    model_config = ConfigDict(extra="forbid")
    secret: str = Field(min_length=8, max_length=512, description="The secret the sender signs deliveries with.")


Source = Annotated[str, Path(min_length=1, max_length=64)]


@router.get("/webhooks", response_model=list[WebhookSource], tags=["webhooks"])
def webhook_sources(memory: AdminMemory) -> list[dict[str, Any]]:
    """The signing sources and how many secrets each accepts; a secret itself is never shown again."""
    return [{"source": source, "secrets": len(memory.webhook_secrets.secrets(source))} for source in SIGNED]


@router.post("/webhooks/{source}/secrets", response_model=WebhookSource, tags=["webhooks"])
def add_webhook_secret(source: Source, body: WebhookSecret, memory: AdminMemory) -> dict[str, Any]:
    """Accept deliveries signed with this secret too: older secrets stay valid until the rotation ends."""
    return {"source": source, "secrets": memory.webhook_secrets.add(source, body.secret, actor="api")}


@router.post("/webhooks/{source}/rotate-done", response_model=WebhookSource, tags=["webhooks"])
def end_webhook_rotation(source: Source, memory: AdminMemory) -> dict[str, Any]:
    """End a secret rotation: only the newest secret stays accepted."""
    memory.webhook_secrets.remove_all_but_newest(source, actor="api")
    return {"source": source, "secrets": len(memory.webhook_secrets.secrets(source))}
