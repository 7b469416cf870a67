"""Value types shared by every part of Grandbo. No I/O here."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from grandbo.errors import InvalidInputError
from grandbo.names import service_name
from grandbo.values import MAX_META_BYTES, IsoTime, check_timestamp, checked_text, identifiers
from grandbo.words import Vocabulary

ORG_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ENTRY_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


def utcnow() -> datetime:
    return datetime.now(UTC)


def entry_text(title: str, body: str, tags: Iterable[str] = (), services: Iterable[str] = ()) -> str:
    """The text of an entry that both arms index and the provider embeds: title, body, then its identifiers."""
    extras = " ".join([*services, *tags])
    return "\n".join(part for part in (title.strip(), body.strip(), extras) if part)


class Kind(Vocabulary):
    """What an entry is."""

    FINDING = "finding"
    RUNBOOK = "runbook"
    POSTMORTEM = "post-mortem"
    FACT = "fact"
    EXAMPLE = "example"
    NOTE = "note"


class Source(StrEnum):
    """How an entry came to be written."""

    INCIDENT = "incident"  # write-behind when an incident closes
    ADMIN = "admin"  # typed by an admin
    CORRECTION = "correction"  # supersedes an earlier entry
    IMPORT = "import"  # bulk import


class Status(Vocabulary):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    RETIRED = "retired"


class Severity(StrEnum):
    """Incident severity tiers, sev1 the worst."""

    SEV1 = "sev1"
    SEV2 = "sev2"
    SEV3 = "sev3"
    SEV4 = "sev4"
    SEV5 = "sev5"

    @property
    def tier(self) -> int:
        return int(self.value[-1])

    @classmethod
    def parse(cls, value: str | int) -> Severity:
        """Read the usual spellings: sev1, SEV-1, P1, 1, critical, high, medium, low, info."""
        text = str(value).strip().lower().replace("-", "").replace(" ", "")
        named = {"critical": 1, "high": 2, "major": 2, "medium": 3, "moderate": 3, "minor": 4, "low": 4, "info": 5}
        if text in named:
            return cls(f"sev{named[text]}")
        # Not isdigit() and int(): it holds for a superscript, which int() refuses. Leading zeros (P01) read as ever.
        digits = text.removeprefix("sev").removeprefix("p").lstrip("0")
        if digits in {"1", "2", "3", "4", "5"}:
            return cls(f"sev{digits}")
        raise ValueError(
            f"unknown severity {value!r}: use sev1..sev5 (sev1 the worst), P1..P5, 1..5, "
            "or critical/high/medium/low/info"
        )


@dataclass(frozen=True, slots=True)
class Listing:
    """A page of an organization's entries, the newest first (by creation, then id): at most `limit`, created
    before `before` (a time and an id: the last of the previous page), of `kind`, of one of `kinds`, of `status`
    and naming `service` if given. With `after` (the first of a page), the page toward the newest instead: those
    created after it, the oldest first. With `after_seq` (an export's pages): those last written after it, by seq."""

    limit: int
    before: tuple[datetime, str] | None = None
    kind: Kind | None = None
    service: str | None = None
    kinds: tuple[Kind, ...] = ()
    status: Status | None = None
    after: tuple[datetime, str] | None = None
    after_seq: int | None = None


class Arm(Vocabulary):
    """Which retrieval arms a recall uses."""

    LEXICAL = "lexical"
    VECTOR = "vector"
    HYBRID = "hybrid"  # both arms fused by RRF
    RERANKED = "reranked"  # hybrid, then the composite re-ranker (topology, severity, runbooks, age)


class EventType(StrEnum):
    REMEMBERED = "remembered"
    CORRECTED = "corrected"
    RETIRED = "retired"
    PURGED = "purged"  # the entry's text was erased from the log and the projection (`purge`)


MAX_BODY_CHARS, MAX_SERVICES = 200_000, 50  # an entry's body (a long post-mortem) and services, on every face
NO_VECTOR_VERDICT = "no vector arm"  # RecallResult.calibration without a vector arm's cosine: no verdict
PENDING_VERDICT = "vectors pending"  # ... and with too many memories still waiting for their vector: no verdict


class NewEntry(BaseModel):
    """What a caller hands to `remember`: an entry before it has a place in the log."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    id: str | None = Field(default=None, description="Stable id; generated when omitted.")
    title: str = Field(min_length=1, max_length=500)
    body: str = Field(default="", max_length=MAX_BODY_CHARS)
    kind: Kind = Kind.FACT
    source: Source = Source.ADMIN
    tags: list[str] = Field(default_factory=list, max_length=100)
    services: list[str] = Field(default_factory=list, max_length=MAX_SERVICES)
    severity: Severity | None = None
    occurred_at: IsoTime | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str | None) -> str | None:
        if value is not None and not ENTRY_ID_PATTERN.fullmatch(value):
            raise ValueError(
                f"entry id {value!r} must start with a letter or digit and use only letters, digits "
                "and . _ : @ - (at most 128 characters)"
            )
        return value

    @field_validator("title", "body", "meta")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return checked_text(value)

    @field_validator("meta")
    @classmethod
    def _small_meta(cls, value: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(value, ensure_ascii=False).encode())
        if size > MAX_META_BYTES:
            raise ValueError(
                f"is {size:,} bytes as JSON; at most {MAX_META_BYTES:,} (64 KiB): keep structured facts in meta and "
                "long text in the body"
            )
        return value

    @field_validator("tags")
    @classmethod
    def _check_tags(cls, value: list[str]) -> list[str]:
        return identifiers(value, "tag")

    @field_validator("services")
    @classmethod
    def _check_services(cls, value: list[str]) -> list[str]:
        return identifiers([service_name(v) for v in value], "service")

    @field_validator("severity", mode="before")
    @classmethod
    def _parse_severity(cls, value: Any) -> Any:
        if value is None or value == "" or isinstance(value, Severity):
            return value or None
        return Severity.parse(value)

    @field_validator("occurred_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        return None if value is None else check_timestamp(value, "occurred_at")


class Entry(BaseModel):
    """A memory as the projection holds it."""

    model_config = ConfigDict(frozen=True)

    id: str
    org_id: str
    title: str
    body: str
    kind: Kind
    source: Source
    tags: list[str]
    services: list[str]
    severity: Severity | None
    occurred_at: datetime
    status: Status
    created_at: datetime
    updated_at: datetime
    supersedes: str | None = None
    superseded_by: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    seq: int = Field(description="Sequence number, in its organization's own log, of the last event that shaped it.")


class Event(BaseModel):
    """One line of the append-only memory log."""

    model_config = ConfigDict(frozen=True)

    seq: int
    org_id: str
    entry_id: str
    type: EventType
    payload: dict[str, Any]
    actor: str
    at: datetime


class EmbeddingSpace(BaseModel):
    """The provider, model and dimension that produced a vector; vectors compare only within one."""

    model_config = ConfigDict(frozen=True)

    provider: str
    model: str
    dimension: int = Field(gt=0)

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}:{self.dimension}"


class LexicalEvidence(BaseModel):
    rank: int
    score: float = Field(description="BM25 score.")
    terms: dict[str, float] = Field(description="Each matched query term and its share of the score.")
    coverage: float = Field(description="Share of the query's total idf carried by the matched terms.")


class VectorEvidence(BaseModel):
    rank: int
    similarity: float = Field(description="Cosine similarity to the query.")
    distance: float = Field(description="Cosine distance, 1 - similarity.")


class RerankWeights(BaseModel):
    """Weights of the composite score; configurable per organization."""

    similarity: float = Field(0.40, ge=0, le=1, description="Weight of the fused relevance, scaled to [0, 1].")
    service: float = Field(
        0.25, ge=0, le=1, description="Weight of the service match (same, falling with each hop, none)."
    )
    severity: float = Field(0.25, ge=0, le=1, description="Weight of the severity match.")
    effectiveness: float = Field(0.10, ge=0, le=1, description="Weight of the runbook's win rate.")
    age: float = Field(0.02, ge=0, le=1, description="lambda: the weight of the age penalty.")


class Calibration(BaseModel):
    """The verdict's calibration for one provider and model: a logistic model over features of a recall's
    candidates (`retrieval.verdict.FEATURES`) fit on labelled queries (answerable or not). P(seen before) =
    1 / (1 + exp(-(intercept + sum(coefficient_i * feature_i)))); "seen before" from `threshold` up."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(min_length=1)
    model: str = Field(min_length=1)
    features: list[str] = Field(min_length=1)
    coefficients: list[float] = Field(min_length=1)
    intercept: float
    threshold: float = Field(0.5, gt=0.0, lt=1.0)
    fitted_on: str = Field("", description="Where it was fit: the data set, split and query counts.")
    source: Literal["shipped", "organization"] = "shipped"

    @model_validator(mode="after")
    def _aligned(self) -> Calibration:
        if len(self.features) != len(self.coefficients):
            raise ValueError("one coefficient per feature")
        if not all(math.isfinite(v) for v in [*self.coefficients, self.intercept]):
            raise ValueError("coefficients and intercept must be finite numbers")
        return self

    @property
    def label(self) -> str:
        return f"{self.source}: {self.provider}:{self.model}" + (f" ({self.fitted_on})" if self.fitted_on else "")


class Component(BaseModel):
    value: float
    weight: float
    contribution: float
    note: str = ""


class RerankEvidence(BaseModel):
    """Each component of a hit's composite score and its weighted contribution."""

    final: float
    similarity: Component
    service: Component
    severity: Component
    effectiveness: Component
    age: Component


class Explanation(BaseModel):
    """Why a hit ranked where it did."""

    method: Literal["rrf", "lexical", "vector", "reranked", "identifier"]
    rrf_k: int | None = None
    fused: float | None = Field(default=None, description="The RRF score, when both arms ran.")
    fused_rank: int | None = Field(default=None, description="Rank after fusion, before re-ranking.")
    lexical: LexicalEvidence | None = None
    vector: VectorEvidence | None = None
    rerank: RerankEvidence | None = Field(default=None, description="Each component of the composite score.")


class Hit(BaseModel):
    """One recalled memory, its rank, the score it is sorted by and, re-ranked, its composite score."""

    rank: int
    sort_score: float = Field(
        description="Falls with rank (what run files and clients sort by): re-ranked, the composite score, capped "
        "just below the hit above when the relevance band kept this hit under it; hybrid, the fused RRF score; "
        "one arm alone, that arm's own score (BM25 or cosine)."
    )
    composite: float | None = Field(
        default=None,
        description="Re-ranked only: the composite score itself (why.rerank.final), which need not fall with rank.",
    )
    score: float = Field(
        description="The same value as sort_score, kept for clients written before it had that name; read sort_score."
    )
    entry: Entry
    why: Explanation
    label: Literal["frequent", "rare", "novel"] | None = Field(
        default=None,
        description="Re-ranked recall: frequent (3+ strong matches on its services in the last year), rare, or "
        "novel (too weak a match to count as a recurrence).",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_value_two_names(cls, data: Any) -> Any:
        """`score` is `sort_score` under its old name: given one (a result stored before `sort_score` existed,
        or one built now), the other is the same value."""
        if isinstance(data, dict) and ("sort_score" in data) != ("score" in data):
            data = (
                {**data, "score": data["sort_score"]} if "sort_score" in data else {**data, "sort_score": data["score"]}
            )
        return data


class CorpusStats(BaseModel):
    """How much of an organization's memory each arm can read."""

    org_id: str
    total: int = Field(description="Active entries.")
    readable: int = Field(description="Active entries with a vector of the active embedding space.")
    unreadable: int = Field(description="Active entries the vector arm cannot see (lexical only).")
    pending: int = Field(description="Embed jobs waiting in the outbox.")
    failed: int = Field(description="Embed jobs that keep failing (see `grandbo backfill`).")
    unembeddable: int = Field(
        0, description="Entries whose text has no vector (an all-zero answer): found lexically only, never retried."
    )
    stale: int = Field(description="Vectors from another embedding space, awaiting re-embedding.")
    space: EmbeddingSpace | None
    write_behinds: int = Field(0, description="Acknowledged write-behinds (incident syncs, edits' learning, "
                               "alerts' triage) not done yet.")  # fmt: skip
    write_behinds_failed: int = Field(0, description="Write-behinds that gave up (see `grandbo backfill`).")
    stored_bytes: int = Field(0, description="What the organization has stored, in bytes: the JSON of its memory "
                              "log and its documents' history (GRANDBO_ORG_STORAGE_LIMIT_MB counts it).")  # fmt: skip
    erasures_unfinished: list[dict[str, Any]] = Field(default_factory=list, description="Erasures of a text cut "
        "short (erasure_id, at, entries_holding: its entries still holding the text, remedy): finished by the "
        "re-driver.")  # fmt: skip
    storage_limit_bytes: int | None = Field(None, description="The most it may store (None: no limit); a write "
                                            "that would pass it is refused, 507 storage_limit.")  # fmt: skip


class EmbeddingState(BaseModel):
    """Where one entry's vector stands."""

    # failed: gave up (`grandbo backfill`); unembeddable: its text has no vector (lexical only, settled)
    state: Literal["embedded", "pending", "failed", "unembeddable", "unqueued"]
    attempts: int = 0
    last_error: str | None = None
    next_try: datetime | None = None  # when the worker may try a pending job again


class RecallTimings(BaseModel):
    embed_ms: float = 0.0
    lexical_ms: float = 0.0
    vector_ms: float = 0.0
    total_ms: float = Field(0.0, description="Whole recall excluding query embedding.")


class RecallResult(BaseModel):
    topic: str
    arm: Arm
    k: int
    hits: list[Hit]
    seen_before: bool | None = Field(
        None,
        description="Re-ranked recall: True means seen before, False no similar past incident; None: no verdict (no "
        "calibration, no vector arm's cosine, or too many memories waiting for their vector: see `calibration`).",
    )
    evidence: float | None = Field(None, description="The calibrated probability of seen before (None: no verdict).")
    calibration: str | None = Field(
        None, description=f"Re-ranked recall: the verdict's calibration, or why there is no verdict: 'uncalibrated', "
        f"'{NO_VECTOR_VERDICT}' or '{PENDING_VERDICT}' (a note says how many memories wait for their vector).",
    )  # fmt: skip
    lookup: Literal["identifier"] | None = Field(
        default=None,
        description="'identifier': the topic was one identifier, looked up lexically and exactly (no vector search).",
    )
    notes: list[str] = Field(default_factory=list, description="What degraded this answer, if anything.")
    timings: RecallTimings = Field(default_factory=RecallTimings)

    @model_validator(mode="after")
    def _ranked(self) -> RecallResult:
        if [hit.rank for hit in self.hits] != list(range(1, len(self.hits) + 1)):
            raise ValueError("hits must be ranked 1..n in order")
        return self


def parse_entry(data: NewEntry | Mapping[str, Any]) -> NewEntry:
    """Validate caller input into a NewEntry, with one clear error listing every problem."""
    if isinstance(data, NewEntry):
        return data
    try:
        return NewEntry.model_validate(dict(data))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc']) or 'entry'}: {issue['msg']}" for issue in error.errors()
        )
        raise InvalidInputError(
            f"Invalid entry: {problems}.",
            detail={"errors": [{"field": ".".join(map(str, e["loc"])), "message": e["msg"]} for e in error.errors()]},
        ) from error
