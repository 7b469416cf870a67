"""How long an outcome for an unknown runbook takes to be refused in an org whose memories cite many long, alike
runbook ids (probe 17 F1), on the embedded store: in this tree and in the tree of `--before` (a src directory, e.g.
main's exported with `git archive`), alternated round by round, each round a fresh process on a fresh store.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/runbook_refusal.py --before /tmp/main-tree/src [--entries 20000] [--rounds 2]

The org's N memories each cite a runbook id of 120 letters from a to j; three outcomes for ids of the same shape are
refused, each timed (the median and the longest), and one for a plain unknown id. One JSON line per tree and round.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

from ab import command_line


def measure(entries: int) -> dict[str, float]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.errors import NotFoundError
    from grandbo.service import Grandbo

    rng = random.Random(17)

    def alike() -> str:
        return "".join(rng.choice("abcdefghij") for _ in range(120))

    with tempfile.TemporaryDirectory() as home, Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as g:
        memory = g.org("alpha", create=True)
        for offset in range(0, entries, 5_000):
            batch = range(offset, min(entries, offset + 5_000))
            memory.remember_many([{"title": f"finding {n}", "body": "pool exhausted", "kind": "finding",
                                   "meta": {"runbook_id": alike()}} for n in batch])  # fmt: skip

        def refused(runbook_id: str) -> float:
            started = time.perf_counter()
            try:
                memory.ledger.record(runbook_id, "succeeded")
            except NotFoundError:
                return time.perf_counter() - started
            raise AssertionError("recorded")

        times = [refused(alike()) for _ in range(3)]
        plain = refused("RB-NOT-THERE")
    return {"refusal_p50_s": round(statistics.median(times), 4), "refusal_max_s": round(max(times), 4),
            "plain_unknown_s": round(plain, 4)}  # fmt: skip


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "entries", 20_000)


if __name__ == "__main__":
    main()
