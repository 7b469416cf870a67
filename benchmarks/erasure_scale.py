"""What an erasure of a text (`purge-text`) costs on the embedded store (or Postgres: GRANDBO_DATABASE_URL), and what
it makes another organization's writes wait: (a) a text N entries hold ("Jane Roe" in each body), (b) a text found
nowhere in an org of N entries and N / 4 documents of about 24 KB (what received alerts and incidents keep), with
the peak of Python's allocations during (b) (`tracemalloc`), and (c) a purge of an entry purged already. In this
tree and in the tree of `--before` (a src directory, e.g. main's exported with `git archive`), alternated round by
round, each round a fresh process on a fresh store.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/erasure_scale.py --before /tmp/main-tree/src [--entries 2000] [--rounds 2]

Another org writes one memory every 10 ms throughout; its p95 and longest wait are reported with each erasure's time.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

from ab import command_line, waits_during


def _p95(waits: list[float]) -> float:
    return round(sorted(waits)[int(0.95 * (len(waits) - 1))] * 1000, 1)


def measure(entries: int) -> dict[str, Any]:
    """One round in this process (the tree on its path)."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    from grandbo.config import Settings
    from grandbo.ports import DocumentWrite
    from grandbo.service import Grandbo

    blob = {"summary": "x", "recall": ["the cache evicted keys under memory pressure " * 500]}
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home))
        init = Grandbo.open if settings.database_url else Grandbo.init
        kwargs = {} if settings.database_url else {"embedding": "deterministic"}
        with init(settings, **kwargs) as g:
            tag = uuid.uuid4().hex[:6]
            eraser, big, other = (g.org(f"{name}-{tag}", create=True) for name in ("eraser", "big", "other"))
            for start in range(0, entries, 5_000):
                eraser.remember_many([{"id": f"E{n}", "title": f"replica lag {n}", "body": "contact Jane Roe"}
                                      for n in range(start, min(entries, start + 5_000))])  # fmt: skip
                big.remember_many([{"id": f"B{n}", "title": f"replica lag {n}", "body": "lag " * 30}
                                   for n in range(start, min(entries, start + 5_000))])  # fmt: skip
            for start in range(0, entries // 4, 200):
                writes = [DocumentWrite("alert", f"a{n}", {**blob, "n": n}, "alert.received")
                          for n in range(start, min(entries // 4, start + 200))]  # fmt: skip
                g._store.put_documents(big.org, writes, "bench")
            big.purge("B1", reason="bench", actor="bench")
            figures: dict[str, Any] = {}

            numbers = itertools.count()

            def write(_: int) -> None:
                other.remember({"id": f"O{next(numbers)}", "title": "other lag", "body": "b"})

            took, waits = waits_during(write, lambda: eraser.erasure.purge_text("Jane Roe", reason="b", actor="b"))
            figures.update(held_s=round(took, 2), held_p95_ms=_p95(waits), held_max_ms=round(max(waits) * 1000, 1))
            tracemalloc.start()
            took, waits = waits_during(write, lambda: big.erasure.purge_text("nowhere-xyz", reason="b", actor="b"))
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            figures.update(
                nowhere_s=round(took, 2), nowhere_p95_ms=_p95(waits), nowhere_peak_mib=round(peak / 2**20, 1)
            )
            figures["nowhere_max_ms"] = round(max(waits) * 1000, 1)
            again = []
            for _ in range(3):
                started = time.perf_counter()
                big.purge("B1", reason="bench", actor="bench")
                again.append(time.perf_counter() - started)
            figures["purged_again_ms"] = round(statistics.median(again) * 1000, 1)
            if settings.database_url:
                for memory in (eraser, big, other):
                    g.drop_org(memory.org)
    return figures


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "entries", 2_000)


if __name__ == "__main__":
    main()
