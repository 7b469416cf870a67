"""The CPU one recall takes in one process, hybrid and re-ranked: the process's CPU time (every thread of it, so the
arms' helper thread counts too) per recall, query embedding left out, medians over the timed topics. Each topic is
asked first as the benchmark's rounds ask it, then again. For A/B of two code trees, run it under each tree in turn
(`PYTHONPATH=...`) and compare the runs' medians pair by pair: CPU time moves less with the machine's load than the
wall clock, but still with it.

    python benchmarks/recall_cpu.py [--entries 10000] [--queries 300] [--in-turn]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from grandbo.config import Settings
from grandbo.eval.bench import seeded_org, synthetic_query
from grandbo.model import Arm
from grandbo.retrieval import arms
from grandbo.service import Grandbo


def cpu_per_recall(entries: int, queries: int, *, in_turn: bool = False, seed: int = 7) -> dict[str, float]:
    if in_turn:
        arms.handoff.beside = lambda size=0: False  # type: ignore[method-assign]
    rng = random.Random(seed)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="grandbo-bench-") as scratch:
        settings = Settings().at_home(Path(scratch))
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            memory = seeded_org(grandbo, rng, entries)
            topics = [synthetic_query(rng) for _ in range(queries + 30)]
            for topic in topics[queries:]:  # warm: the index built, its caches filled
                memory.recall(topic, 10, arm=Arm.HYBRID)
                memory.recall(topic, 10, arm=Arm.RERANKED)
            for arm in (Arm.HYBRID, Arm.RERANKED):
                for label in ("first", "again"):
                    wall, cpu = [], []
                    for topic in topics[:queries]:
                        start, start_cpu = time.perf_counter(), time.process_time()
                        result = memory.recall(topic, 10, arm=arm)
                        cpu.append((time.process_time() - start_cpu) * 1000 - result.timings.embed_ms)
                        wall.append((time.perf_counter() - start) * 1000 - result.timings.embed_ms)
                    figures[f"{arm.value}_{label}_p50_ms"] = round(statistics.median(wall), 3)
                    figures[f"{arm.value}_{label}_cpu_p50_ms"] = round(statistics.median(cpu), 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--in-turn", action="store_true", help="the arms in turn on the calling thread")
    args = parser.parse_args()
    figures = cpu_per_recall(args.entries, args.queries, in_turn=args.in_turn)
    print(json.dumps({"entries": args.entries, "queries": args.queries, **figures}), flush=True)
    print()
    print(f"{'arm':>9} {'topics':>7} {'p50':>8} {'cpu p50':>8}")
    for arm in ("hybrid", "reranked"):
        for label in ("first", "again"):
            print(f"{arm:>9} {label:>7} {figures[f'{arm}_{label}_p50_ms']:>6.2f}ms "
                  f"{figures[f'{arm}_{label}_cpu_p50_ms']:>6.2f}ms")  # fmt: skip


if __name__ == "__main__":
    main()
