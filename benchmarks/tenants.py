"""`grandbo bench tenants` on Postgres, on GRANDBO_DATABASE_URL when set, else on a durable local Postgres started
for the run (`devtools.postgres.benchmark_database`, as the other Postgres benchmarks do).

    python benchmarks/tenants.py [--orgs 1000] [--entries 2000] [--clients 16] [--seconds 20] [--processes 2]
        [--import-entries 100000]

Prints the same JSON line as `grandbo bench tenants --json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from grandbo.config import Settings
from grandbo.eval.tenants_bench import bench_tenants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orgs", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--import-entries", type=int, default=100_000)
    args = parser.parse_args()
    from grandbo.devtools.postgres import benchmark_database

    with benchmark_database("tenants_bench") as url, tempfile.TemporaryDirectory(prefix="grandbo-tenants-") as home:
        figures = bench_tenants(
            Settings(home=Path(home), database_url=url),
            orgs=args.orgs,
            entries=args.entries,
            clients=args.clients,
            seconds=args.seconds,
            processes=args.processes,
            import_entries=args.import_entries,
            progress=lambda message: print(message, file=sys.stderr),
        )
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
