"""Request rate limits: a token bucket per API key (`GRANDBO_RATE_LIMIT_PER_KEY`) and one per organization for
all of its keys together (`GRANDBO_RATE_LIMIT_PER_ORG`: an admin minting keys does not multiply its rate), in
this process.

A key's bucket holds up to `GRANDBO_RATE_LIMIT_BURST` requests (an organization's, 4 times that) and refills at
its rate; a request that finds one empty is refused with `RateLimitedError` (429) and the seconds until a token
is back. The buckets live in the process: behind N API processes a key may send up to N times the rate in all.
"""

from __future__ import annotations

import threading
import time

from grandbo.config import Settings
from grandbo.errors import RateLimitedError

_KEPT = 10_000  # buckets kept before the full (idle) ones are dropped
ORG_BURSTS = 4  # an organization's bucket holds this many keys' bursts
GRANDBO_PER_KEY, GRANDBO_PER_ORG = "GRANDBO_RATE_LIMIT_PER_KEY", "GRANDBO_RATE_LIMIT_PER_ORG"


class RateLimits:
    """Token buckets by key, and by organization for all of its keys together; a rate of 0 turns one off."""

    def __init__(self, rate: float, burst: int, org_rate: float = 0.0) -> None:
        self.rate, self.burst = rate, burst
        self.org_rate, self.org_burst = org_rate, ORG_BURSTS * burst
        self._buckets: dict[str, tuple[float, float]] = {}  # key or "org:" + org -> (tokens, when counted)
        self._lock = threading.Lock()

    @classmethod
    def of(cls, settings: Settings) -> RateLimits:
        """The limits `settings` set; an organization's rate unset is 4 times a key's."""
        per_org = settings.rate_limit_per_org
        return cls(settings.rate_limit_per_key, settings.rate_limit_burst,
                   4 * settings.rate_limit_per_key if per_org is None else per_org)  # fmt: skip

    def take(self, key: str, org: str | None = None) -> None:
        """Count one request of `key` (and of `org`, all of its keys), or raise RateLimitedError when a bucket is
        empty; a refused request takes from neither."""
        now = time.monotonic()
        with self._lock:
            counted = []
            if self.rate > 0:
                counted.append(self._left(key, self.rate, self.burst, now, "This API key", GRANDBO_PER_KEY))
            if org is not None and self.org_rate > 0:
                counted.append(self._left("org:" + org, self.org_rate, self.org_burst, now,
                                          f"Organization {org}'s keys together", GRANDBO_PER_ORG))  # fmt: skip
            for bucket, tokens in counted:
                self._buckets[bucket] = (tokens - 1, now)
            if len(self._buckets) > _KEPT:
                self._drop_full(now)

    def _left(self, bucket: str, rate: float, burst: int, now: float, who: str, setting: str) -> tuple[str, float]:
        tokens, then = self._buckets.get(bucket, (float(burst), now))
        tokens = min(float(burst), tokens + (now - then) * rate)
        if tokens < 1:
            self._buckets[bucket] = (tokens, now)
            raise RateLimitedError(
                f"{who} sent more than {rate:g} requests per second (bursts of {burst}) to this process; this "
                "request was not run.",
                retry_after=(1 - tokens) / rate, detail={"rate_per_s": rate, "burst": burst, "setting": setting},
            )  # fmt: skip
        return bucket, tokens

    def _drop_full(self, now: float) -> None:
        full = [
            bucket for bucket, (tokens, then) in self._buckets.items()
            if tokens + (now - then) * (self.org_rate if bucket.startswith("org:") else self.rate)
            >= (self.org_burst if bucket.startswith("org:") else self.burst)
        ]  # fmt: skip
        for bucket in full:
            del self._buckets[bucket]
