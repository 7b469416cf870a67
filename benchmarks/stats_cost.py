"""What an organization's corpus counts (`/v1/stats`, `grandbo stats`: `OrgMemory.stats`) cost by its size: a
store of orgs of 2,000, 20,000 and 100,000 generated memories (deterministic vectors, written as an import writes
them), then in this tree and in the tree of `--before` (a src directory, e.g. main's exported with `git archive`),
alternated round by round, each round a fresh process: each org's counts read again and again with nothing changed
(`repeat`), and read right after one write of the org (`after_write`, the write not timed). Each tree has a store
of its own, seeded alike by that tree (an older release does not open a store a newer one migrated; with
`--postgres`, a database each on one local server), and the seed's wall time is printed: what the writes cost.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/stats_cost.py --before /tmp/main-tree/src [--sizes 2000,20000,100000]
        [--rounds 3] [--postgres]

One JSON line per tree, round and org: the median wall and CPU (this process's: on Postgres the count runs in the
server, so its wall is the figure) of each kind of read, in ms, and whether both trees' counts agreed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

READS = 7


def _seed(home: Path, url: str | None, sizes: list[int]) -> None:
    from grandbo.config import Settings
    from grandbo.eval.bench import synthetic_entry
    from grandbo.model import entry_text
    from grandbo.service import Grandbo

    rng = random.Random(5)
    with Grandbo.init(Settings(home=home, database_url=url), embedding="deterministic") as grandbo:
        generated = [synthetic_entry(rng, number) for number in range(max(sizes))]
        texts = [entry_text(e.title, e.body, e.tags, e.services) for e in generated]
        vectors: list[Any] = list(grandbo.provider().embed(texts))
        for size in sizes:
            memory = grandbo.org(f"org-{size}", create=True)
            for offset in range(0, size, 5_000):
                end = min(size, offset + 5_000)
                memory.remember_many(generated[offset:end], actor="bench", vectors=vectors[offset:end])


def _timed(read: Any) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    found = read()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, found


def measure(home: Path, url: str | None, sizes: list[int]) -> list[dict[str, Any]]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    figures = []
    with Grandbo.open(Settings(home=home, database_url=url)) as grandbo:
        for size in sizes:
            memory = grandbo.org(f"org-{size}")
            memory.stats()  # the process's first read of the org: connections, the space
            repeat = [_timed(memory.stats) for _ in range(READS)]
            after_write = []
            for n in range(READS):
                memory.remember({"title": f"stats bench write {n}", "body": "replica lag on the orders database"})
                after_write.append(_timed(memory.stats))
            counts = memory.stats().model_dump(exclude={"org_id", "space"})
            figures.append({
                "org_entries": size,
                "repeat_wall_ms": round(statistics.median(t[0] for t in repeat), 2),
                "repeat_cpu_ms": round(statistics.median(t[1] for t in repeat), 2),
                "after_write_wall_ms": round(statistics.median(t[0] for t in after_write), 2),
                "after_write_cpu_ms": round(statistics.median(t[1] for t in after_write), 2),
                "counts": counts,
            })  # fmt: skip
    return figures


@contextlib.contextmanager
def _databases(postgres: bool, trees: list[str]) -> Iterator[dict[str, tuple[str, dict[str, str]]]]:
    """Each tree's database URL ("" for SQLite) and the environment its processes need (the owner's URL)."""
    if not postgres:
        yield {tree: ("", {}) for tree in trees}
        return
    from grandbo.devtools.postgres import LocalPostgres

    with LocalPostgres(durable=True) as server:
        made = {tree: server.create_app_database(f"stats_cost_{tree}") for tree in trees}
        yield {
            tree: (url, {"GRANDBO_MIGRATE_DATABASE_URL": server.owner_url(f"stats_cost_{tree}")})
            for tree, url in made.items()
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="the src directory of the tree to compare with")
    parser.add_argument("--sizes", default="2000,20000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("HOME", "URL"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", nargs=2, metavar=("HOME", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.seed:
        _seed(Path(args.seed[0]), args.seed[1] or None, sizes)
        return
    if args.one:
        print(json.dumps(measure(Path(args.one[0]), args.one[1] or None, sizes)))
        return
    here = Path(__file__).resolve().parent.parent / "src"
    trees = {"this": here, **({"before": args.before.resolve()} if args.before else {})}
    with (
        _databases(args.postgres, list(trees)) as databases,
        tempfile.TemporaryDirectory(prefix="grandbo-stats-") as home,
    ):

        def run(tree: str, *what: str) -> str:
            url, env = databases[tree]
            done = subprocess.run(
                [sys.executable, __file__, *what, str(Path(home) / tree), url, "--sizes", args.sizes],
                env={**os.environ, **env, "PYTHONPATH": str(trees[tree])}, capture_output=True, text=True, check=True,
            )  # fmt: skip
            return done.stdout

        for tree in trees:
            (Path(home) / tree).mkdir()
            started = time.perf_counter()
            run(tree, "--seed")  # the writes' cost, the counts kept or not
            print(json.dumps({"tree": tree, "seed_s": round(time.perf_counter() - started, 1)}), flush=True)
        for round_ in range(args.rounds):
            for tree in trees:
                for row in json.loads(run(tree, "--one").strip().splitlines()[-1]):
                    print(json.dumps({"tree": tree, "round": round_ + 1, **row}), flush=True)


if __name__ == "__main__":
    main()
