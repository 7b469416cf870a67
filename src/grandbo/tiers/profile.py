"""Explicit memory: the organization profile humans type (facts, people, voice).

The profile is one document, versioned through the document log: every change is an event, and a
writer that read an older version is refused rather than silently overwriting someone else's edit.
Service owners and escalation notes come from the service catalog (`grandbo catalog`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from grandbo.errors import InvalidInputError, UnreadableRecordError, validation_problems
from grandbo.ports import Document, DocumentWrite, OrgDocuments
from grandbo.tiers.edited import change_of, check_size
from grandbo.tiers.records import read_record, shown_history
from grandbo.tiers.retry import rewritten

PROFILE, EXPLICIT = "profile", "explicit"


def _name(fact: str) -> str:
    """A fact's name as it is kept: trimmed and in Unicode's composed form (NFC), so "café" typed on a system
    that decomposes accents (NFD) is the same fact, not a second one that looks the same."""
    return unicodedata.normalize("NFC", str(fact).strip())


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(min_length=1, max_length=200)
    role: str = ""
    notes: str = ""


class Voice(BaseModel):
    """How the organization writes."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    tone: list[str] = Field(default_factory=list, description="Attributes, e.g. calm, direct, no blame.")
    preferred_words: list[str] = Field(default_factory=list)
    avoided_words: list[str] = Field(default_factory=list)
    sentence_style: str = ""

    @field_validator("tone", "preferred_words", "avoided_words")
    @classmethod
    def _clean(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(v.strip() for v in value if v.strip()))


class Profile(BaseModel):
    """What admins typed about the organization."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    facts: dict[str, str] = Field(
        default_factory=dict, description="Named facts: name, products, customers, conventions, ..."
    )
    people: list[Person] = Field(default_factory=list)
    voice: Voice = Field(default_factory=Voice)
    version: int = 0

    @field_validator("facts")
    @classmethod
    def _facts(cls, value: dict[str, str]) -> dict[str, str]:
        # In name order: Postgres' jsonb keeps an object's keys in an order of its own (shorter first), SQLite in
        # the order written, and the profile must read the same on both.
        return dict(sorted((_name(k), v.strip()) for k, v in value.items() if k.strip() and v.strip()))


class Profiles:
    """Read and change one organization's explicit profile."""

    def __init__(self, documents: OrgDocuments) -> None:
        self.documents = documents

    def get(self) -> Profile:
        return _read(self.documents.get(PROFILE, EXPLICIT))

    def readable(self) -> Profile:
        """The profile, or as much of it as can be read, part by part, when it cannot be read whole (what a
        page shows beside the error)."""
        doc = self.documents.get(PROFILE, EXPLICIT)
        try:
            return _read(doc)
        except UnreadableRecordError:
            return _salvaged(doc)

    def update(self, changes: dict[str, Any], *, expected_version: int | None = None, actor: str = "api") -> Profile:
        """Merge `changes` (facts, people, voice) into the profile; facts merge by key (empty text removes
        one), voice by field, people replace the list. `expected_version` guards against lost updates (a stale
        one is refused, StaleWriteError); without it the change is merged into whatever the profile is when it is
        written (another admin's change that landed meanwhile is read again and kept, `tiers.retry`; refused only
        if writes keep landing first, `tiers.retry.ATTEMPTS` times, with a message to send it again)."""
        _check(changes)
        if expected_version is not None:
            return self._merge(changes, expected_version, actor)
        return rewritten(partial(self._merge, changes, None, actor), what="The profile")

    def _merge(self, changes: dict[str, Any], expected_version: int | None, actor: str) -> Profile:
        """One read of the profile and one write of `changes` merged into it, expecting `expected_version`
        (None: the version read)."""
        before = self.documents.get(PROFILE, EXPLICIT)
        try:
            current, mending = _read(before), False
        except UnreadableRecordError:  # mended by this change: written over what can still be read
            current, mending = _salvaged(before), True
        profile = _merged(current, changes)
        version = current.version if expected_version is None else expected_version
        unchanged = profile == current.model_copy(update={"version": profile.version})
        if unchanged and version == current.version and not mending:
            return current  # nothing changes: no new version, no history entry
        data, held = profile.model_dump(exclude={"version"}), before.data if before is not None else None
        check_size("profile", held, data, "Keep facts short (a line each) and the rest in memories.")
        write = DocumentWrite(PROFILE, EXPLICIT, data, "profile.updated", expected_version=version,
                              logged=change_of(held, data))  # fmt: skip
        (doc,) = self.documents.put([write], actor)
        return profile.model_copy(update={"version": doc.version})

    def history(self) -> list[dict[str, Any]]:
        """Every change of the explicit profile, oldest first, numbered in its own history (`shown_history`)."""
        return shown_history(self.documents.history(PROFILE, EXPLICIT))


RETYPE = (
    "change it (`grandbo profile set --org ORG ...`, PATCH /v1/profile): the change is written over the parts "
    "that can still be read, the unreadable part starting empty (`--people FILE` gives the people again)"
)


def _check(changes: dict[str, Any]) -> None:
    """Refuse a change of the wrong shape, before anything is read or written."""
    unknown = set(changes) - {"facts", "people", "voice"}
    if unknown:
        raise InvalidInputError(
            f"Unknown profile part(s) {sorted(unknown)}: use facts, people, voice.",
            detail={"parts": sorted(unknown)},
        )
    shapes = {"facts": (dict, "an object of name: text"), "voice": (dict, "an object"), "people": (list, "a list")}
    wrong = {part: shapes[part][1] for part in changes if not isinstance(changes[part], shapes[part][0])}
    if wrong:
        raise InvalidInputError(
            "Invalid profile: " + "; ".join(f"{part} must be {shape}" for part, shape in wrong.items()) + ".",
            detail={"errors": wrong},
        )
    if "facts" in changes and any(not str(name).strip() for name in changes["facts"]):
        raise InvalidInputError(
            "A fact needs a name: give it as name: text (e.g. products: parcel delivery); a fact without one "
            "would be dropped.",
            detail={"errors": {"facts": "a fact without a name"}},
        )


def _read(doc: Document | None) -> Profile:
    """A stored profile (none yet: an empty one); UnreadableRecordError when it cannot be read whole."""
    return Profile() if doc is None else read_record(Profile, doc, "profile", remedy=RETYPE)


def _salvaged(doc: Document | None) -> Profile:
    """What of a stored profile that cannot be read whole can still be read, part by part; an unreadable part
    is empty. The version is the stored one, so that the change mending it is guarded as any other."""
    data = doc.data if doc is not None and isinstance(doc.data, Mapping) else {}
    kept: dict[str, Any] = {}
    for part in ("facts", "people", "voice"):
        try:
            kept[part] = getattr(Profile.model_validate({part: data[part]}), part)
        except (KeyError, ValidationError):
            continue
    return Profile(**kept, version=doc.version if doc is not None else 0)


def _merged(current: Profile, changes: dict[str, Any]) -> Profile:
    """The profile `changes` make of `current` (validated)."""
    data = current.model_dump(exclude={"version"})
    if "facts" in changes:
        merged = {**data["facts"], **{_name(k): (v or "") for k, v in dict(changes["facts"]).items()}}
        data["facts"] = {k: v for k, v in merged.items() if v}
    if "voice" in changes:
        data["voice"] = {**data["voice"], **dict(changes["voice"])}
    if "people" in changes:
        data["people"] = list(changes["people"])
    try:
        return Profile.model_validate(data)
    except ValidationError as error:
        problems = validation_problems(error)
        raise InvalidInputError(f"Invalid profile: {problems}.", detail={"errors": problems}) from error
