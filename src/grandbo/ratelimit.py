"""Per-key request rate limits: a token bucket per API key, in this process (`GRANDBO_RATE_LIMIT_PER_KEY`).

Each key's bucket holds up to `GRANDBO_RATE_LIMIT_BURST` requests and refills at the rate; a request that
finds it empty is refused with `RateLimitedError` (429) and the seconds until a token is back. The buckets
live in the process: behind N API processes a key may send up to N times the rate in all.
"""

from __future__ import annotations

import threading
import time

from grandbo.errors import RateLimitedError

_KEPT = 10_000  # buckets kept before the full (idle) ones are dropped


class RateLimits:
    """Token buckets by key; `rate` 0 turns them off."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when counted)
        self._lock = threading.Lock()

    def take(self, key: str) -> None:
        """Count one request of `key`, or raise RateLimitedError when its bucket is empty."""
        if self.rate <= 0:
            return
        now = time.monotonic()
        with self._lock:
            tokens, then = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            if tokens < 1:
                self._buckets[key] = (tokens, now)
                wait = (1 - tokens) / self.rate
                raise RateLimitedError(
                    f"This API key sent more than {self.rate:g} requests per second (bursts of {self.burst}) to "
                    "this process; this request was not run.",
                    retry_after=wait, detail={"rate_per_s": self.rate, "burst": self.burst},
                )  # fmt: skip
            self._buckets[key] = (tokens - 1, now)
            if len(self._buckets) > _KEPT:
                self._drop_full(now)

    def _drop_full(self, now: float) -> None:
        full = [k for k, (tokens, then) in self._buckets.items() if tokens + (now - then) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]
