"""Runbooks and post-mortems (semantic tier), the effectiveness ledger, the service catalog and the
re-ranking settings of an organization. They use the org-bound handle's seams and the org's documents."""

from __future__ import annotations

import difflib
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import structlog
from pydantic import BaseModel, Field, StrictBool, ValidationError

from grandbo.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    UnreadableRecordError,
    validation_problems,
)
from grandbo.model import Calibration, Entry, Kind, RerankWeights, Source, utcnow
from grandbo.ports import DocumentWrite, OrgDocuments, OrgEntries
from grandbo.redaction import DEFAULT_NAMES, Redactor, checked_extra
from grandbo.retrieval import verdict
from grandbo.retrieval.languages import AUTO, declared
from grandbo.tiers import operations
from grandbo.tiers.effectiveness import Effectiveness, Outcome, OutcomeKind, summarize, time_to_mitigate
from grandbo.tiers.operations import OUTCOMES, SERVICES, SETTINGS
from grandbo.tiers.records import read_record
from grandbo.tiers.topology import Service, Topology, parse_catalog, twice

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)


class RunbookStep(BaseModel):
    text: str = Field(min_length=1)


class Runbooks:
    """Runbooks are memories of kind `runbook` whose id outcomes refer to; their steps live in meta."""

    def __init__(self, memory: OrgMemory) -> None:
        self.memory = memory

    def add(
        self,
        runbook_id: str,
        title: str,
        steps: Sequence[str],
        *,
        description: str = "",
        services: Sequence[str] = (),
        tags: Sequence[str] = (),
        actor: str = "api",
    ) -> Entry:
        steps = [step.strip() for step in steps]
        if not steps or not all(steps):
            raise InvalidInputError(
                f"Runbook {runbook_id!r} needs at least one step, and no step may be empty.", detail={"id": runbook_id}
            )
        body = "\n".join(filter(None, [description, *(f"{n}. {step}" for n, step in enumerate(steps, start=1))]))
        return self.memory.remember(
            {"id": runbook_id, "title": title, "body": body, "kind": Kind.RUNBOOK, "services": list(services),
             "tags": [runbook_id, *tags], "meta": {"steps": list(steps)}},
            actor=actor,
        )  # fmt: skip

    def postmortem(self, incident_id: str, title: str, body: str, *, services: Sequence[str] = (),
                   severity: str | None = None, actor: str = "api", entry_id: str | None = None) -> Entry:  # fmt: skip
        """Retain a post-mortem as memory (kind post-mortem, linked to its incident); `entry_id` makes a
        retry write it once."""
        return self.memory.remember(
            {"title": title, "body": body, "kind": Kind.POSTMORTEM, "source": Source.INCIDENT,
             "services": list(services), "severity": severity, "tags": [incident_id],
             "meta": {"incident_id": incident_id}, **({"id": entry_id} if entry_id else {})},
            actor=actor,
        )  # fmt: skip

    def get(self, runbook_id: str) -> Entry:
        entry = self.memory.get(runbook_id)
        if entry.kind is not Kind.RUNBOOK:
            raise NotFoundError(f"{runbook_id!r} is a {entry.kind.value}, not a runbook.", detail={"id": runbook_id})
        return entry


