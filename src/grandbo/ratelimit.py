"""Request rate limits, and how many requests of one organization a process runs at once (`OrgSlots`).

A token bucket per API key (`GRANDBO_RATE_LIMIT_PER_KEY`) and one per organization for all of its keys together
(`GRANDBO_RATE_LIMIT_PER_ORG`: an admin minting keys does not multiply its rate), in this process. A key's bucket
holds up to `GRANDBO_RATE_LIMIT_BURST` requests (an organization's, 4 times that) and refills at its rate; a request
that finds one empty is refused with `RateLimitedError` (429) and the seconds until a token is back. The buckets live
in the process: behind N API processes a key may send up to N times the rate in all.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from grandbo.config import Settings
from grandbo.errors import LargeRequestsOrgBusyError, RateLimitedError, RequestsOrgBusyError

_KEPT = 10_000  # buckets of one kind kept before the full (idle) ones are dropped
ORG_KEYS = 4  # an organization's bucket, unset: this many keys' rate and burst


@dataclass
class _Buckets:
    """Token buckets of one kind, by name: `rate` tokens a second, up to `burst`; 0 turns them off. `who` names
    a bucket's owner in a refusal (a format of its name), `setting` the setting that sets `rate`."""

    rate: float
    burst: int
    who: str
    setting: str
    held: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (tokens, when counted)

    def left(self, name: str, now: float) -> float:
        """The tokens `name` holds now, or RateLimitedError when under one (the refusal is counted)."""
        tokens, then = self.held.get(name, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) * self.rate)
        if tokens < 1:
            self.held[name] = (tokens, now)
            raise RateLimitedError(
                f"{self.who.format(name)} sent more than {self.rate:g} requests per second (bursts of {self.burst}) "
                "to this process; this request was not run.",
                retry_after=(1 - tokens) / self.rate,
                detail={"rate_per_s": self.rate, "burst": self.burst, "setting": self.setting},
            )
        return tokens

    def drop_full(self, now: float) -> None:
        """Past _KEPT buckets, forget the full ones (an idle key's or org's)."""
        if len(self.held) <= _KEPT:
            return
        full = [name for name, (tokens, then) in self.held.items() if tokens + (now - then) * self.rate >= self.burst]
        for name in full:
            del self.held[name]


class RateLimits:
    """Token buckets by key, and by organization for all of its keys together."""

    def __init__(self, rate: float, burst: int, org_rate: float = 0.0, slots: OrgSlots | None = None) -> None:
        self.slots = slots or OrgSlots(0, 0)  # requests of one org run at once (`OrgSlots`)
        self._keys = _Buckets(rate, burst, "This API key", "GRANDBO_RATE_LIMIT_PER_KEY")
        self._orgs = _Buckets(
            org_rate, ORG_KEYS * burst, "Organization {}'s keys together", "GRANDBO_RATE_LIMIT_PER_ORG"
        )
        self._lock = threading.Lock()

    @classmethod
    def of(cls, settings: Settings) -> RateLimits:
        """The limits `settings` set; an organization's rate unset is ORG_KEYS times a key's."""
        per_org = settings.rate_limit_per_org
        return cls(settings.rate_limit_per_key, settings.rate_limit_burst,
                   ORG_KEYS * settings.rate_limit_per_key if per_org is None else per_org,
                   OrgSlots(settings.requests_per_org, settings.requests_wait_seconds,
                            settings.large_requests_per_org))  # fmt: skip

    def take(self, org: str, key_id: str) -> None:
        """Count one request of the key `key_id` of `org` in its own bucket and in its organization's, or raise
        RateLimitedError when either is empty; a refused request takes from neither."""
        now = time.monotonic()
        with self._lock:
            counted = [(buckets, name, buckets.left(name, now)) for buckets, name in
                       ((self._keys, f"{org}/{key_id}"), (self._orgs, org)) if buckets.rate > 0]  # fmt: skip
            for buckets, name, tokens in counted:
                buckets.held[name] = (tokens - 1, now)
                buckets.drop_full(now)


LARGE_REQUEST_BYTES = 16 * 1024  # a request body over this is a large one (`OrgSlots`): a batch of alerts or entries


def large_request(scope: Mapping[str, Any]) -> bool:
    """Whether the request's body is over LARGE_REQUEST_BYTES: as read (`api.bodies.BodyLimit`), or before it is
    read (its slot is taken first) as its Content-Length says; one sent without a length (chunked) is taken for a
    large one."""
    if (read := scope.get("state", {}).get("body_bytes")) is not None:
        return int(read) > LARGE_REQUEST_BYTES
    headers = dict(scope.get("headers") or ())
    declared = headers.get(b"content-length")
    if declared is None:
        return b"transfer-encoding" in headers
    return not declared.isdigit() or int(declared) > LARGE_REQUEST_BYTES


