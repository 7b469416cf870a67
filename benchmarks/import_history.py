"""How fast past incidents import on the embedded store: a PagerDuty-shaped export of N incidents, filed through
`grandbo.history.importer` (vectors left to the worker, as `grandbo import-from` leaves them), then imported again.

    python benchmarks/import_history.py [--incidents 10000] [--repeat 3] [--source jsonl|pagerduty] [--changed]
        [--backend sqlite|postgres]

Prints JSON: seconds (median of the repeats, each into a fresh store), records/s, the tracemalloc peak of the first
run and the process's peak RSS, and the re-import's seconds (median). `--changed`: then every record changes in the
source (its title and cause), people add a finding to a tenth of the incidents and close a twentieth with their own
resolution, and the changed export is imported (`changed_seconds` and `changed_cpu_seconds`, the process's user CPU,
medians; every record updated, what people wrote kept: `people_kept`). The target (issue 28): <= 60 s for 10,000,
re-import <= 10 s with 0 imported and 0 updated. `--source pagerduty` uses the `pagerduty` reader when it is
installed; `jsonl` writes the same incidents as JSON Lines with a mapping (the default until it is).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.history.importer import import_history
from grandbo.history.registry import reader
from grandbo.service import Grandbo

SERVICES = ["checkout-api", "payments-db", "search", "auth-service", "edge-proxy", "queue-workers"]
CAUSES = ["connection pool exhausted after a deploy", "disk filled by unrotated logs", "certificate expired",
          "a migration locked the orders table", "a bad feature flag sent all traffic to one zone"]  # fmt: skip
MAPPING = {"source_id": "id", "title": "title", "summary": "description", "started_at": "created_at",
           "resolved_at": "resolved_at", "status": "status", "severity": "priority", "services": "service",
           "url": "html_url", "cause": "cause", "notes": "notes"}  # fmt: skip


def pagerduty_incident(n: int) -> dict[str, Any]:
    """One incident as PagerDuty's REST API (`GET /incidents`) answers it, with notes."""
    start = datetime(2023, 1, 1, tzinfo=UTC) + timedelta(hours=7 * n)
    service = SERVICES[n % len(SERVICES)]
    cause = CAUSES[n % len(CAUSES)]
    return {
        "id": f"Q{n:07d}", "type": "incident", "incident_number": n + 1,
        "title": f"{service} error rate above 5% ({n})",
        "description": f"{service} answered 5xx to {n % 40 + 5}% of requests.",
        "created_at": start.isoformat().replace("+00:00", "Z"), "status": "resolved",
        "last_status_change_at": (start + timedelta(minutes=35)).isoformat().replace("+00:00", "Z"),
        "resolved_at": (start + timedelta(minutes=35)).isoformat().replace("+00:00", "Z"),
        "urgency": "high", "priority": {"summary": f"P{n % 4 + 1}", "name": f"P{n % 4 + 1}"},
        "service": {"id": f"PSV{n % 6}", "type": "service_reference", "summary": service},
        "html_url": f"https://acme.pagerduty.com/incidents/Q{n:07d}",
        "notes": [{"content": f"Root cause: {cause}.", "created_at": start.isoformat()}],
    }  # fmt: skip


def flat(incident: dict[str, Any]) -> dict[str, Any]:
    """The same incident as one JSON line a mapping reads (until the pagerduty reader is there)."""
    return {**incident, "priority": incident["priority"]["summary"], "service": incident["service"]["summary"],
            "cause": incident["notes"][0]["content"].removeprefix("Root cause: "),
            "notes": [note["content"] for note in incident["notes"]]}  # fmt: skip


def write_export(folder: Path, count: int, source: str) -> Path:
    if source == "pagerduty":
        path = folder / "incidents.json"
        with path.open("w") as out:
            out.write('{"incidents": [')
            for n in range(count):
                out.write(("," if n else "") + json.dumps(pagerduty_incident(n)))
            out.write("], " + json.dumps({"limit": count, "offset": 0, "more": False})[1:])  # the page's other keys
        return path
    path = folder / "incidents.jsonl"
    with path.open("w") as out:
        for n in range(count):
            out.write(json.dumps(flat(pagerduty_incident(n))) + "\n")
    return path


def changed_export(original: Path) -> Path:
    """`original` after the source changed every record: each title and cause reworded."""
    text = original.read_text().replace("error rate above 5%", "error rate above five percent")
    path = original.with_name("changed" + original.suffix)
    path.write_text(text.replace("Root cause: ", "Root cause (revised): ").replace('"cause": "', '"cause": "revised: '))
    return path


