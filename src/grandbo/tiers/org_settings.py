"""An organization's own settings: the re-ranking weights, whether learned notes apply without review,
redaction, the seen-before verdict's calibration and the language of its text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import structlog
from pydantic import BaseModel, Field, StrictBool, ValidationError

from grandbo.errors import InvalidInputError, NotFoundError, UnreadableRecordError, validation_problems
from grandbo.model import Calibration, RerankWeights
from grandbo.ports import Document, DocumentWrite, OrgDocuments, OrgEntries
from grandbo.redaction import DEFAULT_NAMES, Redactor, checked_extra
from grandbo.retrieval import verdict
from grandbo.retrieval.languages import AUTO, declared
from grandbo.tiers import operations
from grandbo.tiers.operations import REWEIGH, SETTINGS
from grandbo.tiers.records import read_record
from grandbo.tiers.retry import rewritten

log = structlog.get_logger(__name__)


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

        def record() -> None:
            # The store holds the language; the record (history, exports) follows it, written when it is missing
            # or says otherwise (a crash or a failed write between the two left it behind). It is read before the
            # store's language and written expecting the version read: a declaration racing this one that wrote
            # its record meanwhile makes this one read both again (and write nothing when that record says what
            # the store holds), so the record ends up saying what the store holds, whichever came last.
            held = self.documents.get(SETTINGS, "language")
            stored = {"language": self.entries.language() or AUTO}
            if (held.data if held is not None else {"language": AUTO}) != stored:
                self.documents.put([DocumentWrite(SETTINGS, "language", stored, "settings.language",
                                                  expected_version=held.version if held else 0)], actor)  # fmt: skip

        rewritten(record, what="The organization's language record")
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
        return _redaction(self.documents.get(SETTINGS, "redaction"))

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
        Applies to text written from now on (what is stored stays as it was masked). Written expecting the
        version read, read again and applied again when another change landed first (`tiers.retry`): admins
        adding patterns at once each keep theirs."""
        unknown = sorted((set(disable) | set(enable)) - set(DEFAULT_NAMES))
        if unknown:
            raise InvalidInputError(
                f"No default pattern named {', '.join(unknown)}; the defaults are {', '.join(DEFAULT_NAMES)}.",
                detail={"unknown": unknown},
            )

        def attempt() -> dict[str, Any]:
            doc = self.documents.get(SETTINGS, "redaction")
            try:
                current = _redaction(doc)
            except UnreadableRecordError as error:  # every write is refused until it is mended: a change replaces it
                log.warning("settings.redaction_replaced", fields=error.detail["fields"])
                current = {"extra": {}, "disabled": []}
            absent = sorted(set(remove) - set(current["extra"]) - set(add or {}))
            if absent:
                mine = ", ".join(sorted(current["extra"])) or "none"
                hint = " (a default pattern is switched off with disable)" if set(absent) & set(DEFAULT_NAMES) else ""
                raise InvalidInputError(
                    f"This organization has no pattern of its own named {', '.join(absent)}; its own are: "
                    f"{mine}{hint}.",
                    detail={"unknown": absent},
                )
            extra = {k: v for k, v in current["extra"].items() if k not in set(remove)} | dict(add or {})
            disabled = sorted((set(current["disabled"]) | set(disable)) - set(enable))
            data = {"extra": checked_extra(extra), "disabled": disabled}
            # Essential: an org at its storage limit still changes what is masked (a secret leaking into its writes).
            write = DocumentWrite(SETTINGS, "redaction", data, "settings.redaction", essential=True,
                                  expected_version=doc.version if doc else 0)  # fmt: skip
            self.documents.put([write], actor)
            return data

        return rewritten(attempt, what="The organization's redaction setting")

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
        """Replace the re-ranking weights with `weights` whole (those not given take their defaults)."""
        checked = _weights(weights)
        self.documents.put([DocumentWrite(SETTINGS, "rerank", checked.model_dump(), "settings.rerank")], actor)
        return checked

    def change_rerank(self, changes: Mapping[str, float], actor: str = "api") -> RerankWeights:
        """Change the weights `changes` names, the others kept as stored (defaults when the stored ones cannot be
        read: mended by this change). Written expecting the version read, read again and applied again when
        another change landed first (`tiers.retry`), so two admins changing two weights at once both keep theirs."""
        _weights(changes)  # refused before anything is read

        def attempt() -> RerankWeights:
            doc = self.documents.get(SETTINGS, "rerank")
            try:
                held = read_record(RerankWeights, doc, "re-ranking weights", remedy=REWEIGH).model_dump() if doc else {}
            except UnreadableRecordError:
                held = {}
            checked = _weights({**held, **changes})
            write = DocumentWrite(SETTINGS, "rerank", checked.model_dump(), "settings.rerank",
                                  expected_version=doc.version if doc else 0)  # fmt: skip
            self.documents.put([write], actor)
            return checked

        return rewritten(attempt, what="The organization's re-ranking weights")


def _redaction(doc: Document | None) -> dict[str, Any]:
    """A stored redaction setting (none: no patterns of its own, every default on); UnreadableRecordError."""
    if doc is None:
        return {"extra": {}, "disabled": []}
    return read_record(RedactionSetting, doc, "redaction setting", remedy=RESTATE).model_dump()


def _weights(weights: RerankWeights | Mapping[str, Any]) -> RerankWeights:
    try:
        return RerankWeights.model_validate(weights)
    except ValidationError as error:
        problems = validation_problems(error)
        raise InvalidInputError(f"Invalid re-ranking weights: {problems}.", detail={}) from error
