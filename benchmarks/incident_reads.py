"""What an org's incidents cost the paths that read all of them: a recall right after an incident write (the
org's snapshot is remade: the runbooks' services come from the incidents that cite them), the console's analytics
numbers and its on-call queue, in this tree and in the tree of `--before` (a src directory, e.g. main's exported
with `git archive`), the two alternated round by round, each round a fresh process on a fresh embedded store.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/incident_reads.py --before /tmp/main-tree/src [--incidents 5000] [--services 30]
        [--outcomes 0] [--rounds 2]

The org holds 1,000 memories, a catalog of S services (each depending on 5 others, a 700-character description)
and N incidents on 30 of them, each with three findings (two corroborated, each citing one of 40 runbooks), every
other one closed. Deterministic embeddings, so no model time. Recall: the median of 40 recalls, each right after a
finding is added to an incident, against 40 with nothing written before them (the baseline of the same process);
with `--outcomes N` (a ledger of N outcomes over 40 runbooks) 40 recalls each right after an outcome is recorded,
and with a catalog 40 each right after one of its services is written. The console: the medians of 15 calls of
`web.analytics.build` and of `web.triage.queue`. One JSON line per tree and round.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from ab import alternate

SERVICES = [f"svc-{n}" for n in range(30)]
TOPIC = "cache latency rises on the orders service under memory pressure"


def measure(incidents: int, services: int, outcomes: int = 0) -> dict[str, float]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo
    from grandbo.tiers.topology import Service
    from grandbo.web import analytics, triage

    rng = random.Random(5)
    with (
        tempfile.TemporaryDirectory() as home,
        Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as grandbo,
    ):
        memory = grandbo.org("bench", create=True)
        if services:
            about = "serves the orders of one region; " * 20
            catalog = [Service(name=f"svc-{n}", depends_on=[f"svc-{(n + k) % services}" for k in range(1, 6)],
                               description=about) for n in range(services)]  # fmt: skip
            memory.catalog.put(catalog, actor="bench")
        memory.remember_many([{"id": f"E{n}", "title": f"entry {n} about {rng.choice(SERVICES)} latency",
                               "body": "replica lag " * 30} for n in range(1000)])  # fmt: skip
        for n in range(incidents):
            opened = memory.incidents.open(f"incident {n}", services=[rng.choice(SERVICES)], severity="sev2",
                                           incident_id=f"INC-{n}")  # fmt: skip
            for f in range(3):
                memory.incidents.add_finding(
                    opened.id,
                    f"finding {f} of {n}: " + "the cache evicted keys under memory pressure " * 5,
                    status="corroborated" if f < 2 else "hypothesis",
                    runbook_id=f"RB-{rng.randrange(40)}",
                )
            if n % 2 == 0:
                memory.incidents.close(opened.id, resolution="fixed", time_to_mitigate_s=600)
        if outcomes:
            memory.ledger.import_outcomes([
                {"runbook_id": f"RB-{n % 40}", "kind": "succeeded" if n % 3 else "failed",
                 "service": rng.choice(SERVICES), "at": f"2026-0{1 + n % 9}-1{n % 9}T10:00:00Z"}
                for n in range(outcomes)
            ])  # fmt: skip
        entries = memory.entries(include_inactive=True)
        memory.recall(TOPIC, 5)
        quiet, written, views, queues = [], [], [], []
        for n in range(40):
            started = time.perf_counter()
            memory.recall(f"{TOPIC} {n}", 5)
            quiet.append(time.perf_counter() - started)
            memory.incidents.add_finding(f"INC-{n}", f"more {n}", status="hypothesis")
            started = time.perf_counter()
            memory.recall(f"{TOPIC} {n}", 5)
            written.append(time.perf_counter() - started)
        after_outcome, after_service = [], []
        for n in range(40 if outcomes else 0):
            memory.ledger.record(f"RB-{n % 40}", "succeeded", service=SERVICES[n % 30], comment=f"bench {n}")
            started = time.perf_counter()
            memory.recall(f"{TOPIC} {n}", 5)
            after_outcome.append(time.perf_counter() - started)
        for n in range(40 if services else 0):
            memory.catalog.put([Service(name=f"svc-{n}", depends_on=[f"svc-{(n + 1) % services}"])], actor="bench")
            started = time.perf_counter()
            memory.recall(f"{TOPIC} {n}", 5)
            after_service.append(time.perf_counter() - started)
        for _ in range(15):
            started = time.perf_counter()
            analytics.build(memory, entries)
            views.append(time.perf_counter() - started)
            started = time.perf_counter()
            triage.queue(memory)
            queues.append(time.perf_counter() - started)

    def ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 2)

    return {"recall_ms": ms(quiet), "recall_after_incident_write_ms": ms(written),
            "recall_after_outcome_write_ms": ms(after_outcome) if after_outcome else None,
            "recall_after_service_write_ms": ms(after_service) if after_service else None,
            "analytics_ms": ms(views), "queue_ms": ms(queues)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="the src directory of the tree to compare with")
    parser.add_argument("--incidents", type=int, default=5000)
    parser.add_argument("--services", type=int, default=30, help="services in the catalog (0: none)")
    parser.add_argument("--outcomes", type=int, default=0, help="outcomes in the ledger (0: none)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a round in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.incidents, args.services, args.outcomes)))
        return
    options = ["--incidents", str(args.incidents), "--services", str(args.services), "--outcomes", str(args.outcomes)]
    shown = {"incidents": args.incidents, "services": args.services, "outcomes": args.outcomes}
    alternate(__file__, options, args.before, args.rounds, shown)


if __name__ == "__main__":
    main()
