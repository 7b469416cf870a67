"""What a purge costs the org's next recall, and the memory it takes, on the embedded store: an org of N generated
memories (deterministic vectors), its index kept by the process; then, five times, a memory is written and purged
and the org's next recall timed. Then a process that has not kept the org asks its first recall (loaded from the
image, or built from the rows where there is none). In this tree and in the tree of `--before` (a src directory,
e.g. main's exported with `git archive`), alternated round by round, each round a fresh process on a fresh store.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/purge_recall.py --before /tmp/main-tree/src [--entries 20000] [--rounds 2]

One JSON line per tree and round: the median and worst recall after a purge, against the median warm recall of the
same org and its median recall after a write, measured before them; the process's peak resident memory (VmHWM)
before the purges and after; the next process's first recall and whether it loaded or built the index.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

from ab import command_line


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def measure(entries: int) -> dict[str, float | int]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.eval.bench import seeded_org, synthetic_query
    from grandbo.service import Grandbo

    rng = random.Random(3)
    topics = [synthetic_query(rng) for _ in range(40)]
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home))
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            memory = seeded_org(grandbo, rng, entries, "big")
            memory.recall(topics[0], 10)  # the index made and kept
            warm = []
            for topic in topics[:20]:
                started = time.perf_counter()
                memory.recall(topic, 10)
                warm.append(time.perf_counter() - started)
            after_write = []  # what any write costs the next recall (the term weights it cached are computed again)
            for n in range(5):
                memory.remember({"title": f"replica lag again {n}", "body": "redis lag"})
                started = time.perf_counter()
                memory.recall(topics[25 + n], 10)
                after_write.append(time.perf_counter() - started)
            peak_before, after_purge = _peak_mb(), []
            for n in range(5):
                secret = memory.remember({"title": f"token pasted by mistake {n}", "body": f"sk-live-{n} redis"})
                memory.purge(secret.id, reason="bench", actor="bench")
                started = time.perf_counter()
                memory.recall(topics[20 + n], 10)
                after_purge.append(time.perf_counter() - started)
            peak_after = _peak_mb()
        with Grandbo.open(settings) as grandbo:  # the first closed once its last image was saved
            started = time.perf_counter()
            grandbo.org("big").recall(topics[30], 10)
            next_process = time.perf_counter() - started
            counts = grandbo._keeper.counts
    return {"warm_p50_ms": round(statistics.median(warm) * 1000, 2),
            "after_write_p50_ms": round(statistics.median(after_write) * 1000, 2),
            "after_purge_p50_ms": round(statistics.median(after_purge) * 1000, 2),
            "after_purge_max_ms": round(max(after_purge) * 1000, 2),
            "peak_rss_before_mb": peak_before, "peak_rss_after_mb": peak_after,
            "next_process_first_ms": round(next_process * 1000, 1),
            "next_process_loaded": counts["loaded"], "next_process_built": counts["built"]}  # fmt: skip


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "entries", 20_000)


if __name__ == "__main__":
    main()
