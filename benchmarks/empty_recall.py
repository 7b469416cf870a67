"""An empty recall over a large org: what a topic that matches nothing costs (issue 24: any read key can send
them). Its note said why with the org's corpus stats, a join of every active entry with its vector; it now takes
the index's counts and, only when an entry has no vector, the store's count of the org's embed jobs.

An embedded store (deterministic embeddings) at `--home` is seeded once with `--entries` entries (then reused),
and the org's index is made once; each round recalls a nonsense topic on the lexical arm (no hit, checked: the
deterministic vectors are near any topic's) and times it. Prints one JSON line: the median and the range (ms).
Run it with another tree's `src` on PYTHONPATH to measure that tree. `--queued N` writes N more entries whose
embed jobs stay queued (a worker behind, or down): the note then counts those entries, and the store the org's
settled unembeddable jobs (migration 28's index; before, a count of every queued job's row).

    python benchmarks/empty_recall.py [--entries 100000] [--queued 0] [--rounds 30] [--home DIR]
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
from grandbo.eval.bench import synthetic_entry
from grandbo.model import Arm
from grandbo.service import Grandbo

TOPIC = "quokka marmalade zeppelin tessellation wobbling sideways"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--queued", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--home", default=str(Path(tempfile.gettempdir()) / "grandbo-empty-recall"))
    args = parser.parse_args()
    home = Path(args.home)
    settings = Settings(home=home, database_url=None)
    if not (home / "seeded").exists():
        rng = random.Random(24)
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            memory = grandbo.org("bench", create=True)
            for first in range(0, args.entries, 1000):
                batch = [synthetic_entry(rng, n) for n in range(first, min(args.entries, first + 1000))]
                memory.remember_many(batch, actor="bench")
        with Grandbo.open(settings, background=True, embed_here=False) as grandbo:  # jobs left in the outbox
            memory = grandbo.org("bench")
            for first in range(args.entries, args.entries + args.queued, 1000):
                batch = [synthetic_entry(rng, n) for n in range(first, min(args.entries + args.queued, first + 1000))]
                memory.remember_many(batch, actor="bench")
        (home / "seeded").write_text(f"{args.entries} {args.queued}")
    with Grandbo.open(settings) as grandbo:
        memory = grandbo.org("bench")
        first = memory.recall(TOPIC, arm=Arm.LEXICAL)  # makes the org's index
        assert first.hits == [], [hit.entry.title for hit in first.hits]
        times = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            result = memory.recall(TOPIC, arm=Arm.LEXICAL)
            times.append((time.perf_counter() - started) * 1000)
        assert result.hits == []
    print(json.dumps({"entries": args.entries, "queued": args.queued, "rounds": args.rounds, "note": result.notes[-1],
                      "median_ms": round(statistics.median(times), 1), "min_ms": round(min(times), 1),
                      "max_ms": round(max(times), 1)}))  # fmt: skip


if __name__ == "__main__":
    main()
