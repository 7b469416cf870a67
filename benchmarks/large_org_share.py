"""What one large organization's reads cost the small ones when the kept indexes do not all fit the memory bound
(`GRANDBO_INDEX_MEMORY_MB`, probe 16 F4), on the embedded store: in this tree and in the tree of `--before` (a src
directory, e.g. main's exported with `git archive`), alternated round by round, each round a fresh process.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/large_org_share.py --before /tmp/main-tree/src [--entries 20000] [--rounds 2]

A large org of N generated memories and 20 small orgs of 2,000 each, their images saved; the bound is set to what
every index takes less half of the large one's. A thread recalls the large org three times a second while the
small orgs are recalled in turn for 10 s: their recalls' p50 / p95, the large org's, and the indexes loaded again.
One JSON line per tree and round.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from ab import command_line

SMALL, SMALL_ENTRIES, SECONDS = 20, 2_000, 10.0
TOPICS = ["redis replica lag after a failover on the checkout service", "payments-gateway ERR_CONN_RESET on deploy",
          "disk full on the kafka brokers", "certificate expired on the tls terminator"]  # fmt: skip


def measure(entries: int) -> dict[str, float]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.eval.bench import seeded_org
    from grandbo.service import Grandbo

    smalls = [f"small-{n:02d}" for n in range(SMALL)]
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home))
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            seeded_org(grandbo, random.Random(3), entries, "large").recall(TOPICS[0])
            for n, org in enumerate(smalls):
                seeded_org(grandbo, random.Random(n), SMALL_ENTRIES, org).recall(TOPICS[0])
        with Grandbo.open(settings) as grandbo:
            keeper = grandbo._keeper
            for org in ["large", *smalls]:  # every index kept and warm, then a bound that holds all but half of one
                for topic in TOPICS:
                    grandbo.org(org).recall(topic)
            keeper.max_bytes = keeper.kept_bytes() - keeper._sizes["large"] // 2
            made = {"large": 0, "small": 0}
            keeper.building = lambda org: made.__setitem__("large" if org == "large" else "small", made[
                "large" if org == "large" else "small"] + 1)  # fmt: skip
            large_times: list[float] = []
            stop = threading.Event()

            def large_reader() -> None:
                n = 0
                while not stop.is_set():
                    started = time.perf_counter()
                    grandbo.org("large").recall(TOPICS[n % len(TOPICS)])
                    large_times.append(time.perf_counter() - started)
                    n += 1
                    stop.wait(max(0.0, 1 / 3 - (time.perf_counter() - started)))

            thread = threading.Thread(target=large_reader)
            thread.start()
            small_times: list[float] = []
            ends, n = time.monotonic() + SECONDS, 0
            while time.monotonic() < ends:
                started = time.perf_counter()
                grandbo.org(smalls[n % SMALL]).recall(TOPICS[n % len(TOPICS)])
                small_times.append(time.perf_counter() - started)
                n += 1
            stop.set()
            thread.join()

    def q(times: list[float], p: float) -> float:
        return round(statistics.quantiles(times, n=100)[int(p) - 1] * 1000, 1) if len(times) > 1 else 0.0

    return {"small_p50_ms": q(small_times, 50), "small_p95_ms": q(small_times, 95), "small_recalls": len(small_times),
            "small_loaded": made["small"], "large_p50_ms": q(large_times, 50), "large_p95_ms": q(large_times, 95),
            "large_recalls": len(large_times), "large_loaded": made["large"]}  # fmt: skip


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "entries", 20_000)


if __name__ == "__main__":
    main()
