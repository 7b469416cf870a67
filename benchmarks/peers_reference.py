"""The yardstick every child of benchmarks/peers.py times beside its own queries (numpy only).

The machine is shared and its load drifts over a run of many minutes, so p50s measured by different
processes at different times do not compare well on their own. Each child therefore times, query by
query, the same exact scan (the set's own vectors, one matrix-vector product, the top 25) in turn with
the system under test. A system's speed is then also read as the ratio of its p50 to the yardstick's p50 in
the same process, and those ratios are what the latency targets compare.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

TOP = 25


def yardstick(vectors: np.ndarray) -> Callable[[np.ndarray], float]:
    """A timer of the reference scan over `vectors` (used as they are: no copy when they are float32 and
    contiguous, so the child's peak memory does not grow); it returns the scan's time in ms."""
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    top = min(TOP, len(matrix))

    def timed(probe: np.ndarray) -> float:
        start = time.perf_counter()
        scores = matrix @ probe
        best = np.argpartition(-scores, top - 1)[:top]
        best[np.argsort(-scores[best])].tolist()
        return (time.perf_counter() - start) * 1000

    return timed
