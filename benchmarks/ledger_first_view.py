"""The first analytics view of an org of many ledger outcomes in a fresh process, and another org's recalls meanwhile
(probe 23b: 4.9-9 s on Postgres at 100,000 outcomes, another org's p95 85 -> 216 ms).

    python benchmarks/ledger_first_view.py [--backend sqlite|postgres] [--outcomes 100000] [--rounds 3] [--old SRC]

A store is seeded once (this tree; for an `--old` tree that predates its migration 33, the store is stepped down to the
old schema before each old run and migrated again, then vacuumed, before each run of this tree: `schema_for`): a
`victim` org of 2,000 entries and a `big` org of 200 entries, 20 runbooks, 50 incidents and the outcomes (succeeded,
failed, recommended, rated). Then each round starts a fresh process per tree (`--old`: another tree's `src`, alternated
with this one's): the victim recalls k=5 every 20 ms, 4 s alone, then while a thread builds the big org's analytics for
the first time in the process (`AnalyticsCache.get`). Prints one JSON line a run: the view's time and CPU (its
thread's), a digest of the numbers (equal across trees: the same answers), the victim's p50 / p95 / max alone and
meanwhile, and the big org's first recall after it."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.service import Grandbo

RUNBOOKS = [f"RB-{n:02d}" for n in range(20)]
TOPICS = ["redis replica lag after a failover on the checkout service", "disk full on the kafka brokers",
          "payments-gateway ERR_CONN_RESET on deploy", "certificate expired on the tls terminator"]  # fmt: skip
KINDS = ["succeeded", "failed", "succeeded", "recommended", "rated"]


def seed(grandbo: Grandbo, outcomes: int) -> None:
    from grandbo.eval.bench import synthetic_entry

    rng = random.Random(19)
    grandbo.org("victim", create=True).remember_many([synthetic_entry(rng, n) for n in range(2000)], actor="bench")
    big = grandbo.org("big", create=True)
    big.remember_many([synthetic_entry(rng, n) for n in range(200)], actor="bench")
    for runbook in RUNBOOKS:
        big.runbooks.add(runbook, f"Runbook {runbook}", ["check", "mitigate", "verify"])
    start, records = datetime(2023, 1, 1, tzinfo=UTC), []
    for n in range(outcomes):
        at = (start + timedelta(minutes=n)).isoformat()
        record: dict[str, Any] = {"runbook_id": RUNBOOKS[n % 20], "kind": KINDS[n % 5], "incident_id": f"INC-{n}",
                                  "service": f"svc-{n % 300}", "at": at}  # fmt: skip
        if record["kind"] == "succeeded":
            record["time_to_mitigate_s"] = rng.randint(60, 9000)
        if record["kind"] == "rated":
            record["rating"] = rng.choice([1, -1])
        records.append(record)
    for first in range(0, outcomes, 20_000):
        big.ledger.import_outcomes(records[first : first + 20_000], prefix=f"bulk{first}")
    for n in range(50):
        big.incidents.open(f"checkout latency incident {n}", services=["checkout"], incident_id=f"I-{n}")


def _percentiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"n": len(times), "p50": round(statistics.median(ordered), 1),
            "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 1), "max": round(ordered[-1], 1)}  # fmt: skip


def whole_reads_counted() -> list[int]:
    """In this process: the credible intervals' import done ahead (0.3-0.5 s, not the ledger's), and every read of
    a ledger whole (`LedgerView.made`, in a tree that has it: `--old` one before it was removed, none since, where
    nothing reads a ledger whole) counted in the list returned, one item a read."""
    from scipy.special import betaincinv

    made: list[int] = []
    try:
        from grandbo.tiers.ledger_view import LedgerView  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        betaincinv(2, 2, 0.05)
        return made
    whole = LedgerView.made.__func__  # type: ignore[attr-defined]
    counted = classmethod(lambda cls, items: made.append(1) or whole(cls, items))  # the ledger read whole
    LedgerView.made = counted  # type: ignore[method-assign, assignment]
    betaincinv(2, 2, 0.05)
    return made


def victim_recalls(victim: Any, done: threading.Event | None, seconds: float = 4.0) -> list[float]:
    """The victim's recalls (k=5, one every 20 ms at most) for `seconds`, or until `done` is set: each one's ms."""
    times: list[float] = []
    ends = time.monotonic() + seconds
    while (done is None and time.monotonic() < ends) or (done is not None and not done.is_set()):
        started = time.perf_counter()
        victim.recall(TOPICS[len(times) % 4], k=5)
        times.append((time.perf_counter() - started) * 1000)
        time.sleep(max(0.0, 0.02 - (time.perf_counter() - started)))
    return times


def view(settings: Settings) -> dict[str, Any]:
    """In this (fresh) process: the victim alone, then meanwhile the big org's first analytics view."""
    from grandbo.web.analytics import AnalyticsCache

    with Grandbo.open(settings) as grandbo:
        victim, big = grandbo.org("victim"), grandbo.org("big")
        for n in range(10):
            victim.recall(TOPICS[n % 4], k=5)

        alone, out, done = victim_recalls(victim, None), {}, threading.Event()

        def first_view() -> None:
            cpu, started = time.thread_time(), time.perf_counter()
            data = AnalyticsCache().get(big)
            out["first_view_ms"] = round((time.perf_counter() - started) * 1000, 1)
            out["first_view_cpu_ms"] = round((time.thread_time() - cpu) * 1000, 1)
            out["outcomes"] = data.outcomes
            out["digest"] = hashlib.sha1(repr((data.runbooks, data.mttr, data.outcomes)).encode()).hexdigest()[:12]
            done.set()

        thread = threading.Thread(target=first_view)
        thread.start()
        during = victim_recalls(victim, done)
        thread.join()
        started = time.perf_counter()
        big.recall(TOPICS[1], k=5)
        out["big_first_recall_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return {**out, "victim_alone": _percentiles(alone), "victim_during": _percentiles(during)}


def schema_for(settings: Settings, old: bool) -> None:
    """The store as the run's tree reads it: an old tree (before migration 33) refuses a store of a schema it does not
    know, so 33 is taken back out (as tests/conftest.undo_migration does); this tree's open migrates it again, and
    Postgres's table rewritten so is vacuumed and analyzed, as a store long past its migration would be."""
    from grandbo.store.sql.odd_outcomes import COLUMN  # this tree's (the parent runs it); a child may be an old tree

    undo = ["DROP INDEX IF EXISTS documents_odd_outcomes", f"ALTER TABLE documents DROP COLUMN IF EXISTS {COLUMN}",
            "DELETE FROM schema_migrations WHERE version = 33"]  # fmt: skip
    if settings.database_url is None:
        import sqlite3

        with sqlite3.connect(settings.home / "grandbo.db") as conn:
            if old and any(row[1] == COLUMN for row in conn.execute("PRAGMA table_xinfo(documents)")):
                for statement in undo:
                    conn.execute(statement.replace(" IF EXISTS " + COLUMN, " " + COLUMN))
        if not old:
            Grandbo.open(settings).close()
        return
    import psycopg

    owner = os.environ.get("GRANDBO_MIGRATE_DATABASE_URL") or settings.database_url
    if old:
        with psycopg.connect(owner, autocommit=True) as conn:
            for statement in undo:
                conn.execute(statement)  # type: ignore[arg-type]
        return
    Grandbo.open(settings).close()
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE documents")


def alternated(script: str, name: str, child: str, run: Callable[[Settings], dict[str, Any]]) -> None:
    """The command line of `script` (this benchmark, or one on its store): a child (`--{child} HOME`) prints `run`'s
    JSON line; else the store is seeded once and each round runs a fresh child of each tree, alternated."""
    parser = argparse.ArgumentParser(description=(sys.modules["__main__"].__doc__ or "").split("\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--outcomes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old", help="another tree's src, run alternated with this one's")
    parser.add_argument(f"--{child}", dest="child", help=argparse.SUPPRESS)  # a child: the store's home
    parser.add_argument("--url", help=argparse.SUPPRESS)  # and its database
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(Settings(home=Path(args.child), database_url=args.url))))
        return
    this = str(Path(script).resolve().parents[1] / "src")
    with tempfile.TemporaryDirectory() as home:
        if args.backend == "postgres":
            from grandbo.devtools.postgres import benchmark_database

            database = benchmark_database(name)
        else:
            database = None
        url = database.__enter__() if database is not None else None
        try:
            settings = Settings(home=Path(home), database_url=url)
            with Grandbo.init(settings, embedding="deterministic") as grandbo:
                seed(grandbo, args.outcomes)
            for number in range(args.rounds):
                for tree in [t for t in (args.old, this) if t]:
                    if args.old:
                        schema_for(settings, old=tree == args.old)
                    ran = subprocess.run(
                        [sys.executable, script, f"--{child}", home, *(["--url", url] if url else [])], check=True,
                        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tree},
                    )  # fmt: skip
                    line = json.loads(ran.stdout.strip().splitlines()[-1])
                    print(json.dumps({"round": number + 1, "tree": "old" if tree == args.old else "this", **line}))
        finally:
            if database is not None:
                database.__exit__(None, None, None)


if __name__ == "__main__":
    alternated(__file__, "ledger_first_view", "view", view)