def people_write(memory: Any, count: int) -> list[str]:
    """A person adds a corroborated finding to every tenth incident and closes every twentieth with a resolution of
    their own; the incidents' ids."""
    touched = []
    for incident in memory.incidents.find()[: max(1, count // 10)]:
        memory.incidents.add_finding(incident.id, "a person saw the pool drain", status="corroborated",
                                     root_cause="a person's cause", actor="alice")  # fmt: skip
        if len(touched) % 2 == 0:
            memory.incidents.close(incident.id, resolution="a person's resolution", actor="alice")
        touched.append(incident.id)
    return touched


def people_kept(memory: Any, touched: list[str]) -> int:
    kept = 0
    for n, incident_id in enumerate(touched):
        incident = memory.incidents.get(incident_id)
        finding = any(f.summary == "a person saw the pool drain" for f in incident.findings)
        kept += finding and (n % 2 or incident.resolution == "a person's resolution")
    return kept


def one_run(
    folder: Path, path: Path, source: str, trace: bool, changed: Path | None, database_url: str | None = None
) -> dict[str, Any]:
    settings = Settings(home=folder / "home", sqlite_synchronous="NORMAL", database_url=database_url)
    Grandbo.init(settings, embedding="deterministic").close()
    mapping = MAPPING if source == "jsonl" else None
    with Grandbo.open(settings, background=True, embed_here=False) as grandbo:
        memory = grandbo.org(f"bench-{folder.name}", create=True)
        if trace:
            tracemalloc.start()
        started = time.perf_counter()
        first = import_history(memory, reader(source), path, mapping=mapping)
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1] if trace else None
        if trace:
            tracemalloc.stop()
        started = time.perf_counter()
        again = import_history(memory, reader(source), path, mapping=mapping)
        reimport = time.perf_counter() - started
        run = {"seconds": seconds, "reimport_seconds": reimport, "tracemalloc_peak_mb": peak and peak / 2**20,
               "first": first.to_dict(), "again": again.to_dict()}  # fmt: skip
        if changed is not None:
            touched = people_write(memory, first.imported)
            started, cpu = time.perf_counter(), os.times().user
            update = import_history(memory, reader(source), changed, mapping=mapping)
            run |= {"changed_seconds": time.perf_counter() - started, "changed_cpu_seconds": os.times().user - cpu,
                    "changed": update.to_dict(),
                    "people": len(touched), "people_kept": people_kept(memory, touched)}  # fmt: skip
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incidents", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--source", choices=["jsonl", "pagerduty"], default="jsonl")
    parser.add_argument("--changed", action="store_true", help="then import a changed export (see the module)")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = None
        if args.backend == "postgres":
            from grandbo.devtools.postgres import benchmark_database

            url = stack.enter_context(benchmark_database("import_history_bench"))
        runs = measure(args, url)
    print(summary(args, runs))


def measure(args: argparse.Namespace, database_url: str | None) -> list[dict[str, Any]]:
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        path = write_export(Path(scratch), args.incidents, args.source)
        for n in range(args.repeat):
            folder = Path(scratch) / f"run{n}"
            folder.mkdir()
            changed = changed_export(path) if args.changed else None
            trace = n == 0 and args.repeat > 1
            runs.append(one_run(folder, path, args.source, trace, changed, database_url))
    return runs


def summary(args: argparse.Namespace, runs: list[dict[str, Any]]) -> str:
    timed = runs[1:] if len(runs) > 1 else runs  # the first is traced (slower): medians of the others
    seconds = statistics.median(r["seconds"] for r in timed)
    last = runs[-1]
    return json.dumps({
        "incidents": args.incidents, "source": args.source, "backend": args.backend, "repeats": len(timed),
        "seconds": round(seconds, 2),
        "records_per_s": round(args.incidents / seconds), "reimport_seconds": round(
            statistics.median(r["reimport_seconds"] for r in timed), 2),
        "tracemalloc_peak_mb": runs[0]["tracemalloc_peak_mb"] and round(runs[0]["tracemalloc_peak_mb"], 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "first": {k: last["first"][k] for k in ("imported", "updated", "unchanged")} | {
            "refused": len(last["first"]["refused"])},
        "again": {k: last["again"][k] for k in ("imported", "updated", "unchanged")},
        "targets": {"seconds": 60, "reimport_seconds": 10},
        **({"changed_seconds": round(statistics.median(r["changed_seconds"] for r in runs), 2),  # every run's:
            "changed_cpu_seconds": round(statistics.median(r["changed_cpu_seconds"] for r in runs), 2),  # untraced
            "changed_runs": [(round(r["changed_seconds"], 2), round(r["changed_cpu_seconds"], 2)) for r in runs],
            "changed": {k: last["changed"][k] for k in ("imported", "updated", "unchanged")} | {
                "refused": len(last["changed"]["refused"])},
            "people": last["people"], "people_kept": last["people_kept"]} if args.changed else {}),
    })  # fmt: skip


if __name__ == "__main__":
    main()
