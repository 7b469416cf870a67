"""What an upgrade's migrations cost a large store: a store written by an older release (`--before`, its src
directory, e.g. the commit before migration 32 exported with `git archive`) of N organizations of E entries and one
of B (deterministic vectors), O ledger outcomes in the large one, an index image of eleven orgs; then opened (SQLite)
or migrated (`--postgres`: `grandbo migrate` as the owner) by this tree, while a process of the older release reads
and writes one org every 0.2 s. With `--kill-after S` the migrating process is killed (SIGKILL) S s in, and the
store's version is read before it is opened again.

    git -C . archive 08451d06~1 src | tar -x -C /tmp/before-32
    PYTHONPATH=src python benchmarks/upgrade_cost.py --before /tmp/before-32/src [--orgs 100] [--entries 2000]
        [--big 100000] [--outcomes 2000] [--kill-after 20] [--postgres]

Prints one JSON line per step: the seed's time; the migration's wall and CPU, the migrating process's peak resident
memory and the store's bytes on disk before, at the peak and after (SQLite: the file and its -wal, sampled every
50 ms; Postgres: the database); what the older process saw meanwhile (its slowest read and write, its errors).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def seed(home: Path, url: str | None, orgs: int, entries: int, big: int, outcomes: int) -> None:
    """Run in the older tree: the orgs' writes interleaved 500 at a time, as a shared store has them."""
    from grandbo.config import Settings
    from grandbo.eval.bench import synthetic_entry
    from grandbo.model import entry_text
    from grandbo.service import Grandbo

    rng = random.Random(7)
    with Grandbo.init(Settings(home=home, database_url=url), embedding="deterministic") as grandbo:
        generated = [synthetic_entry(rng, number) for number in range(big)]
        vectors: list[Any] = list(grandbo.provider().embed([entry_text(e.title, e.body, e.tags, e.services)
                                                           for e in generated]))  # fmt: skip
        memories = {name: grandbo.org(name, create=True) for name in [f"org{n:03d}" for n in range(orgs)] + ["big"]}
        for offset in range(0, entries, 500):
            end = min(offset + 500, entries)
            for memory in memories.values():
                memory.remember_many(generated[offset:end], actor="seed", vectors=vectors[offset:end])
        for offset in range(entries, big, 5_000):
            memories["big"].remember_many(generated[offset : offset + 5_000], actor="seed",
                                          vectors=vectors[offset : offset + 5_000])  # fmt: skip
        memories["big"].ledger.import_outcomes([
            {"runbook_id": f"RB-{n % 20}", "kind": "succeeded", "incident_id": f"INC-{n}", "service": f"svc-{n % 300}",
             "time_to_mitigate_s": 60 + n % 900, "at": f"2025-01-01T00:00:{n % 60:02d}+00:00", "actor": "seed"}
            for n in range(outcomes)
        ], prefix="seed")  # fmt: skip
        for name in [*list(memories)[:10], "big"]:  # index images, whose marks the migration moves
            memories[name].recall("redis connection resets on auth-service during a key eviction spike", 5)


def upgrade(home: Path, url: str | None) -> None:
    """Run in this tree: open (SQLite: migrates) or migrate (Postgres), measured."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    settings = Settings(home=home, database_url=url)
    rss, wall, cpu = _peak_mb(), time.perf_counter(), time.process_time()
    if url:
        Grandbo.migrate(settings)
    else:
        Grandbo.open(settings).close()
    print(json.dumps({"step": "migrated", "wall_s": round(time.perf_counter() - wall, 2),
                      "cpu_s": round(time.process_time() - cpu, 2), "rss_at_start_mb": rss,
                      "peak_rss_mb": _peak_mb()}))  # fmt: skip


def probe(home: Path, url: str | None, seconds: float) -> None:
    """Run in the older tree: one org read and written every 0.2 s; the slowest of each and the errors."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    memory = Grandbo.open(Settings(home=home, database_url=url)).org("org000")
    worst, errors, end = {"read": 0.0, "write": 0.0}, set(), time.monotonic() + seconds
    written = {"title": "a write during the upgrade", "body": "replica lag"}
    acts = {"read": lambda: memory.get_many(["none"]), "write": lambda: memory.remember(written)}
    while time.monotonic() < end:
        for kind, act in acts.items():
            started = time.perf_counter()
            try:
                act()
            except Exception as error:  # what the older release answers meanwhile is the figure
                errors.add(type(error).__name__)
            worst[kind] = round(max(worst[kind], time.perf_counter() - started), 2)
        time.sleep(0.2)
    print(json.dumps({"step": "older process meanwhile", "slowest_s": worst, "errors": sorted(errors)}))


