"""What every child of benchmarks/peers.py measures the same way: a yardstick for its latencies, and its
peak memory (numpy only).

The machine is shared and its load drifts over a run of many minutes, so p50s measured by different
processes at different times do not compare well on their own. Each child therefore also times one
exact scan (the set's own vectors, one matrix-vector product, the top 25), the same in every child, in
two blocks: just before and just after each arm's timed queries. A system's speed is then also read as
the ratio of its p50 to the yardstick's p50 in the same process at nearly the same moment, and those
ratios are what the latency targets compare.

In blocks, not one scan after each query: a scan right after a query pays for the cache lines that the
query's own working set evicted, so a system with a large working set slowed its own yardstick and
flattered its ratio (measured: p50 1.30 ms interleaved against 0.95 ms in a block, same matrix).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

TOP = 25
SCANS = 30  # per block; one untimed scan first warms the block


def yardstick(vectors: np.ndarray, probes: np.ndarray) -> Callable[[], list[float]]:
    """A block of timed reference scans over `vectors` (used as they are: no copy when they are float32
    and contiguous, so the child's peak memory does not grow), one per query vector of `probes` in turn;
    each call returns the block's times in ms."""
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    queries = np.ascontiguousarray(probes[:SCANS], dtype=np.float32)
    top = min(TOP, len(matrix))

    def scan(probe: np.ndarray) -> None:
        scores = matrix @ probe
        best = np.argpartition(-scores, top - 1)[:top]
        best[np.argsort(-scores[best])].tolist()

    def block() -> list[float]:
        scan(queries[0])
        times = []
        for probe in queries:
            start = time.perf_counter()
            scan(probe)
            times.append((time.perf_counter() - start) * 1000)
        return times

    return block


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM, Linux), in MB.

    Not `getrusage(RUSAGE_SELF).ru_maxrss`: Linux keeps that across `exec`, so a child started by a parent
    holding 500 MB reports 500 MB however little it uses itself (every small system of one run showed the
    runner's 524.6 MB). The high-water mark of /proc/self/status belongs to the process's own memory map,
    which `exec` starts afresh."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmHWM in /proc/self/status: peak memory is measured on Linux only")
