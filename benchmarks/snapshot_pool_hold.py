"""How long an org's first recall holds a pooled Postgres connection while it reads its facts (`Snapshots.get`: the
catalog, the incidents, the ledger, the settings), and whether another org's request waits for one meanwhile.

    python benchmarks/snapshot_pool_hold.py [--orgs 10] [--services 1000] [--incidents 300] [--pool 2] [--rounds 3]

N orgs each with S services and I incidents are written once. Each round opens a fresh Grandbo with a pool of P
connections and reads the N orgs' facts at once, one thread each (what ten orgs' first recalls in a new process do),
while an org of its own writes a small document, one write after another. Counted per reading thread, from the
pool's checkouts (`ConnectionPool.getconn` to `putconn`): how long it held connections in all (and the CPU its
thread spent meanwhile, steadier on a loaded machine) and at most at a time; from the pool (`get_stats`): the
requests that queued and how long they waited; and the writer's writes during the reads and their p50 / max.
`--seeded`: the orgs are in GRANDBO_DATABASE_URL already (GRANDBO_HOME the home that wrote them), to alternate
two codes on the same data. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool

from grandbo.config import Settings
from grandbo.devtools.postgres import benchmark_database
from grandbo.ports import DocumentWrite
from grandbo.service import Grandbo
from grandbo.tiers.topology import Service


def _seed(settings: Settings, orgs: list[str], services: int, incidents: int) -> None:
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("writer", create=True)
        for org in orgs:
            memory = grandbo.org(org, create=True)
            catalog = [Service(name=f"svc-{n:05d}", depends_on=[f"svc-{(n * 7 + 1) % services:05d}"],
                               owners=[f"team-{n % 20}"]) for n in range(services)]  # fmt: skip
            memory.catalog.put(catalog, actor="bench")
            for n in range(incidents):
                memory.incidents.open(f"{org} incident {n}: svc-{n % services:05d} latency", incident_id=f"INC-{n}",
                                      services=[f"svc-{n % services:05d}"])  # fmt: skip


def _round(settings: Settings, orgs: list[str]) -> dict[str, Any]:
    held: dict[int, list[tuple[float, float]]] = {}  # by thread: each checkout's hold, ms, wall and the thread's CPU
    out: dict[tuple[int, int], tuple[float, float]] = {}
    getconn, putconn = ConnectionPool.getconn, ConnectionPool.putconn

    def got(self: ConnectionPool, timeout: float | None = None) -> Any:  # type: ignore[type-arg]
        conn = getconn(self, timeout)
        out[(threading.get_ident(), id(conn))] = time.perf_counter(), time.thread_time()
        return conn

    def returned(self: ConnectionPool, conn: Any) -> None:  # type: ignore[type-arg]
        start = out.pop((threading.get_ident(), id(conn)), None)
        if start is not None:
            wall, cpu = (time.perf_counter() - start[0]) * 1000, (time.thread_time() - start[1]) * 1000
            held.setdefault(threading.get_ident(), []).append((wall, cpu))
        putconn(self, conn)

    ConnectionPool.getconn, ConnectionPool.putconn = got, returned  # type: ignore[method-assign]
    try:
        with Grandbo.open(settings) as grandbo:
            handles = {org: grandbo.org(org)._documents for org in orgs}
            writer = grandbo.org("writer")._documents
            versions = {org: documents.version() for org, documents in handles.items()}
            pool = grandbo._store._pool  # type: ignore[attr-defined]
            pool.get_stats()  # from here on
            go, done, readers = threading.Barrier(len(orgs) + 1), threading.Event(), []
            writes: list[float] = []

            def read(org: str) -> None:
                go.wait()
                grandbo._snapshots.get(org, handles[org], versions[org])
                readers.append(threading.get_ident())

            def write() -> None:
                go.wait()
                n = 0
                while not done.is_set():
                    start = time.perf_counter()
                    writer.put([DocumentWrite("note", f"w-{n}", {"n": n}, "put")], "bench")
                    writes.append((time.perf_counter() - start) * 1000)
                    n += 1

            threads = [threading.Thread(target=read, args=(org,)) for org in orgs]
            side = threading.Thread(target=write)
            for thread in [*threads, side]:
                thread.start()
            started = time.perf_counter()
            for thread in threads:
                thread.join()
            wall = (time.perf_counter() - started) * 1000
            done.set()
            side.join()
            stats = pool.get_stats()
    finally:
        ConnectionPool.getconn, ConnectionPool.putconn = getconn, putconn  # type: ignore[method-assign]
    total = [sum(wall for wall, _ in held.get(ident, [])) for ident in readers]
    cpu = [sum(used for _, used in held.get(ident, [])) for ident in readers]
    longest = [max((wall for wall, _ in held.get(ident, [])), default=0.0) for ident in readers]
    return {
        "wall_ms": round(wall, 1),
        "held_ms_p50": round(statistics.median(total), 1),
        "held_ms_max": round(max(total), 1),
        "held_cpu_ms_p50": round(statistics.median(cpu), 1),
        "longest_checkout_ms_max": round(max(longest), 1),
        "queued": stats.get("requests_queued", 0),
        "queued_wait_ms": stats.get("requests_wait_ms", 0),
        "writes": len(writes),
        "write_ms_p50": round(statistics.median(writes), 1) if writes else None,
        "write_ms_max": round(max(writes), 1) if writes else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orgs", type=int, default=10)
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--incidents", type=int, default=300)
    parser.add_argument("--pool", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seeded", action="store_true", help="The orgs are written already (see above).")
    args = parser.parse_args()
    orgs = [f"hold-{n:03d}" for n in range(args.orgs)]
    with benchmark_database("grandbo_bench_pool_hold") as url, tempfile.TemporaryDirectory() as scratch:
        settings = Settings(home=Path(os.environ.get("GRANDBO_HOME") or scratch), database_url=url)
        if not args.seeded:
            _seed(settings, orgs, args.services, args.incidents)
        pooled = settings.model_copy(update={"pg_pool_size": args.pool})
        rounds = [_round(pooled, orgs) for _ in range(args.rounds)]
    print(json.dumps({"orgs": args.orgs, "services": args.services, "incidents": args.incidents, "pool": args.pool,
                      "rounds": rounds}))  # fmt: skip


if __name__ == "__main__":
    main()
