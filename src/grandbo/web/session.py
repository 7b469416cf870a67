"""Who is looking: a console session is an org API key, signed in once, carried by a signed cookie.

The cookie (`gb_session`: HttpOnly, SameSite=Strict, Secure over https) holds the organization, the key's
id, an expiry and a random nonce, signed with HMAC-SHA256; never the key itself. Every request checks the
signature and the expiry, then reads the key's record again, so a revoked key ends its sessions at once and
the scope is always the key's own. The organization comes from the cookie alone, exactly as it comes from the
key in the API: the handle a page gets is that organization's, whatever the URL says.

Forms are CSRF-safe twice: the session cookie is SameSite=Strict (another site's form arrives without it),
and every form carries a token derived from the session's nonce, checked on each POST. The sign-in form,
which has no session yet, carries a double-submit token (a random cookie the form must repeat).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import Scope as HttpScope

from grandbo.errors import NotFoundError, OrgDroppedError, RateLimitedError, RequestsOrgBusyError, UnreadableRecordError
from grandbo.incarnation import AFTER_SIGN_IN
from grandbo.memory import OrgMemory
from grandbo.ratelimit import large_request
from grandbo.service import Grandbo
from grandbo.tiers.keys import ApiKey, Scope

SESSION, LOGIN_CSRF, FLASH = "gb_session", "gb_login", "gb_flash"
PREFIX = "/ui"


class SignInRequired(Exception):
    """No valid session: the page sends the browser to sign in (and back here after)."""

    def __init__(self, next_path: str, message: str | None = None) -> None:
        super().__init__(next_path)
        self.next_path = next_path
        self.message = message  # why the session ended, shown on the sign-in page (its org was deleted)


class NotAllowed(Exception):
    """A signed-in key asked for more than its scope, or a form's token is wrong, or it is over its rate limit
    (`retry_after` seconds)."""

    def __init__(self, message: str, status: int = 403, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """Signs and checks small JSON values with one secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def sign(self, value: Any) -> str:
        body = _b64(json.dumps(value, separators=(",", ":")).encode())
        return f"{body}.{self._mac(body)}"

    def unsign(self, token: str) -> Any | None:
        body, _, mac = token.partition(".")
        if not body or not hmac.compare_digest(mac.encode(), self._mac(body).encode()):  # bytes: any text
            return None
        try:
            return json.loads(_unb64(body))
        except ValueError:
            return None

    def derive(self, purpose: str, value: str) -> str:
        return _b64(self._digest(purpose, value))

    def sealed(self, number: int, nonce: str) -> int:
        """`number` hidden from whoever reads the cookie, and `sealed(sealed(number, nonce), nonce) == number`: XOR
        with 64 bits of a MAC of the session's nonce, a pad only this secret gives and no two sessions share."""
        return number ^ int.from_bytes(self._digest("sealed", nonce)[:8], "big")

    def _digest(self, purpose: str, value: str) -> bytes:
        return hmac.new(self._secret, f"{purpose}\x1f{value}".encode(), hashlib.sha256).digest()

    def _mac(self, body: str) -> str:
        return self.derive("cookie", body)


@dataclass(frozen=True)
class Viewer:
    """The signed-in key: its organization's handle, its record, and the token its forms carry."""

    memory: OrgMemory
    key: ApiKey
    csrf: str

    @property
    def can_write(self) -> bool:
        return self.key.scope.allows(Scope.WRITE)

    @property
    def can_admin(self) -> bool:
        return self.key.scope.allows(Scope.ADMIN)

    @property
    def actor(self) -> str:
        """Who the ledger and the logs say acted: the console and the key (its name when it has one)."""
        return f"console:{self.key.name or self.key.id}"[:200]

    def require(self, needed: Scope, token: str) -> None:
        """Refuse a form post that is not this session's or that the key's scope does not allow."""
        if not hmac.compare_digest(token.encode(), self.csrf.encode()):
            raise NotAllowed("This form expired or did not come from this console; reload the page and try again.")
        if not self.key.scope.allows(needed):
            raise NotAllowed(
                f"This key has the {self.key.scope.value} scope; this action needs {needed.value}. Sign in with a "
                f"key made by `grandbo keys create --scope {needed.value}`."
            )


