"""Who is asking: the API key of every request names its organization and its scope.

`ReadMemory`, `WriteMemory` and `AdminMemory` hand a route the org-bound handle of the key's organization,
once the key is known, active, within its request rate (`grandbo.ratelimit`) and of the scope the route
needs. The organization is never read from the request itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from grandbo.errors import ForbiddenError, NotFoundError
from grandbo.memory import OrgMemory
from grandbo.ratelimit import large_request
from grandbo.service import Grandbo
from grandbo.tiers.keys import ApiKey, Scope, bearer_key


async def authorized(request: Request, needed: Scope) -> OrgMemory:
    """The handle of the key's organization, once the key passes. A key this process verified a moment ago (most
    requests, an admin route's aside) is checked on the event loop, without a store read, so a route's own work is
    its one trip to a worker thread; any other key goes through `Grandbo.authenticate` on a thread, as every
    refusal does, so a refusal's time still tells nothing about which organizations exist."""
    grandbo: Grandbo = request.app.state.grandbo
    # An admin's key is read from the store every time: trusted from the cache, a key revoked through another
    # process made itself a new admin key in the 2 s it was still trusted there (probe 16).
    memory, record = await verified(grandbo, request.headers.get("authorization"), fresh=needed is Scope.ADMIN)
    request.state.org = memory.org
    if not _admitted(request, memory.org):  # a body's request was counted before it was read (`api.clean`)
        grandbo.rate_limits.take(memory.org, record.id)  # 429 with Retry-After past a limit
    if not record.scope.allows(needed):
        raise ForbiddenError(
            f"This key has the {record.scope.value} scope; this route needs {needed.value}. Use a key made with "
            f"`grandbo keys create --scope {needed.value}`.",
            detail={"scope": record.scope.value, "needed": needed.value},
        )
    return memory


async def verified(grandbo: Grandbo, authorization: str | None, *, fresh: bool = False) -> tuple[OrgMemory, ApiKey]:
    """The org handle and record of the key of an `Authorization` header: from what this process verified a moment
    ago (on the event loop, no store read) unless `fresh`, else `Grandbo.authenticate` on a thread, which
    NotAuthorizedError refuses alike for every org."""
    key = bearer_key(authorization)
    try:
        held = None if fresh else grandbo.held(key)
    except NotFoundError:  # its organization dropped this instant: `authenticate` refuses the key
        held = None
    return held if held is not None else await run_in_threadpool(grandbo.authenticate, key, fresh=fresh)


@asynccontextmanager
async def running(request: Request, needed: Scope) -> AsyncIterator[OrgMemory]:
    """The key's org's handle, in one of the org's slots of the process while the block runs (`ratelimit.OrgSlots`;
    a large slot too for a body over its bound): every route that acts for a key, through the dependencies below or
    itself (`routes_tools`)."""
    memory = await authorized(request, needed)
    if _admitted(request, memory.org):  # in its slot since before its body was read (`api.clean`)
        yield memory
        return
    async with request.app.state.grandbo.rate_limits.slots.running(memory.org, large=large_request(request.scope)):
        yield memory


def _admitted(request: Request, org: str) -> bool:
    """Whether `api.clean.CleanInput` admitted the request for `org`: counted, and in one of its slots."""
    return bool(request.scope.get("state", {}).get("admitted") == org)


def _dependency(needed: Scope) -> Callable[[Request], AsyncIterator[OrgMemory]]:
    async def scoped(request: Request) -> AsyncIterator[OrgMemory]:
        async with running(request, needed) as memory:
            yield memory

    return scoped


_read, _write, _admin = _dependency(Scope.READ), _dependency(Scope.WRITE), _dependency(Scope.ADMIN)
NEEDS: dict[Callable[[Request], AsyncIterator[OrgMemory]], Scope] = {
    _read: Scope.READ,
    _write: Scope.WRITE,
    _admin: Scope.ADMIN,
}
"""The scope each dependency asks of the key (the OpenAPI document names it for every route)."""

ReadMemory = Annotated[OrgMemory, Depends(_read)]
WriteMemory = Annotated[OrgMemory, Depends(_write)]
AdminMemory = Annotated[OrgMemory, Depends(_admin)]
