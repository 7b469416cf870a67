"""Organization API keys and webhook secrets: who may reach an organization's memory from outside.

A key reads `gbk.<org>.<key id>.<secret>`: the organization comes from the key itself (`.` never appears in an
org id), never from the request, and the key is checked against that organization's own records. Only a hash
of each key is stored (SHA-256 of 32 random bytes: nothing to brute-force), so a key is shown once, when it is
made. Scopes nest: read (recall, get, stats, context) < write (also remember, correct, retire, incidents,
findings, outcomes, signals, alerts) < admin (also catalog, settings, profile, keys, webhook secrets).

An organization holds at most `GRANDBO_KEYS_PER_ORG` active keys, and its keys are listed a page at a time
(`Keys.page`): 21,000 keys listed at once answered 6.5 MB in a second, and four such lists took another org's
recall p95 from 15 to 794 ms (hostile probe 22b). Webhook secrets are `tiers.webhook_secrets`'.
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

from grandbo.errors import InvalidInputError, KeyLimitError, NotAuthorizedError, NotFoundError, UnreadableRecordError
from grandbo.model import ORG_ID_PATTERN, utcnow
from grandbo.pages import Mark
from grandbo.ports import Document, DocumentWrite, OrgDocuments, Position
from grandbo.tiers.key_cache import Verified, VerifiedKeys, key_hash
from grandbo.tiers.records import next_page, read_listed, read_record, read_records
from grandbo.tiers.retry import rewritten
from grandbo.tiers.webhook_secrets import MAX_SECRETS as MAX_SECRETS  # named here too, as before their module
from grandbo.tiers.webhook_secrets import SIGNED as SIGNED
from grandbo.tiers.webhook_secrets import SOURCES as SOURCES
from grandbo.tiers.webhook_secrets import WEBHOOK_SECRETS as WEBHOOK_SECRETS
from grandbo.tiers.webhook_secrets import WebhookSecrets as WebhookSecrets
from grandbo.tiers.webhook_secrets import secrets_logged as secrets_logged
from grandbo.values import ECHOED_CHARS, echoed
from grandbo.words import Vocabulary

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)

KEYS = "api_key"
TALLY = "api_key_tally"  # one document per org (its id the same), rewritten by every key made: creates take turns
PREFIX = "gbk"
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
    # A key kept without its org's incarnation (`Keys.verify` reads none) is a miss for a caller that needs it: taken
    # for "no org", it refused a valid key for GRANDBO_KEY_CACHE_SECONDS (review 22 M2).
    seen = None if fresh else verified.verified(hashed)
    if seen is not None and (incarnation is None or seen.incarnation is not None):
        return seen
    ticket = verified.ticket()
    org = org_of(key) or ""
    # The org's incarnation, read before the key: a key found was read in that org, which the handle it
    # authenticates acts for, and no other (`grandbo.incarnation`).
    number = incarnation() if incarnation is not None else None
    # The org's generation, read before the key: a record kept is trusted only while it is the newest this
    # process has seen, so a dropped org's key never authenticates a successor of the same name. The two in one
    # transaction on Postgres (`OrgDocuments.reading`; each still sees what was committed before it): a request
    # for an org whose key this process has not verified within GRANDBO_KEY_CACHE_SECONDS (most, with many orgs
    # served at random) made three transactions before its route's own reads.
    with documents.reading():
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

    def __init__(
        self, memory: OrgMemory, documents: OrgDocuments, verified: VerifiedKeys | None = None, *, most: int = 500
    ) -> None:
        self.memory = memory
        self.documents = documents
        self.verified = verified or VerifiedKeys(0.0)
        self.most = most  # active keys the organization may hold (GRANDBO_KEYS_PER_ORG)

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

        def attempt() -> tuple[ApiKey, str]:
            # The count and the write are one step: the org's tally document, read before the count, is written
            # with the key expecting the version read, so of two creates that counted alike the second is stale and
            # counts again (`rewritten`). Counted then written apart, 8 at once on an org one short of a cap of 3
            # left 9, 3 and 5 active keys (review 22 M3). A revoke leaves the tally: a count it lowers meanwhile
            # only refuses what it would have let through a moment later.
            tally = self.documents.get(TALLY, TALLY)
            if (held := self.active_count(most := self.most)) >= most:
                raise KeyLimitError(
                    f"Organization {self.memory.org!r} holds {held:,} active API keys, the most it may "
                    f"(GRANDBO_KEYS_PER_ORG): no key was made.",
                    detail={"org_id": self.memory.org, "active_keys": held, "limit": most},
                )
            key_id = secrets.token_hex(6)
            key = f"{PREFIX}.{self.memory.org}.{key_id}.{secrets.token_urlsafe(32)}"
            record = ApiKey(id=key_id, name=name, scope=scope, created_at=utcnow(), key_hash=key_hash(key))
            counted = DocumentWrite(TALLY, TALLY, {"made": key_id}, "key.counted", essential=True,
                                    expected_version=tally.version if tally is not None else 0)  # fmt: skip
            self._save(record, "key.created", actor, counted=counted)
            return record, key

        return rewritten(attempt, what=f"Organization {self.memory.org!r}'s keys")

    def all(self) -> list[ApiKey]:
        """Every key of the organization (active and revoked); one whose record cannot be read is left out
        (logged): it authenticates nothing. What the command line lists; the API lists a page at a time (`page`)."""
        return read_records(ApiKey, self.documents.find(KEYS), "API key")

    def page(self, n: int, before: Position) -> tuple[list[tuple[ApiKey, Mark]], Position]:
        """Up to `n` keys (active and revoked) written before `before`, the most recently written first (a key
        made or revoked goes to the head), each with its place; and where the next page starts (None: the last).
        An unreadable record is left out (logged). A `pages.Read` of the keys."""
        docs = self.documents.newest(KEYS, n, before=before)
        return read_listed(ApiKey, docs, "API key"), next_page(docs, n)

    def active_count(self, most: int) -> int:
        """How many active keys the organization holds, counted no further than `most`: the store reads the
        unrevoked records only (at most `most` of them), not every key the org ever had."""
        return len(self.documents.newest(KEYS, most, match={("revoked_at",): None}, keys=("revoked_at",)))

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

    def _save(
        self,
        record: ApiKey,
        event: str,
        actor: str,
        *,
        expected: int | None = None,
        counted: DocumentWrite | None = None,
    ) -> None:
        data = record.model_dump(mode="json") | {"key_hash": record.key_hash}
        # Essential: an org at its storage limit still revokes a leaked key (and makes one to replace it).
        write = DocumentWrite(KEYS, record.id, data, event, ref=record.scope.value, essential=True,
                              expected_version=expected)  # fmt: skip
        self.documents.put([write] if counted is None else [write, counted], actor)


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