class Sessions:
    """Issue, read and end console sessions of one open Grandbo."""

    def __init__(self, grandbo: Grandbo, secret: bytes | None, hours: float) -> None:
        self.grandbo = grandbo
        self.signer = Signer(secret or secrets.token_bytes(32))
        self.seconds = int(hours * 3600)

    def sign_in(self, key: str) -> tuple[str, ApiKey, OrgMemory]:
        """The cookie value for a valid key, its record and its org's handle (NotAuthorizedError otherwise:
        unknown, malformed, revoked)."""
        memory, record = self.grandbo.authenticate(key.strip())
        nonce = secrets.token_urlsafe(12)
        # The org's incarnation the key was read in (the session's, and no other's), sealed: the cookie is readable
        # by its holder, and the number is store-wide (it counted the organizations created before this one).
        incarnation = memory.incarnation
        value = {
            "org": memory.org,
            "sealed_inc": None if incarnation is None else self.signer.sealed(incarnation, nonce),
            "key": record.id,
            "exp": int(time.time()) + self.seconds,
            "nonce": nonce,
        }
        return self.signer.sign(value), record, memory

    def viewer(self, request: Request) -> Viewer | None:
        """The signed-in key of the request's session, or None (no session, or it ended: `request.state.ended`
        says why when its organization was deleted). Its handle is of the org's incarnation the key was signed
        in with, read again before the key's record (`grandbo.incarnation`): a session never reads or writes an
        org created again under its org's name."""
        value = self._signed(request)
        # A cookie of a release before incarnations, or one that showed its incarnation: signed in again.
        if value is None or not isinstance(value.get("sealed_inc"), int):
            return None
        try:
            incarnation = self.signer.sealed(value["sealed_inc"], str(value["nonce"]))
            memory = self.grandbo.org(str(value["org"]), incarnation=incarnation, why=AFTER_SIGN_IN)
            record = memory.keys.find(str(value["key"]))
        except OrgDroppedError as error:
            request.state.ended = error.message
            return None
        except (NotFoundError, UnreadableRecordError):  # the organization was dropped, or the key's record cannot
            return None  # be read (it proves nothing); a store that does not answer ends no session (a 503)
        if record is None or not record.active:
            return None
        request.state.org = memory.org  # for the request log
        return Viewer(memory, record, self.signer.derive("csrf", str(value["nonce"])))

    def signed_org(self, scope: HttpScope) -> str | None:
        """The organization of the request's session cookie if this process signed it and it has not expired, read
        without the store (the key's record is read by the page): its form's body is read as that org's
        (`api.bodies`)."""
        value = self._signed(Request(scope))
        return None if value is None else str(value.get("org"))

    def _signed(self, request: Request) -> dict[str, Any] | None:
        token = request.cookies.get(SESSION, "")
        value = self.signer.unsign(token) if token else None
        if not isinstance(value, dict) or not isinstance(value.get("exp"), int) or value["exp"] < time.time():
            return None
        return value

    def set_cookie(self, response: Response, request: Request, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=PREFIX,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def flash(self, response: Response, request: Request, message: str, kind: str = "ok") -> None:
        """A one-line message the next page shows once (signed, so no one else can plant one)."""
        self.set_cookie(response, request, FLASH, self.signer.sign({"m": message[:500], "k": kind}), 60)

    def take_flash(self, request: Request) -> tuple[str, str] | None:
        value = self.signer.unsign(request.cookies.get(FLASH, ""))
        if isinstance(value, dict) and isinstance(value.get("m"), str):
            return value["m"], "error" if value.get("k") == "error" else "ok"
        return None


def sessions_of(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.console_sessions
    return sessions


def _session(request: Request) -> Viewer:
    viewer = sessions_of(request).viewer(request)
    if viewer is None:
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(path if request.method == "GET" else f"{PREFIX}/", getattr(request.state, "ended", None))
    return viewer


def _counted(request: Request) -> Viewer:
    viewer = _session(request)
    # The key's own bucket, as its API and MCP requests take it: a console session was never counted, and one
    # read key searched through /ui/memory without limit.
    try:
        sessions_of(request).grandbo.rate_limits.take(viewer.memory.org, viewer.key.id)
    except RateLimitedError as error:
        raise NotAllowed(f"{error.message} {error.remedy}", error.status, error.retry_after) from error
    return viewer


async def _viewer(request: Request) -> AsyncIterator[Viewer]:
    """The signed-in viewer, counted, in one of its org's slots of the process while the page runs, as its API
    and MCP requests are (`ratelimit.OrgSlots`)."""
    viewer = await run_in_threadpool(_counted, request)
    try:
        slots = sessions_of(request).grandbo.rate_limits.slots
        async with slots.running(viewer.memory.org, large=large_request(request.scope)):
            try:  # its org read again now that the page may run: deleted (and made again) while the page waited?
                await run_in_threadpool(viewer.memory.pin)
            except OrgDroppedError as error:
                raise SignInRequired(f"{PREFIX}/", error.message) from error
            yield viewer
    except RequestsOrgBusyError as error:
        raise NotAllowed(f"{error.message} {error.remedy}", error.status, error.retry_after) from error


SignedIn = Annotated[Viewer, Depends(_viewer)]
Session = Annotated[Viewer, Depends(_session)]  # signed in, not counted: signing out works over the limit too
