"""The first recall of an organization in a process that does not keep its index: before (the index built row
by row from the store's change feed, as every release before index images did) and after (loaded from its
image in the store), in the same run, on the same orgs.

    python benchmarks/cold_recall.py [--orgs 40] [--entries 2000] [--backend sqlite|postgres]

N orgs of E generated entries are written in bulk with precomputed deterministic vectors. Each org's first
recall is timed in a fresh Grandbo (a fresh process's keeper, its heap settled as `grandbo serve` settles its own
once started: what it holds frozen, young objects collected every GRANDBO_GC_YOUNG_OBJECTS), once with the images
deleted ("build") and once with them ("load"); the warm recall of one org is the baseline. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.eval.bench import synthetic_entry, synthetic_query
from grandbo.eval.metrics import percentile
from grandbo.heap import settle
from grandbo.model import entry_text
from grandbo.service import Grandbo


def _seed(settings: Settings, orgs: list[str], entries: int) -> None:
    rng = random.Random(7)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        generated = [synthetic_entry(rng, number) for number in range(entries)]
        vectors = grandbo.provider().embed([entry_text(e.title, e.body, e.tags, e.services) for e in generated])
        for org in orgs:
            grandbo.org(org, create=True).remember_many(generated, actor="bench", vectors=list(vectors))


def _first_recalls(settings: Settings, orgs: list[str], before: Callable[[Grandbo], None]) -> list[float]:
    rng = random.Random(11)
    with Grandbo.open(settings) as grandbo:
        before(grandbo)
        settle(settings.gc_young_objects)  # as `grandbo serve` does once started (`heap.settled`)
        times = []
        for org in orgs:
            memory = grandbo.org(org)
            topic = synthetic_query(rng)
            start = time.perf_counter()
            memory.recall(topic, 10)
            times.append((time.perf_counter() - start) * 1000)
    return times


def _figures(times: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(times, 50), 2), "p95_ms": round(percentile(times, 95), 2)}


def run(settings: Settings, orgs: int, entries: int) -> dict[str, Any]:
    names = [f"cold-{number:04d}" for number in range(orgs + 1)]
    _seed(settings, names, entries)
    warm_org, names = names[0], names[1:]

    def warm_up(grandbo: Grandbo) -> None:
        pass

    # "before": no image in the store (none saved yet), every index built row by row; the builds save images.
    build = _first_recalls(settings, names, lambda grandbo: setattr(grandbo._keeper, "save_min", 1 << 62))
    # Save the images (what the first process to recall an org does, on a thread of its own).
    _first_recalls(settings, names, warm_up)
    load = _first_recalls(settings, names, warm_up)
    rng = random.Random(5)
    with Grandbo.open(settings) as grandbo:
        settle(settings.gc_young_objects)
        memory = grandbo.org(warm_org)
        for _ in range(20):
            memory.recall(synthetic_query(rng), 10)
        warm = []
        for _ in range(100):
            topic = synthetic_query(rng)
            start = time.perf_counter()
            memory.recall(topic, 10)
            warm.append((time.perf_counter() - start) * 1000)
    return {
        "backend": "postgres" if settings.database_url else "sqlite",
        "orgs": orgs,
        "entries": entries,
        "before_build": _figures(build),
        "after_load": _figures(load),
        "warm": _figures(warm),
        "p95_after_over_before": round(percentile(load, 95) / percentile(build, 95), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orgs", type=int, default=40)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grandbo-cold-") as home:
        if args.backend == "postgres":
            from grandbo.devtools.postgres import benchmark_database

            with benchmark_database("cold_recall_bench") as url:
                print(json.dumps(run(Settings(home=Path(home), database_url=url), args.orgs, args.entries)))
        else:
            print(json.dumps(run(Settings(home=Path(home)), args.orgs, args.entries)))


if __name__ == "__main__":
    main()
