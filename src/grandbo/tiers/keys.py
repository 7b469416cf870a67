"""Organization API keys and webhook secrets: who may reach an organization's memory from outside.

A key reads `gbk.<org>.<key id>.<secret>`: the organization comes from the key itself (`.` never appears in an
org id), never from the request, and the key is checked against that organization's own records. Only a hash
of each key is stored (SHA-256 of 32 random bytes: nothing to brute-force), so a key is shown once, when it is
made. Scopes nest: read (recall, get, stats, context) < write (also remember, correct, retire, incidents,
findings, outcomes, signals, alerts) < admin (also catalog, settings, profile, keys, webhook secrets).

Webhook secrets are kept per source (`pagerduty`, ...), several at once while a secret rotates; they sign
deliveries, so the current document keeps them as given (an HMAC needs the secret itself), and its history only
how many there were (`secrets_logged`): a secret rotated out is gone.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import structlog
from pydantic import BaseModel, Field

from grandbo.errors import InvalidInputError, NotAuthorizedError, NotFoundError, UnreadableRecordError
from grandbo.ingest.adapters import ADAPTERS
from grandbo.model import ORG_ID_PATTERN, utcnow
from grandbo.ports import Document, DocumentWrite, OrgDocuments
from grandbo.redaction import PURGED_TEXT
from grandbo.tiers.key_cache import Verified, VerifiedKeys, key_hash
from grandbo.tiers.records import read_record, read_records
from grandbo.tiers.retry import rewritten
from grandbo.values import ECHOED_CHARS, echoed
from grandbo.words import Vocabulary

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)

KEYS, WEBHOOK_SECRETS = "api_key", "webhook_secret"
PREFIX = "gbk"
SOURCES = tuple(ADAPTERS)  # the alert sources Grandbo reads
SIGNED = ("pagerduty", "github")  # the sources that sign their deliveries: the only ones a secret is checked for
# github signs its deployment events (`POST /v1/changes/github`, `grandbo.ingest.changes`): a change source
MAX_KEY_NAME = 200  # characters of a key's name
REVOKE = "it authenticates nothing: make a new key (`grandbo keys create`), and export the organization and report this"


class Scope(Vocabulary):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"

    def allows(self, needed: Scope) -> bool:
        order = [Scope.READ, Scope.WRITE, Scope.ADMIN]
        return order.index(self) >= order.index(needed)


class ApiKey(BaseModel):
    """A key as stored: everything but the secret."""

    id: str
    name: str = ""
    scope: Scope
    created_at: datetime
    revoked_at: datetime | None = None
    key_hash: str = Field(exclude=True, repr=False)

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def bearer_key(authorization: str | None) -> str:
    """The key of an `Authorization: Bearer <key>` header, or of `Basic` credentials whose password is the key (a
    sender that cannot add a header, GitHub's webhooks, sends the `user:KEY@` of its URL so); NotAuthorizedError
    with the remedy otherwise."""
    kind, _, key = (authorization or "").partition(" ")
    if kind.lower() == "basic":
        try:
            key = base64.b64decode(key.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            key = ""
    elif kind.lower() != "bearer":
        key = ""
    if not key.strip():
        raise NotAuthorizedError(
            "This needs `Authorization: Bearer <key>` (or Basic credentials whose password is the key: "
            "`https://grandbo:KEY@host/...` for a sender that cannot add a header); make a key with "
            "`grandbo keys create --org ORG --scope read|write|admin`.",
            detail={},
        )
    return key.strip()


def org_of(key: str) -> str | None:
    """The organization a key names, or None when it is not shaped like a Grandbo key."""
    parts = key.split(".")
    if len(parts) != 4 or parts[0] != PREFIX or not ORG_ID_PATTERN.fullmatch(parts[1]) or not all(parts[2:]):
        return None
    return parts[1]


def _read_key(doc: Document) -> ApiKey:
    return read_record(ApiKey, doc, "API key", remedy=REVOKE)


# What a key with no record is checked against: the record of a key nobody holds (a hash no key has), read
# and compared as a real one is, so a refusal takes the same steps whether the record exists or not.
_NOBODY = ApiKey(
    id="0" * 12,
    scope=Scope.READ,
    created_at=datetime(2026, 1, 1, tzinfo=UTC),
    key_hash=hashlib.sha256(secrets.token_bytes(32)).hexdigest(),
)
_NO_KEY = Document(
    KEYS, _NOBODY.id, None, _NOBODY.model_dump(mode="json") | {"key_hash": _NOBODY.key_hash}, 1, _NOBODY.created_at
)


def verify_key(
    documents: OrgDocuments,
    verified: VerifiedKeys,
    key: str,
    *,
    fresh: bool = False,
    incarnation: Callable[[], int | None] | None = None,
) -> Verified | None:
    """The active key record a well-formed `key` is, read from `documents` (the key's organization's, which
    may not exist), with the org's `incarnation` read before it (None when not asked); or None. Every refusal
    does the same work, so its time tells nothing about which organizations and keys exist: the key's hash, one
    read of its record, the record parsed and compared in constant time (a record nobody holds when there is
    none). Only a key verified a moment ago is answered without the reads (`VerifiedKeys`), unless `fresh`, and
    only a correct key is ever kept there."""
    hashed = key_hash(key)
    if not fresh and (seen := verified.verified(hashed)) is not None:
        return seen
    ticket = verified.ticket()
    org = org_of(key) or ""
    # The org's incarnation, read before the key: a key found was read in that org, which the handle it
    # authenticates acts for, and no other (`grandbo.incarnation`).
    number = incarnation() if incarnation is not None else None
    # The org's generation, read before the key: a record kept is trusted only while it is the newest this
    # process has seen, so a dropped org's key never authenticates a successor of the same name.
    generation = documents.stamp([])[0] if verified.seconds > 0 else None
    doc = documents.get(KEYS, key.split(".")[2])
    record = None
    try:
        record = _read_key(doc if doc is not None else _NO_KEY)
    except UnreadableRecordError as error:  # a record that cannot be read proves nothing: refused like a wrong key
        log.warning("keys.unreadable", org_id=org, key_id=key.split(".")[2], fields=error.detail["fields"])
    matches = hmac.compare_digest(record.key_hash if record is not None else _NOBODY.key_hash, hashed)
    if doc is None or record is None or not matches or not record.active:
        return None
    verified.put(hashed, record, ticket, org, generation, number)
    return Verified(record, number)


class Keys:
    """One organization's API keys."""

    def __init__(self, memory: OrgMemory, documents: OrgDocuments, verified: VerifiedKeys | None = None) -> None:
        self.memory = memory
        self.documents = documents
        self.verified = verified or VerifiedKeys(0.0)

    def create(self, scope: Scope | str, *, name: str | None = None, actor: str = "admin") -> tuple[ApiKey, str]:
        """Make a key; return its record and the key itself (shown once, never stored).

        `name` (what the key is for) may be left out; one given must say something: blank, longer than
        200 characters or holding a line break is refused, since `keys list` is how a key is told apart."""
        name = _key_name(name)
        try:
            scope = Scope(scope)
        except ValueError as error:
            raise InvalidInputError(
                f"Unknown scope {scope!r}: use read, write or admin.", detail={"scope": str(scope)}
            ) from error
        key_id = secrets.token_hex(6)
        key = f"{PREFIX}.{self.memory.org}.{key_id}.{secrets.token_urlsafe(32)}"
        record = ApiKey(id=key_id, name=name, scope=scope, created_at=utcnow(), key_hash=key_hash(key))
        self._save(record, "key.created", actor)
        return record, key

    def all(self) -> list[ApiKey]:
        """Every key of the organization (active and revoked); one whose record cannot be read is left out
        (logged): it authenticates nothing."""
        return read_records(ApiKey, self.documents.find(KEYS), "API key")

    def find(self, key_id: str) -> ApiKey | None:
        """The record of a key by its id (active or revoked), or None; what a signed-in session rechecks.
        UnreadableRecordError when its record cannot be read."""
        doc = self.documents.get(KEYS, key_id)
        return self._record(doc) if doc is not None else None

    def revoke(self, key_id: str, *, actor: str = "admin") -> ApiKey:
        def attempt() -> ApiKey:  # read again after a write landed meanwhile (an erasure of its name, a revoke)
            doc = self.documents.get(KEYS, key_id)
            if doc is None:
                raise NotFoundError(
                    f"No key {echoed(key_id)} in org {self.memory.org!r}. A key's id is the 12 hex characters after "
                    f"the org in the key; `grandbo keys list --org {self.memory.org}` lists them.",
                    detail={"key_id": key_id[:ECHOED_CHARS]},
                )
            record = self._record(doc)
            if record.active:
                record.revoked_at = utcnow()
                self._save(record, "key.revoked", actor, expected=doc.version)
            return record

        record = rewritten(attempt)
        self.verified.forget(key_id)
        return record

    def verify(self, key: str) -> ApiKey | None:
        """The active key record `key` is, or None (unknown, revoked, or another org's)."""
        if org_of(key) != self.memory.org:
            return None
        found = verify_key(self.documents, self.verified, key)
        return found.record if found is not None else None

    @staticmethod
    def _record(doc: Document) -> ApiKey:
        return _read_key(doc)

    def _save(self, record: ApiKey, event: str, actor: str, *, expected: int | None = None) -> None:
        data = record.model_dump(mode="json") | {"key_hash": record.key_hash}
        # Essential: an org at its storage limit still revokes a leaked key (and makes one to replace it).
        write = DocumentWrite(KEYS, record.id, data, event, ref=record.scope.value, essential=True,
                              expected_version=expected)  # fmt: skip
        self.documents.put([write], actor)


class HeldSecrets(BaseModel):
    """A source's webhook secrets as stored."""

    secrets: list[str]


MAX_SECRETS = 8  # a source's secrets at once: a rotation needs two; each delivery is signed once per secret held
READD = "add the sender's secret again (`grandbo webhooks add SOURCE --org ORG --secret-file FILE`)"


class WebhookSecrets:
    """One organization's webhook signing secrets, by source."""

    def __init__(self, documents: OrgDocuments) -> None:
        self.documents = documents

    def add(self, source: str, secret: str, *, actor: str = "admin") -> int:
        """Accept deliveries signed with `secret` too (older secrets stay until removed); return how many."""
        source = _signed(source, "so a secret for it would never be checked")
        if not secret.strip():  # an unset variable piped in (`printenv PD_SECRET | ...`), an empty file
            raise InvalidInputError(f"The {source} webhook secret given is empty: give the signing secret the "
                                    "sender was given (at least 8 characters).", detail={"source": source})  # fmt: skip
        if len(secret) < 8:
            raise InvalidInputError("A webhook secret needs at least 8 characters.", detail={"source": source})
        if PURGED_TEXT in secret:  # what an erasure leaves: such a secret is never read back
            raise InvalidInputError(f"A webhook secret cannot hold {PURGED_TEXT!r}: use the sender's own secret.",
                                    detail={"source": source})  # fmt: skip

        def attempt() -> int:
            held, version = self._held(source, mend=True)
            if secret not in held:
                if len(held) >= MAX_SECRETS:  # every delivery is checked against each: 289 made one take 0.73 s
                    raise InvalidInputError(
                        f"{source} already has {len(held)} webhook secrets, the most it keeps. End the rotation "
                        f"first (`grandbo webhooks rotate-done {source} --org ORG`, or POST "
                        f"/v1/webhooks/{source}/rotate-done), then add the new one.",
                        detail={"source": source, "secrets": len(held), "max": MAX_SECRETS},
                    )
                held.append(secret)
            self._save(source, held, version, "webhook.secret_added", actor)
            return len(held)

        return rewritten(attempt, what=f"The {source} webhook secrets")

    def remove_all_but_newest(self, source: str, *, actor: str = "admin") -> int:
        """End a rotation: keep only the newest secret; return how many were dropped (0: one secret, nothing to
        drop). A source that never signs, or one with no secret yet, has no rotation to end: refused, saying
        what to do instead. What it drops is what was older than the newest when it read them: a secret added
        while it ran is kept."""
        source = _signed(source, "so it has no secret to rotate")
        held, _ = self._held(source)
        if not held:
            raise InvalidInputError(
                f"{source} has no webhook secret in this organization, so there is no rotation to end. Give the "
                f"subscription a secret and add it: `grandbo webhooks add {source} --org ORG --secret-file FILE`.",
                detail={"source": source, "secrets": 0},
            )
        older = set(held[:-1])

        def attempt() -> int:
            now, version = self._held(source)
            kept = [secret for secret in now if secret not in older]
            if len(kept) < len(now):
                self._save(source, kept, version, "webhook.secret_rotated", actor)
            return len(now) - len(kept)

        return rewritten(attempt, what=f"The {source} webhook secrets") if older else 0

    def secrets(self, source: str) -> list[str]:
        """The secrets deliveries from `source` may be signed with, oldest first; UnreadableRecordError when
        their record cannot be read (then no delivery is accepted: the sender retries). A secret an erasure
        rewrote (`grandbo erase` of a text it held) is left out: it leaked, and what it reads now is known."""
        return self._held(_source(source))[0]

    def _held(self, source: str, *, mend: bool = False) -> tuple[list[str], int]:
        """`secrets` and the version of their record (0: none yet); with `mend`, an unreadable record holds none
        (it verifies nothing: what is written next replaces it, its history kept)."""
        doc = self.documents.get(WEBHOOK_SECRETS, source)
        if doc is None:
            return [], 0
        try:
            held = read_record(HeldSecrets, doc, "webhook secrets", remedy=READD).secrets
        except UnreadableRecordError:
            if not mend:
                raise
            held = []
        erased = [secret for secret in held if PURGED_TEXT in secret]
        if erased:  # an erasure found a leaked text in it and left "[purged]", which anyone can sign with
            log.warning("webhooks.secret_erased", source=source, count=len(erased))
        return [secret for secret in held if PURGED_TEXT not in secret], doc.version

    def _save(self, source: str, held: list[str], version: int, event: str, actor: str) -> None:
        write = DocumentWrite(WEBHOOK_SECRETS, source, {"secrets": held}, event, logged=secrets_logged(held),
                              expected_version=version, secret=True, essential=True)  # fmt: skip
        self.documents.put([write], actor)


def secrets_logged(held: list[str]) -> dict[str, int]:
    """What the document history keeps of a source's secrets: how many, never the secrets. The current document
    holds them (an HMAC needs the secret itself); a secret rotated out must not stay readable in the history, its
    exports and backups."""
    return {"held": len(held)}


def _signed(source: str, why: str) -> str:
    """`source`, when it signs its deliveries; else InvalidInputError saying how its deliveries are checked."""
    source = _source(source)
    if source not in SIGNED:
        raise InvalidInputError(
            f"{source} does not sign its webhook deliveries, {why}. Its deliveries are authenticated by the write "
            "key they carry (`Authorization: Bearer <key>`; in Alertmanager, the receiver's "
            "`http_config.authorization`): to rotate that, `grandbo keys create --scope write`, give the sender "
            f"the new key, then `grandbo keys revoke OLD_ID`. Only {' and '.join(SIGNED)} take a signing secret.",
            detail={"source": source, "signed": list(SIGNED)},
        )
    return source


def _key_name(name: str | None) -> str:
    if name is None:
        return ""
    stripped = name.strip()
    problem = (
        "is empty"
        if not stripped
        else f"has {len(stripped)} characters (at most {MAX_KEY_NAME})"
        if len(stripped) > MAX_KEY_NAME
        else "holds a line break or control character"
        if any(not ch.isprintable() for ch in stripped)
        else None
    )
    if problem is not None:
        raise InvalidInputError(
            f"The key's name {problem}: give a short name that says what the key is for (--name investigator), "
            "or leave the name out.",
            detail={"name": name},
        )
    return stripped


def _source(source: str) -> str:
    if source not in SOURCES and source not in SIGNED:
        raise InvalidInputError(
            f"Unknown alert source {source!r}: use one of {', '.join(SOURCES)} (or github, whose change events "
            "are signed).",
            detail={"source": source},
        )
    return source
