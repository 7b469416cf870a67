"""What SQLite's synchronous=FULL costs the embedded store's writes, against NORMAL, in one run.

    PYTHONPATH=src python benchmarks/sqlite_sync.py [--writes 300] [--rounds 5] [--home DIR]

Two stores side by side in one folder (put it on the disk production uses: `--home`), each written through the
real seam (`OrgMemory.remember`, one entry a commit, deterministic embeddings inline; and `remember_many`, a batch
of 50 a commit, as an import writes), in alternating rounds so that the machine's drift touches both alike. Prints
one JSON line: the median milliseconds of a single write and of one entry of a batch in each mode, and FULL's
ratios to NORMAL. FULL syncs the write-ahead log at every commit (an acknowledged write survives a
power loss); NORMAL only at checkpoints (the last commits may roll back on a power loss, never on a crash of the
process). The default is FULL (GRANDBO_SQLITE_SYNCHRONOUS; docs/reliability.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from grandbo.config import Settings
from grandbo.service import Grandbo

MODES = ("FULL", "NORMAL")
BATCH = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=300, help="writes per mode and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--home", type=Path, default=None, help="folder for the two stores (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.home) as scratch:
        stores = {
            mode: Grandbo.init(Settings(home=Path(scratch) / mode, sqlite_synchronous=mode), embedding="deterministic")
            for mode in MODES
        }
        try:
            orgs = {mode: grandbo.org("bench", create=True) for mode, grandbo in stores.items()}
            times: dict[str, list[float]] = {mode: [] for mode in MODES}
            batched: dict[str, list[float]] = {mode: [] for mode in MODES}
            for round_ in range(args.rounds):
                for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
                    for n in range(args.writes):
                        started = time.perf_counter()
                        orgs[mode].remember({"title": f"round {round_} write {n}: disk latency on the ledger"})
                        times[mode].append((time.perf_counter() - started) * 1000)
                    for n in range(max(1, args.writes // BATCH)):
                        batch = [{"title": f"round {round_} batch {n} entry {i}: disk latency"} for i in range(BATCH)]
                        started = time.perf_counter()
                        orgs[mode].remember_many(batch)
                        batched[mode].append((time.perf_counter() - started) * 1000 / BATCH)
        finally:
            for grandbo in stores.values():
                grandbo.close()
        single = {mode: round(statistics.median(values), 3) for mode, values in times.items()}
        batch = {mode: round(statistics.median(values), 3) for mode, values in batched.items()}
        print(json.dumps({
            "benchmark": "sqlite_sync",
            "writes_per_mode": len(times["FULL"]),
            "median_write_ms": single,
            "full_over_normal": round(single["FULL"] / single["NORMAL"], 2),
            "median_batched_entry_ms": batch,
            "batched_full_over_normal": round(batch["FULL"] / batch["NORMAL"], 2),
            "folder": str(Path(scratch)),
        }))  # fmt: skip


if __name__ == "__main__":
    main()
