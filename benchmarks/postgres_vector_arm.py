"""One Postgres org's recall, warm and first in a process: where the vector arm runs (pgvector's exact scan, or the
in-process index) shows in the medians and in `timings.vector_ms`.

    python benchmarks/postgres_vector_arm.py [--entries 2000] [--recalls 300] [--firsts 30]

Starts a throwaway Postgres (grandbo.devtools.postgres, durable), seeds one org as `grandbo bench tenants` does,
then times `recall(topic, 5)` in one process (warm: each topic asked once before, so the entries it returns are
cached) and the first recall of the org in `firsts` fresh processes'
keepers (a fresh Grandbo each; the org's index image saved by the first), then how long the vectors that first
recall left to pgvector take to fetch once a second read queues them (where the keeper fetches them lazily); and
the CPU the Postgres backends spent per warm recall (their /proc stats, so the server must run on this machine).
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from grandbo.config import Settings
from grandbo.eval.bench import synthetic_query
from grandbo.eval.metrics import percentile
from grandbo.eval.tenants_bench import _seed
from grandbo.service import Grandbo


def _ms(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 3), "p95": round(percentile(values, 95), 3)}


def _backend_cpu(url: str) -> dict[int, float]:
    """CPU milliseconds each Postgres backend serving this database has used (its /proc stat: same machine)."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [pid for (pid,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )]  # fmt: skip
    tick, used = os.sysconf("SC_CLK_TCK"), {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        used[pid] = (int(fields[11]) + int(fields[12])) * 1000 / tick  # utime + stime
    return used


def run(settings: Settings, entries: int, recalls: int, firsts: int) -> dict[str, Any]:
    _seed(settings, {"one": entries}, print)
    rng = random.Random(5)
    with Grandbo.open(settings) as grandbo:
        memory = grandbo.org("one")
        topics = [synthetic_query(rng) for _ in range(recalls)]
        for topic in topics:  # the steady state: every entry a recall returns cached, as a busy server has them
            memory.recall(topic, 5)
        wall, vector, lexical = [], [], []
        backends = _backend_cpu(str(settings.database_url))
        for topic in topics:
            start = time.perf_counter()
            result = memory.recall(topic, 5)
            wall.append((time.perf_counter() - start) * 1000)
            vector.append(result.timings.vector_ms)
            lexical.append(result.timings.lexical_ms)
        after = _backend_cpu(str(settings.database_url))
        server_ms = sum(after.values()) - sum(backends.get(pid, 0.0) for pid in after)
    first, first_cpu, first_server, fetch = [], [], [], []
    for number in range(firsts + 1):
        with Grandbo.open(settings) as fresh:
            topic = synthetic_query(random.Random(100 + number))
            backends = _backend_cpu(str(settings.database_url))
            start, cpu = time.perf_counter(), time.process_time()
            fresh.org("one").recall(topic, 5)
            took, cpu = (time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000
            after = _backend_cpu(str(settings.database_url))
            if number:  # the first process may still save the image: not counted
                # Its CPU too (this process's, and the backends'): under load from other work the wall time
                # is mostly waiting for a core.
                first.append(took)
                first_cpu.append(cpu)
                first_server.append(sum(after.values()) - sum(backends.get(pid, 0.0) for pid in after))
            keeper = fresh._keeper
            if number and hasattr(keeper, "settle"):  # a second read queues the fetch; it runs on its own thread
                keeper.fresh("one")
                start = time.perf_counter()
                keeper.settle()
                fetch.append((time.perf_counter() - start) * 1000)
                assert keeper.counts["fetched"] == 1, "the vectors were not fetched"
    with psycopg.connect(str(settings.database_url)) as conn:  # the image the first recalls loaded
        conn.execute("SELECT set_config('grandbo.org_id', 'one', true)")
        try:  # the vectors in a column of their own (Postgres migration 18), else in `data`
            (head_bytes, vector_bytes) = conn.execute(
                "SELECT octet_length(data), coalesce(octet_length(vectors), 0) FROM index_images WHERE org_id = 'one'"
            ).fetchone()  # type: ignore[misc]
        except psycopg.errors.UndefinedColumn:
            conn.rollback()
            conn.execute("SELECT set_config('grandbo.org_id', 'one', true)")
            (head_bytes,) = conn.execute("SELECT octet_length(data) FROM index_images WHERE org_id = 'one'").fetchone()  # type: ignore[misc]
            vector_bytes = 0
        image_bytes = head_bytes + vector_bytes
    return {
        "entries": entries,
        "image_mb": round(image_bytes / 2**20, 2),
        "image_read_by_first_recall_mb": round(head_bytes / 2**20, 2),
        "warm_recall_ms": _ms(wall),
        "vector_ms": _ms(vector),
        "lexical_ms": _ms(lexical),
        "postgres_cpu_ms_per_recall": round(server_ms / len(topics), 3),
        "first_recall_ms": _ms(first),
        "first_recall_cpu_ms": _ms(first_cpu),
        # The backends' /proc counts are in ticks (10 ms): a mean over the first recalls, not a median.
        "first_recall_postgres_cpu_ms_mean": round(statistics.mean(first_server), 3),
        "vector_fetch_ms": _ms(fetch) if fetch else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--recalls", type=int, default=300)
    parser.add_argument("--firsts", type=int, default=30)
    args = parser.parse_args()
    from grandbo.devtools.postgres import benchmark_database

    with tempfile.TemporaryDirectory(prefix="grandbo-pgvec-") as home, benchmark_database("vector_arm_bench") as url:
        figures = run(Settings(home=Path(home), database_url=url), args.entries, args.recalls, args.firsts)
        print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
