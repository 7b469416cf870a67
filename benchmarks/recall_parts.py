"""Where a hybrid recall's time goes in one process: the lexical arm, the vector arm and the rest (the watermark
read, fusion, the hits' entries, explanations, the result's validation), medians over the timed queries.

The arms take turns on the calling thread here, so that the three parts add up to the whole (with the arms at
once the rest would hide behind the longer arm). Each topic is asked twice: first as the benchmark's rounds ask
it (its hits' entries read from the store unless an earlier topic returned them), then again (every entry in the
index's cache). `cpu_` figures are the calling thread's CPU time, which other processes on the cores disturb
less than the wall clock. With `--reopen` the store is closed and opened again before the timed queries, so that
the index is loaded from the image the first process saved, as any process that did not build it loads it.

    python benchmarks/recall_parts.py [--entries 10000] [--queries 300] [--reopen]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.eval.bench import seeded_org, synthetic_query
from grandbo.model import Arm
from grandbo.retrieval import arms
from grandbo.service import Grandbo


def parts(entries: int, queries: int, *, reopen: bool = False, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    arms.handoff.beside = lambda size=0: False  # type: ignore[method-assign]  # in turn: the parts add up
    with tempfile.TemporaryDirectory(prefix="grandbo-bench-") as scratch:
        settings = Settings().at_home(Path(scratch))
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            memory = seeded_org(grandbo, rng, entries)
            topics = [synthetic_query(rng) for _ in range(queries + 30)]
            if not reopen:
                return {"entries": entries, "queries": queries, "reopened": False, **_timed(memory, topics, queries)}
            memory.recall(topics[-1], 10, arm=Arm.HYBRID)  # builds the index; closing waits for its image
        with Grandbo.open(settings) as grandbo:
            memory = grandbo.org("bench")
            return {"entries": entries, "queries": queries, "reopened": True, **_timed(memory, topics, queries)}


def _timed(memory: Any, topics: list[str], queries: int) -> dict[str, float]:
    """The parts' medians over topics[:queries], after topics[queries:] warmed the index and its caches."""
    for topic in topics[queries:]:
        memory.recall(topic, 10, arm=Arm.HYBRID)
    figures: dict[str, float] = {}
    for label in ("first", "again"):
        wall, cpu, lexical, vector = [], [], [], []
        for topic in topics[:queries]:
            start, start_cpu = time.perf_counter(), time.thread_time()
            result = memory.recall(topic, 10, arm=Arm.HYBRID)
            timings = result.timings
            wall.append((time.perf_counter() - start) * 1000 - timings.embed_ms)
            cpu.append((time.thread_time() - start_cpu) * 1000 - timings.embed_ms)
            lexical.append(timings.lexical_ms)
            vector.append(timings.vector_ms)
        rest = [w - lex - vec for w, lex, vec in zip(wall, lexical, vector, strict=True)]
        for name, values in (("p50", wall), ("cpu_p50", cpu), ("lexical_p50", lexical),
                             ("vector_p50", vector), ("rest_p50", rest)):  # fmt: skip
            figures[f"{label}_{name}_ms"] = round(statistics.median(values), 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--reopen", action="store_true", help="time an index loaded from its image")
    args = parser.parse_args()
    figures = parts(args.entries, args.queries, reopen=args.reopen)
    print(json.dumps(figures), flush=True)
    print()
    print(f"{'topics':>7} {'hybrid p50':>11} {'cpu p50':>8} {'lexical':>8} {'vector':>8} {'rest':>8}")
    for label in ("first", "again"):
        print(
            f"{label:>7} {figures[f'{label}_p50_ms']:>9.2f}ms {figures[f'{label}_cpu_p50_ms']:>6.2f}ms "
            f"{figures[f'{label}_lexical_p50_ms']:>6.2f}ms {figures[f'{label}_vector_p50_ms']:>6.2f}ms "
            f"{figures[f'{label}_rest_p50_ms']:>6.2f}ms"
        )


if __name__ == "__main__":
    main()
