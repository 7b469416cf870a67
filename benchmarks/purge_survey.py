"""What a purge of many entries whose text documents quote costs (`Store.purge_many`: its survey of the copies, then
a batch a transaction): 5 batches of 100 entries, each batch's entries quoted by `--docs` received alerts (each alert
quoting 3 of them, about 2 KB of their bodies), on the embedded store or on Postgres (GRANDBO_DATABASE_URL). In this
tree and in the tree of `--before` (a src directory, e.g. main's exported with `git archive`), alternated round by
round, each round a fresh process on a fresh store (Postgres: fresh orgs in the database named).

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/purge_survey.py --before /tmp/main-tree/src [--docs 2000] [--rounds 3]

Per round: the purge's wall and CPU time (one org), the peak of Python's allocations during the same purge of a
second org (`tracemalloc`, which slows it), and on the embedded store how long each batch held the store's lock
(each org's writes wait for it).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ab import command_line

ENTRIES, BATCHES, QUOTED = 500, 5, 3


def _alert(n: int, docs: int) -> dict[str, Any]:
    """Alert n of a batch's `docs`, quoting three entries of batch n % BATCHES (a received alert's kept recall)."""
    per = ENTRIES // BATCHES
    batch, at = n % BATCHES, (n // BATCHES) % per
    quoted = [f"E{batch * per + (at + k) % per}" for k in range(QUOTED)]
    body = f"replica lag on checkout after a failover; the runbook's steps, alert {n}. " * 9
    hits = [{"entry": {"id": entry_id, "kind": "finding", "title": f"replica lag {entry_id}", "body": body,
                       "tags": ["redis"], "meta": {}}, "score": 0.5} for entry_id in quoted]  # fmt: skip
    return {"id": f"a{n}", "summary": f"replica lag alert {n}", "recall": {"hits": hits}}


def _org(grandbo: Any, docs: int) -> Any:
    from grandbo.ports import DocumentWrite

    memory = grandbo.org(f"bench-{uuid.uuid4().hex[:8]}", create=True)
    memory.remember_many([{"id": f"E{n}", "title": f"replica lag {n}", "body": "the replica lagged after a failover"}
                          for n in range(ENTRIES)])  # fmt: skip
    writes = [DocumentWrite("alert", f"a{n}", _alert(n, docs), "alert.received") for n in range(docs * BATCHES)]
    for start in range(0, len(writes), 200):
        grandbo._store.put_documents(memory.org, writes[start : start + 200], "bench")
    return memory


def measure(docs: int) -> dict[str, Any]:
    """One round in this process (the tree on its path)."""
    import logging
    import tracemalloc

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home))
        init = Grandbo.open if settings.database_url else Grandbo.init
        kwargs = {} if settings.database_url else {"embedding": "deterministic"}
        with init(settings, **kwargs) as grandbo:
            store, ids = grandbo._store, [f"E{n}" for n in range(ENTRIES)]
            timed, traced = _org(grandbo, docs), _org(grandbo, docs)
            holds: list[tuple[float, float]] = []
            with _lock_holds(store, timed.org, holds):
                started, cpu = time.perf_counter(), time.process_time()
                assert len(store.purge_many(timed.org, ids, "bench", "bench")) == ENTRIES
                wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            tracemalloc.start()
            store.purge_many(traced.org, ids, "bench", "bench")
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            if settings.database_url:
                grandbo.drop_org(timed.org)
                grandbo.drop_org(traced.org)
    figures = {"purge_s": round(wall, 3), "purge_cpu_s": round(cpu, 3), "peak_mib": round(peak / 2**20, 1)}
    if holds:
        walls, cpus = zip(*holds, strict=True)
        figures |= {"batch_hold_ms_median": round(1000 * statistics.median(walls), 1),
                    "batch_hold_ms_max": round(1000 * max(walls), 1), "batches": len(holds),
                    "batch_hold_cpu_ms_median": round(1000 * statistics.median(cpus), 1)}  # fmt: skip
    return figures


@contextmanager
def _lock_holds(store: Any, org_id: str, holds: list[tuple[float, float]]) -> Any:
    """On the embedded store: each write of `org_id` that purged a batch (`erase_copies` ran in it), how long it held
    the store's lock, from its turn to its commit (`Connection._write`), and its thread's CPU time meanwhile (what the
    machine's load does not lengthen)."""
    import grandbo.store.sqlite.erasure as sqlite_erasure

    if not hasattr(store, "_lock"):
        yield
        return
    write, erase, batch = store._write, sqlite_erasure.erase_copies, [False]

    @contextmanager
    def timed(org: str | None = None) -> Any:
        with write(org) as db:
            started, cpu, batch[0] = time.perf_counter(), time.thread_time(), False
            yield db
        if org == org_id and batch[0]:
            holds.append((time.perf_counter() - started, time.thread_time() - cpu))

    def erasing(*args: Any, **kwargs: Any) -> Any:
        batch[0] = True
        return erase(*args, **kwargs)

    store._write, sqlite_erasure.erase_copies = timed, erasing
    try:
        yield
    finally:
        del store._write
        sqlite_erasure.erase_copies = erase


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "docs", 2_000)


if __name__ == "__main__":
    main()