class OrgSlots:
    """How many requests of one organization this process runs at once (`GRANDBO_REQUESTS_PER_ORG`), and of them how
    many large ones (`GRANDBO_LARGE_REQUESTS_PER_ORG`: a body over LARGE_REQUEST_BYTES). Rate limits count requests,
    not what they cost: one write key's 40 slow calls took every worker thread of a server, and eight senders of
    500-alert deliveries its CPU, while other orgs' requests waited seconds (probe 17). A request past its org's
    slots waits on the event loop (holding no thread) for one to end, in the order they came, for at most `wait_s`
    in all, and is then refused (`RequestsOrgBusyError`, 429). A large request waits for a large slot first, holding
    none of the others, so an org's small requests are not queued behind its batches. Used from one event loop (the
    server's).

    Why large requests have slots of their own: a large write is Python work under the process's one GIL, and its
    writes hold the embedded store's lock. Four of one org's 500-alert deliveries at once each took a fifth of the
    GIL, each write of theirs lasted several times as long, and another org's one-alert webhook waited 450-600 ms;
    one at a time, the same org stored twice as many deliveries a second and the other webhook took 65 ms
    (`benchmarks/alert_storm.py --storm-status resolved`)."""

    def __init__(self, per_org: int, wait_s: float, large_per_org: int = 0) -> None:
        self.wait_s = wait_s
        self.every = _Lane(per_org, "requests", RequestsOrgBusyError)
        self.large = _Lane(large_per_org, f"requests with a body over {LARGE_REQUEST_BYTES // 1024} KiB",
                           LargeRequestsOrgBusyError)  # fmt: skip

    @asynccontextmanager
    async def running(self, org: str, *, large: bool = False) -> AsyncIterator[None]:
        """Hold one of the org's slots (and, for a `large` request, one of its large slots) while the block runs."""
        came = asyncio.get_running_loop().time()
        async with AsyncExitStack() as held:
            if large:
                await held.enter_async_context(self.large.held(org, came, self.wait_s))
            await held.enter_async_context(self.every.held(org, came, self.wait_s))
            yield


class _Lane:
    """Slots of one kind, `per_org` for each organization (0: no bound), and the requests waiting for one."""

    def __init__(self, per_org: int, what: str, refusal: type[RequestsOrgBusyError]) -> None:
        self.per_org, self.what, self.refusal = per_org, what, refusal
        self._running: dict[str, int] = {}
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    @asynccontextmanager
    async def held(self, org: str, came: float, wait_s: float) -> AsyncIterator[None]:
        """Hold one of the org's slots of this lane, waiting for it until `wait_s` after `came` (the event loop's
        time the request came at)."""
        if self.per_org <= 0:
            yield
            return
        if self._running.get(org, 0) < self.per_org:
            self._running[org] = self._running.get(org, 0) + 1
        else:
            await self._turn(org, came, wait_s)
        try:
            yield
        finally:
            self._release(org)

    async def _turn(self, org: str, came: float, wait_s: float) -> None:
        """Wait in line, until `wait_s` after `came`, for a slot of the org an ending request hands over
        (`_release`)."""
        loop = asyncio.get_running_loop()
        turn = loop.create_future()
        self._waiting.setdefault(org, deque()).append(turn)
        try:
            async with asyncio.timeout_at(came + wait_s):
                await turn
        except BaseException as error:
            if turn.done() and not turn.cancelled():  # handed over just as the time ran out, or the client left
                if isinstance(error, TimeoutError):
                    return  # its turn came: it runs
                self._release(org)
                raise
            turn.cancel()  # cancelled already when its task was; a release may have passed over it since
            line = self._waiting.get(org)
            if line is not None and turn in line:
                line.remove(turn)
                if not line:
                    del self._waiting[org]
            if not isinstance(error, TimeoutError):
                raise  # the client left while it waited
            raise self.refusal(
                f"Organization {org} already has {self.per_org} {self.what} running in this API process, and this "
                f"one waited {loop.time() - came:.3g} s for a turn; it was not run.",
                retry_after=1,
                detail={"org_id": org, "running": self.per_org},
            ) from None

    def _release(self, org: str) -> None:
        waiting = self._waiting.get(org)
        while waiting:
            turn = waiting.popleft()
            if not waiting:
                del self._waiting[org]
            if not turn.done():  # one whose task was cancelled (timed out, its client gone) is passed over
                turn.set_result(None)  # the slot passes to the next in line, still counted
                return
        self._running[org] -= 1
        if not self._running[org]:
            del self._running[org]
