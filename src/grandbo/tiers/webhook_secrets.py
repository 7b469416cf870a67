"""An organization's webhook signing secrets, by source (`POST /v1/webhooks/{source}/secrets`).

Webhook secrets are kept per source (`pagerduty`, ...), several at once while a secret rotates; they sign
deliveries, so the current document keeps them as given (an HMAC needs the secret itself), and its history only
how many there were (`secrets_logged`): a secret rotated out is gone.
"""

from __future__ import annotations

import structlog
from pydantic import BaseModel

from grandbo.erased import PURGED_TEXT
from grandbo.errors import InvalidInputError, UnreadableRecordError
from grandbo.ingest.adapters import ADAPTERS
from grandbo.ports import DocumentWrite, OrgDocuments
from grandbo.tiers.records import read_record
from grandbo.tiers.retry import rewritten

log = structlog.get_logger(__name__)

WEBHOOK_SECRETS = "webhook_secret"
SOURCES = tuple(ADAPTERS)  # the alert sources Grandbo reads
SIGNED = ("pagerduty", "github")  # the sources that sign their deliveries: the only ones a secret is checked for
# github signs its deployment events (`POST /v1/changes/github`, `grandbo.ingest.changes`): a change source


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


def _source(source: str) -> str:
    if source not in SOURCES and source not in SIGNED:
        raise InvalidInputError(
            f"Unknown alert source {source!r}: use one of {', '.join(SOURCES)} (or github, whose change events "
            "are signed).",
            detail={"source": source},
        )
    return source
