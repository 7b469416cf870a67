"""Who is asking: the API key of every request names its organization and its scope.

`ReadMemory`, `WriteMemory` and `AdminMemory` hand a route the org-bound handle of the key's organization,
once the key is known, active, within its request rate (`grandbo.ratelimit`) and of the scope the route
needs. The organization is never read from the request itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from grandbo.errors import ForbiddenError
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo
from grandbo.tiers.keys import Scope, bearer_key


def authorized(request: Request, needed: Scope) -> OrgMemory:
    grandbo: Grandbo = request.app.state.grandbo
    memory, key = grandbo.authenticate(bearer_key(request.headers.get("authorization")))
    request.state.org = memory.org
    grandbo.rate_limits.take(f"{memory.org}/{key.id}")  # 429 with Retry-After past GRANDBO_RATE_LIMIT_PER_KEY
    if not key.scope.allows(needed):
        raise ForbiddenError(
            f"This key has the {key.scope.value} scope; this route needs {needed.value}. Use a key made with "
            f"`grandbo keys create --scope {needed.value}`.",
            detail={"scope": key.scope.value, "needed": needed.value},
        )
    return memory


def _read(request: Request) -> OrgMemory:
    return authorized(request, Scope.READ)


def _write(request: Request) -> OrgMemory:
    return authorized(request, Scope.WRITE)


def _admin(request: Request) -> OrgMemory:
    return authorized(request, Scope.ADMIN)


NEEDS: dict[Callable[[Request], OrgMemory], Scope] = {_read: Scope.READ, _write: Scope.WRITE, _admin: Scope.ADMIN}
"""The scope each dependency asks of the key (the OpenAPI document names it for every route)."""

ReadMemory = Annotated[OrgMemory, Depends(_read)]
WriteMemory = Annotated[OrgMemory, Depends(_write)]
AdminMemory = Annotated[OrgMemory, Depends(_admin)]