class Ledger:
    """What each runbook did when it was tried: outcome events, summarized at query time."""

    def __init__(self, memory: OrgMemory, documents: OrgDocuments, snapshot: Callable[[], operations.Snapshot]) -> None:
        self.memory = memory
        self.documents = documents
        self._snapshot = snapshot  # the org's shared snapshot, whose outcomes are read once per ledger change

    def record(
        self,
        runbook_id: str,
        kind: OutcomeKind | str,
        *,
        incident_id: str | None = None,
        service: str | None = None,
        time_to_mitigate_s: float | None = None,
        rating: int | None = None,
        comment: str = "",
        actor: str = "api",
        outcome_id: str | None = None,
        cited: bool = False,
    ) -> Outcome:
        """Record one outcome. With `outcome_id`, recording it again changes nothing (a retried write-behind
        counts once). The runbook must be known to the org (`known_runbook`), so a mistyped id is refused,
        naming close ones, instead of filing effectiveness nobody sees; `cited` skips that check for the
        caller whose own record names the runbook (an incident's close)."""
        try:
            kind = OutcomeKind(kind)
        except ValueError as error:
            raise InvalidInputError(
                f"Unknown outcome {kind!r}: use one of {', '.join(k.value for k in OutcomeKind)}.",
                detail={"kind": str(kind)},
            ) from error
        if kind is OutcomeKind.RATED and rating not in (1, -1):
            raise InvalidInputError("A rating is +1 (thumbs up) or -1 (thumbs down).", detail={"rating": rating})
        time_to_mitigate(time_to_mitigate_s)
        if not cited:
            self.known_runbook(runbook_id)
        outcome = Outcome(
            org_id=self.memory.org, runbook_id=runbook_id, kind=kind, incident_id=incident_id,
            service=service.lower() if service else None, time_to_mitigate_s=time_to_mitigate_s, rating=rating,
            comment=comment, actor=actor, at=utcnow(),
        )  # fmt: skip
        data = outcome.model_dump(mode="json", exclude={"seq", "org_id"})
        doc_id = outcome_id or f"out-{utcnow().strftime('%Y%m%d%H%M%S%f')}-{secrets.token_hex(3)}"
        if outcome_id is not None and (known := self.documents.get(OUTCOMES, outcome_id)) is not None:
            return read_record(Outcome, known, "outcome", given={"org_id": self.memory.org})
        write = DocumentWrite(OUTCOMES, doc_id, data, f"outcome.{kind.value}", ref=runbook_id,
                              expected_version=0 if outcome_id else None)  # fmt: skip
        try:
            self.documents.put([write], actor)
        except ConflictError:  # a concurrent retry recorded it first
            if outcome_id is None:
                raise
        return outcome

    def known_runbook(self, runbook_id: str, *, asking: bool = False) -> None:
        """Refuse (NotFoundError, naming the closest known ids) a runbook id the org has no trace of. Known:
        an entry of kind runbook with that id (any status), an id that already has outcomes or that an
        incident cited (the snapshot), or one a memory cites in `meta.runbook_id` (runbooks may live in a
        wiki while findings name them: the re-ranker weighs a finding by its cited runbook's ledger)."""
        entry = self.memory.find(runbook_id)
        if entry is not None and entry.kind is Kind.RUNBOOK:
            return
        if entry is not None:
            raise InvalidInputError(
                f"{runbook_id!r} is a {entry.kind.value}, not a runbook: outcomes are recorded for runbooks. "
                "Name the runbook that was run (`grandbo runbook add` makes one).",
                detail={"runbook_id": runbook_id, "kind": entry.kind.value},
            )
        snapshot = self._snapshot()
        if runbook_id in snapshot.outcomes or runbook_id in snapshot.services_used:
            return
        known = set(snapshot.outcomes) | set(snapshot.services_used)
        for held in self.memory.entries(include_inactive=True):  # only for an id not found above
            if held.kind is Kind.RUNBOOK:
                known.add(held.id)
            if isinstance(cited := held.meta.get("runbook_id"), str) and cited:
                known.add(cited)
        if runbook_id in known:
            return
        close = difflib.get_close_matches(runbook_id, sorted(known), n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        if asking:  # its record is asked for: nothing would be recorded
            then = f"`grandbo runbook stats {close[0]}`" if close else "the id `grandbo runbook add ID` gave it"
            message = f"No runbook {runbook_id!r} in org {self.memory.org!r}, nor an outcome of one.{hint} Ask by "
            message += f"the runbook's id ({then})."
        else:
            message = f"No runbook {runbook_id!r} in org {self.memory.org!r}, so its outcome would count for nothing "
            message += f"you can see.{hint} Record it under the runbook's id, or add the runbook first (`grandbo "
            message += "runbook add`, POST /v1/runbooks)."
        raise NotFoundError(message, detail={"runbook_id": runbook_id, "close": close})

    def import_outcomes(
        self, records: Sequence[Mapping[str, Any]], *, prefix: str = "imported", actor: str = "import"
    ) -> int:
        """Record past outcomes as they happened (each with its own `at`); ids `<prefix>-<n>`, so that
        importing the same records again replaces them instead of counting them twice."""
        writes = []
        for number, record in enumerate(records):
            try:  # a record that is not an outcome: say which, and why
                outcome = Outcome.model_validate({**record, "org_id": self.memory.org})
                problem = ""
            except ValidationError as error:
                problem = validation_problems(error)
            except TypeError:
                problem = "not an object"
            if problem:
                raise InvalidInputError(
                    f"Outcome record {number + 1} is not an outcome ({problem}); nothing was imported. Each needs "
                    "runbook_id and kind (recommended, executed, succeeded, failed or rated).",
                    detail={"record": number + 1},
                )
            data = outcome.model_dump(mode="json", exclude={"seq", "org_id"})
            writes.append(DocumentWrite(OUTCOMES, f"{prefix}-{number:06d}", data, "outcome.imported",
                                        ref=outcome.runbook_id))  # fmt: skip
        self.documents.put(writes, actor)
        return len(writes)

    def outcomes(self, runbook_ids: Sequence[str]) -> list[Outcome]:
        return operations.outcomes(self.memory.org, self.documents, runbook_ids)

    def every_outcome(self) -> list[Outcome]:
        """Every runbook's outcomes, oldest first (analytics)."""
        return sorted((o for lines in self._snapshot().outcomes.values() for o in lines), key=lambda o: o.at)

    def effectiveness(self, runbook_id: str, service: str | None = None) -> Effectiveness:
        return summarize(runbook_id, self.outcomes([runbook_id]), service)


class Catalog:
    """The organization's services and their dependencies."""

    def __init__(self, documents: OrgDocuments) -> None:
        self.documents = documents

    def import_text(self, text: str, *, replace: bool = False, actor: str = "api") -> list[Service]:
        """Add or update services from a YAML/JSON catalog; with `replace`, drop services not in it."""
        services = parse_catalog(text)
        return self.put(services, replace=replace, actor=actor)

    def put(self, services: Sequence[Service], *, replace: bool = False, actor: str = "api") -> list[Service]:
        if problems := twice(services):
            raise InvalidInputError("Invalid catalog: " + "; ".join(problems) + ".", detail={"problems": problems})
        writes = [
            DocumentWrite(SERVICES, s.name, s.model_dump(mode="json"), "service.put", ref=s.name) for s in services
        ]
        if replace:
            keep = {s.name for s in services}
            writes += [
                DocumentWrite(SERVICES, doc.doc_id, None, "service.removed", ref=doc.doc_id)
                for doc in self.documents.find(SERVICES)
                if doc.doc_id not in keep
            ]
        self.documents.put(writes, actor)
        return list(services)

    def topology(self) -> Topology:
        return operations.topology(self.documents)


class LearningSetting(BaseModel):
    auto_apply: StrictBool = False  # a stored "false" must not read as True


class RedactionSetting(BaseModel):
    extra: dict[str, str] = Field(default_factory=dict)
    disabled: list[str] = Field(default_factory=list)


RELEARN = "set it again (`grandbo settings learning --org ORG --review`, or `--auto-apply`)"
RESTATE = (
    "state the organization's own patterns again (`grandbo settings redaction --add NAME=REGEX --org ORG`, and "
    "`--disable NAME` for a default it had switched off; PATCH /v1/settings/redaction over the API): a change "
    "writes the setting anew from what it gives, every other default on"
)


class CalibrationInForce(BaseModel):
    """Which calibration the seen-before verdict uses for the store's embedding model."""

    applies: Literal["organization", "shipped", "uncalibrated"] = Field(
        description="The organization's own calibration, the one shipped with Grandbo for the model, or none "
        "(recall gives no seen-before verdict)."
    )
    space: str = Field(description="The provider and model the verdict is for: the store's embedding space.")
    calibration: Calibration | None = Field(description="The calibration in force (None: uncalibrated).")
    unused: Calibration | None = Field(
        default=None,
        description="The organization's own calibration when it is for another provider or model: kept, not used.",
    )


FIT_ONE = "fit one on labelled queries with `grandbo calibrate DIR --org {org}`"


class OrgSettings:
    """Per-organization settings: the re-ranking weights, whether learned notes apply without review, redaction,
    the verdict's calibration and the language of the organization's text."""

    def __init__(self, documents: OrgDocuments, entries: OrgEntries) -> None:
        self.documents = documents
        self.entries = entries

    def language(self) -> str:
        """`auto` (each entry's and topic's Latin-script words are stemmed in the language detected in them) or
        the stemmer language the organization declared (see `set_language`)."""
        return self.entries.language() or AUTO

    def set_language(self, language: str, actor: str = "api") -> dict[str, Any]:
        """Declare the language of the organization's Latin-script words (`auto` goes back to detection).

        Its entries are indexed and its topics stemmed in it: the stored terms of every entry it holds are
        derived again at once (one transaction; writes of the org wait for it), so old and new entries match
        the same topics. Other organizations are not touched. The declaration is recorded in the settings'
        history (and exported with them); `rederived` counts the entries whose terms changed."""
        wanted = declared(language)
        changed = self.entries.set_language(wanted) if wanted != self.entries.language() else 0
        # The store holds the language; the record (history, exports) follows it, and is written again when it
        # is missing or says otherwise (a crash or a failed write between the two left it behind).
        record = {"language": wanted or AUTO}
        held = self.documents.get(SETTINGS, "language")
        if changed or (held.data if held is not None else {"language": AUTO}) != record:
            self.documents.put([DocumentWrite(SETTINGS, "language", record, "settings.language")], actor)
        return {"language": wanted or AUTO, "rederived": changed}

    def rerank(self) -> RerankWeights:
        return operations.rerank_weights(self.documents)

    def auto_apply_learned(self) -> bool:
        """Whether notes learned from edits reach the context block at once (opt-in) instead of waiting for an
        admin's review. Off by default: an edited draft carrying a prompt injection must not become a rule
        every agent obeys."""
        doc = self.documents.get(SETTINGS, "learning")
        return read_record(LearningSetting, doc, "learning setting", remedy=RELEARN).auto_apply if doc else False

    def set_auto_apply_learned(self, enabled: bool, actor: str = "api") -> bool:
        self.documents.put([DocumentWrite(SETTINGS, "learning", {"auto_apply": enabled}, "settings.learning")], actor)
        return enabled

    def redaction(self) -> dict[str, Any]:
        """The organization's redaction settings: its own patterns (name -> regex) and the defaults it switched
        off (see `grandbo.redaction`)."""
        doc = self.documents.get(SETTINGS, "redaction")
        if doc is None:
            return {"extra": {}, "disabled": []}
        return read_record(RedactionSetting, doc, "redaction setting", remedy=RESTATE).model_dump()

    def redactor(self) -> Redactor:
        """What masks this organization's text before it is stored, embedded, indexed or sent to an LLM. A
        stored pattern this release cannot run (one an earlier release accepted, whose engine backtracked) makes
        the setting unreadable: no text is written until an admin replaces it, since masking without it could
        store what it was meant to hide."""
        current = self.redaction()
        try:
            return Redactor.of(current)
        except InvalidInputError as error:
            name = error.detail.get("name", "?")
            raise UnreadableRecordError(
                f"The organization's redaction setting cannot be used: {error.message} Nothing was written; an "
                f"admin replaces or removes that pattern (`grandbo settings redaction --remove {name} --org ORG`, "
                "or PATCH /v1/settings/redaction with remove).",
                detail={"id": "redaction", "fields": [f"extra.{name}"], "pattern": name},
            ) from None

    def set_redaction(
        self,
        *,
        add: Mapping[str, str] | None = None,
        remove: Sequence[str] = (),
        disable: Sequence[str] = (),
        enable: Sequence[str] = (),
        actor: str = "api",
    ) -> dict[str, Any]:
        """Add or remove the organization's own patterns; switch default patterns off or on again by name.
        Applies to text written from now on (what is stored stays as it was masked)."""
        unknown = sorted((set(disable) | set(enable)) - set(DEFAULT_NAMES))
        if unknown:
            raise InvalidInputError(
                f"No default pattern named {', '.join(unknown)}; the defaults are {', '.join(DEFAULT_NAMES)}.",
                detail={"unknown": unknown},
            )
        try:
            current = self.redaction()
        except UnreadableRecordError as error:  # every write is refused until it is mended: a change replaces it
            log.warning("settings.redaction_replaced", fields=error.detail["fields"])
            current = {"extra": {}, "disabled": []}
        absent = sorted(set(remove) - set(current["extra"]) - set(add or {}))
        if absent:
            mine = ", ".join(sorted(current["extra"])) or "none"
            hint = " (a default pattern is switched off with disable)" if set(absent) & set(DEFAULT_NAMES) else ""
            raise InvalidInputError(
                f"This organization has no pattern of its own named {', '.join(absent)}; its own are: {mine}{hint}.",
                detail={"unknown": absent},
            )
        extra = {k: v for k, v in current["extra"].items() if k not in set(remove)} | dict(add or {})
        disabled = sorted((set(current["disabled"]) | set(disable)) - set(enable))
        data = {"extra": checked_extra(extra), "disabled": disabled}
        self.documents.put([DocumentWrite(SETTINGS, "redaction", data, "settings.redaction")], actor)
        return data

    def calibration(self) -> Calibration | None:
        """The organization's own calibration of the verdict (recall prefers it to the shipped one when it is
        for the provider and model in use)."""
        return operations.calibration(self.documents)

    def set_calibration(self, calibration: Calibration | None, actor: str = "api") -> None:
        """Store the organization's calibration (`grandbo calibrate`); None removes it."""
        data = calibration.model_copy(update={"source": "organization"}).model_dump() if calibration else None
        if data is not None or self.documents.get(SETTINGS, "calibration") is not None:
            self.documents.put([DocumentWrite(SETTINGS, "calibration", data, "settings.calibration")], actor)

    def calibration_in_force(self) -> CalibrationInForce:
        """Which calibration the verdict uses for the store's provider and model, as recall chooses it
        (`retrieval.verdict.choose`): the organization's own, else the shipped one, else none. An own
        calibration that cannot be read refuses, with its remedy (recall stands in with the shipped one)."""
        space = self.entries.space()
        provider, model = (space.provider, space.model) if space is not None else ("none", "none")
        own = self.calibration()
        chosen = verdict.choose(own, provider, model)
        return CalibrationInForce(
            applies="uncalibrated" if chosen is None else chosen.source,
            space=f"{provider}:{model}",
            calibration=chosen,
            unused=own if own is not None and chosen is not own else None,
        )

    def remove_calibration(self, actor: str = "api") -> CalibrationInForce:
        """Remove the organization's own calibration (an unreadable one too; its history is kept): the verdict
        goes back to the calibration shipped for the model, or to none. NotFoundError when there is none."""
        if self.documents.get(SETTINGS, "calibration") is None:
            org, now = self.entries.org, self.calibration_in_force()
            using = (
                f"the calibration shipped for {now.space}"
                if now.applies == "shipped"
                else f"none: {now.space} is uncalibrated"
            )
            raise NotFoundError(
                f"Organization {org!r} has no calibration of its own to remove; its verdict uses {using}. To "
                f"change that, {FIT_ONE.format(org=org)}.",
                detail={"org": org, "applies": now.applies, "space": now.space},
            )
        self.set_calibration(None, actor)
        return self.calibration_in_force()

    def set_rerank(self, weights: RerankWeights | dict[str, Any], actor: str = "api") -> RerankWeights:
        try:
            checked = RerankWeights.model_validate(weights)
        except ValidationError as error:
            problems = validation_problems(error)
            raise InvalidInputError(f"Invalid re-ranking weights: {problems}.", detail={}) from error
        self.documents.put([DocumentWrite(SETTINGS, "rerank", checked.model_dump(), "settings.rerank")], actor)
        return checked
