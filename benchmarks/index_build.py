"""An org's index built from its rows, the first recall of a process when the store holds no image of it (an
upgrade that changed the image format, a save that failed, a fresh seed): its time, the memory the process took
for it, and what the keeper counts against `GRANDBO_INDEX_MEMORY_MB`. In this tree and in the tree of `--before` (a
src directory, e.g. main's exported with `git archive`), alternated round by round, each round a fresh process.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/index_build.py --before /tmp/main-tree/src [--entries 20000] [--rounds 2]

One JSON line per tree and round: the first recall's time; the process's anonymous resident memory (RssAnon,
not the store's file pages mapped in) grown by the build, at its peak (VmHWM) and once built; the index's size as
the keeper counts it (`OrgIndex.nbytes`).
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from ab import command_line


def _memory_mb() -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {name: int(fields[name].split()[0]) / 1024 for name in ("RssAnon", "VmHWM")}


def measure(entries: int) -> dict[str, float]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.eval.bench import seeded_org, synthetic_query
    from grandbo.service import Grandbo

    rng = random.Random(3)
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home))
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            seeded_org(grandbo, rng, entries, "big")
        with Grandbo.open(settings) as grandbo:  # nothing recalled before: no image in the store
            grandbo._keeper.save_min = 1 << 40  # and none saved by this round
            memory = grandbo.org("big")
            before = _memory_mb()
            started = time.perf_counter()
            memory.recall(synthetic_query(rng), 10)
            took = time.perf_counter() - started
            after = _memory_mb()
            counted = grandbo._keeper.kept_bytes()
            assert grandbo._keeper.counts["built"] == 1
    return {"build_s": round(took, 3), "peak_grown_mb": round(after["VmHWM"] - before["VmHWM"], 1),
            "anon_grown_mb": round(after["RssAnon"] - before["RssAnon"], 1),
            "counted_mb": round(counted / (1 << 20), 1)}  # fmt: skip


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "entries", 20_000)


if __name__ == "__main__":
    main()
