"""How long another organization's writes wait while one organization's erasure runs on the embedded store: a purge
(3 entries) and a purge-text, in an org of N received-alert-sized documents (about 24 KB each), in this tree and in
the tree of `--before` (a src directory, e.g. main's exported with `git archive`), alternated round by round, each
round a fresh process on a fresh store.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/erasure_stall.py --before /tmp/main-tree/src [--documents 5000] [--rounds 2]

Another org writes one memory every 10 ms throughout; its longest wait and its median are reported with the
erasures' own times. One JSON line per tree and round.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from ab import command_line, waits_during


def measure(documents: int) -> dict[str, float]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.ports import DocumentWrite
    from grandbo.service import Grandbo

    blob = {"summary": "x", "recall": ["the cache evicted keys under memory pressure " * 500]}
    with tempfile.TemporaryDirectory() as home, Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as g:
        big, other = g.org("big", create=True), g.org("other", create=True)
        big.remember_many(
            [{"id": f"P{n}", "title": f"entry {n} on replica lag", "body": "lag " * 30} for n in range(50)]
        )
        for start in range(0, documents, 200):
            writes = [DocumentWrite("alert", f"a{n}", {**blob, "n": n}, "alert.received")
                      for n in range(start, min(documents, start + 200))]  # fmt: skip
            g._store.put_documents("big", writes, "bench")  # the store itself: no webhook parsing to wait for
        purges: list[float] = []
        timings: dict[str, float] = {}

        def erase() -> None:
            for n in range(3):
                started = time.perf_counter()
                big.purge(f"P{n}", reason="bench", actor="bench")
                purges.append(time.perf_counter() - started)
            started = time.perf_counter()
            big.erasure.purge_text("a text no document holds", reason="bench", actor="bench")
            timings["text_s"] = time.perf_counter() - started

        def write(n: int) -> None:
            other.remember({"id": f"O{n}", "title": f"other {n} lag", "body": "b"})

        _, during = waits_during(write, erase)
        text_s = timings["text_s"]
    return {"purge_s": round(statistics.median(purges), 3), "purge_text_s": round(text_s, 3),
            "other_write_max_ms": round(max(during) * 1000, 1),
            "other_write_p50_ms": round(statistics.median(during) * 1000, 2)}  # fmt: skip


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "documents", 5000)


if __name__ == "__main__":
    main()