def _peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _disk(home: Path, url: str | None) -> int:
    if url:
        import psycopg

        with psycopg.connect(os.environ["GRANDBO_MIGRATE_DATABASE_URL"]) as conn:
            return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])  # type: ignore[index]
    return sum(part.stat().st_size for part in home.glob("grandbo.db*") if part.exists())


def _version(home: Path, url: str | None) -> int:
    if url:
        import psycopg

        with psycopg.connect(os.environ["GRANDBO_MIGRATE_DATABASE_URL"]) as conn:
            return int(conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0])  # type: ignore[index]
    with sqlite3.connect(f"file:{home / 'grandbo.db'}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT max(version) FROM schema_migrations").fetchone()[0])


def _run(tree: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HERE), *args], env={**os.environ, "PYTHONPATH": str(tree)},
                            stdout=subprocess.PIPE, text=True)  # fmt: skip


def measure(args: argparse.Namespace, home: Path, url: str | None) -> None:
    store = [str(home), url or ""]
    started = time.perf_counter()
    seeding = _run(args.before, "--seed", *store, *map(str, (args.orgs, args.entries, args.big, args.outcomes)))
    if seeding.wait():
        raise SystemExit("the older tree's seed failed")
    seeded = {"step": "seeded", "seconds": round(time.perf_counter() - started), "disk_mb": _disk(home, url) >> 20}
    print(json.dumps(seeded), flush=True)
    older = _run(args.before, "--probe", *store, str(args.probe_seconds))
    time.sleep(3)
    before, peak, stop = _disk(home, url), [0], threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            with contextlib.suppress(OSError):  # a -wal file gone between the listing and its size
                peak[0] = max(peak[0], _disk(home, url))

    threading.Thread(target=watch, daemon=True).start()
    migrating = _run(HERE.parent.parent / "src", "--upgrade", *store)
    if args.kill_after:
        time.sleep(args.kill_after)
        migrating.send_signal(signal.SIGKILL)
        migrating.wait()
        print(json.dumps({"step": f"killed after {args.kill_after} s", "version": _version(home, url)}))
        migrating = _run(HERE.parent.parent / "src", "--upgrade", *store)
    print(migrating.communicate()[0].strip(), flush=True)
    stop.set()
    print(json.dumps({"step": "disk", "before_mb": before >> 20, "peak_mb": max(peak[0], before) >> 20,
                      "after_mb": _disk(home, url) >> 20, "version": _version(home, url)}))  # fmt: skip
    print(older.communicate()[0].strip(), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="the older release's src directory")
    parser.add_argument("--orgs", type=int, default=100)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--outcomes", type=int, default=2000)
    parser.add_argument("--kill-after", type=float, default=0.0)
    parser.add_argument("--probe-seconds", type=float, default=90.0, help="how long the older process works")
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--seed", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--upgrade", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--probe", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed:
        seed(Path(args.seed[0]), args.seed[1] or None, *map(int, args.seed[2:]))
    elif args.upgrade:
        upgrade(Path(args.upgrade[0]), args.upgrade[1] or None)
    elif args.probe:
        probe(Path(args.probe[0]), args.probe[1] or None, float(args.probe[2]))
    elif args.before is None:
        raise SystemExit("--before: the older release's src directory")
    elif args.postgres:
        from grandbo.devtools.postgres import benchmark_database

        with benchmark_database("upgrade_cost") as url, tempfile.TemporaryDirectory() as home:
            measure(args, Path(home), url)
    else:
        with tempfile.TemporaryDirectory(prefix="grandbo-upgrade-") as home:
            measure(args, Path(home), None)


if __name__ == "__main__":
    main()
