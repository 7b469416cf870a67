"""Write throughput of the embedded store, whose events are numbered per organization (migration 32; an append
reads its org's last number from the `(org_id, seq)` key, where it read the store's AUTOINCREMENT counter): in this
tree and in the tree of `--before` (a src directory, e.g. main's exported with `git archive`), alternated round by
round, each round a fresh process on a fresh store.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/seq_writes.py --before /tmp/main-tree/src [--events 20000] [--rounds 6]

Four orgs share the store, seeded with `--events` events between them; then single writes (`remember`, one a commit)
alternate between the orgs, and batches of 500 (`remember_many`, as an import writes). Reported: the median
milliseconds of a single write and of one entry of a batch, by the clock and in the process's CPU time (the clock's
times move with the machine's load and its disk's syncs). One JSON line per tree and round.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from ab import command_line

ORGS = ("alpha", "beta", "gamma", "delta")
SINGLE, BATCH, BATCHES = 400, 500, 8


def measure(events: int) -> dict[str, float]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    with tempfile.TemporaryDirectory() as home, Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as g:
        memories = [g.org(org, create=True) for org in ORGS]
        for n in range(0, events, BATCH):  # the orgs' events interleaved in the store's order
            memories[n // BATCH % len(ORGS)].remember_many(
                [{"title": f"seed {n + i}: replica lag on the ledger", "body": "b"} for i in range(BATCH)]
            )
        single: list[tuple[float, float]] = []
        for n in range(SINGLE):
            started = time.perf_counter(), time.process_time()
            memories[n % len(ORGS)].remember({"title": f"write {n}: disk latency on the ledger", "body": "b"})
            single.append((time.perf_counter() - started[0], time.process_time() - started[1]))
        batched: list[tuple[float, float]] = []
        for n in range(BATCHES):
            batch = [{"title": f"batch {n} entry {i}: disk latency", "body": "b"} for i in range(BATCH)]
            started = time.perf_counter(), time.process_time()
            memories[n % len(ORGS)].remember_many(batch)
            batched.append(((time.perf_counter() - started[0]) / BATCH, (time.process_time() - started[1]) / BATCH))
    return {"single_write_ms": _median_ms(single, 0), "single_write_cpu_ms": _median_ms(single, 1),
            "batched_entry_ms": _median_ms(batched, 0), "batched_entry_cpu_ms": _median_ms(batched, 1)}  # fmt: skip


def _median_ms(times: list[tuple[float, float]], which: int) -> float:
    return round(statistics.median(pair[which] for pair in times) * 1000, 4)


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "events", 20_000)


if __name__ == "__main__":
    main()
