"""How long another organization's writes wait, on the embedded store, while a large organization (N generated
memories, its index image saved: 44 MB at 20,000) has one entry purged, and then is dropped: in this tree and in the
tree of `--before` (a src directory, e.g. main's exported with `git archive`), alternated round by round, each round
a fresh process on a fresh store.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/image_stall.py --before /tmp/main-tree/src [--entries 20000] [--rounds 2]

Another org writes one memory every 10 ms throughout; for the purge and for the drop, its longest wait and its median
are reported with the purge's and the drop's own times. One JSON line per tree and round.
"""

from __future__ import annotations

import random
import statistics
import tempfile
from pathlib import Path

from ab import command_line, waits_during


def measure(entries: int) -> dict[str, float]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.eval.bench import seeded_org
    from grandbo.service import Grandbo

    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home))
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            memory = seeded_org(grandbo, random.Random(3), entries, "big")
            secret = memory.remember({"title": "token pasted by mistake", "body": "sk-live-0042 redis"})
            memory.recall("redis replica lag after a failover on the checkout service")  # its index, saved at close
            grandbo.org("other", create=True).remember({"title": "warm", "body": "b"})
        with Grandbo.open(settings) as grandbo:
            big, other = grandbo.org("big"), grandbo.org("other")

            def write(n: int) -> None:
                other.remember({"title": f"other {n} lag", "body": "b"})

            purge_s, purge = waits_during(write, lambda: big.purge(secret.id, reason="bench", actor="bench"))
            drop_s, drop = waits_during(write, lambda: grandbo.drop_org("big"))
    return {"purge_s": round(purge_s, 3), "purge_other_max_ms": round(max(purge) * 1000, 1),
            "purge_other_p50_ms": round(statistics.median(purge) * 1000, 2),
            "drop_s": round(drop_s, 2), "drop_other_max_ms": round(max(drop) * 1000, 1),
            "drop_other_p50_ms": round(statistics.median(drop) * 1000, 2)}  # fmt: skip


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "entries", 20_000)


if __name__ == "__main__":
    main()
