"""What a large ledger costs the requests that read it (probe 19, F4 and F5): `GET /v1/runbooks` at limit=20 and 500
and MCP's get_runbook, and the first recall after a thumbs-up against a warm recall, in one process on a fresh
embedded store; with `--before` (a src directory, e.g. an older tree's exported with `git archive`), this tree and
that one alternated round by round, each round a fresh process.

    PYTHONPATH=src python benchmarks/runbook_ledger_cost.py [--runbooks 20] [--outcomes 5000] [--before DIR]

The org holds 1,000 memories and R runbooks of N outcomes each (succeeded or failed on one of 300 services, with a
time to mitigate; 100,000 at the defaults). Deterministic embeddings, so no model time. Medians: 5 listings of each
size and 9 get_runbook calls after one of each (the first ask builds the org's snapshot), 15 recalls each right after
a thumbs-up (`Ledger.record`, as `POST /v1/runbooks/{id}/feedback` does) and 15 with nothing written before them.
One JSON line a round.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ab import alternate

TOPIC = "restart redis-sessions pods runbook eviction"


def median_ms(act: Callable[[], object], times: int) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        act()
        samples.append(time.perf_counter() - started)
    return round(statistics.median(samples) * 1000, 2)


def measure(runbooks: int, outcomes: int) -> dict[str, float]:
    """One round in this process (the tree on its path)."""
    from fastapi.testclient import TestClient

    from grandbo.api.app import create_app
    from grandbo.config import Settings
    from grandbo.mcp import tools
    from grandbo.service import Grandbo

    rng = random.Random(19)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    with (
        tempfile.TemporaryDirectory() as home,
        Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as grandbo,
    ):
        memory = grandbo.org("bench", create=True)
        memory.remember_many([{"id": f"E{n}", "title": f"entry {n}: redis-sessions pods evicted on svc-{n % 300}",
                               "body": "replica lag " * 30} for n in range(1000)])  # fmt: skip
        for r in range(runbooks):
            memory.runbooks.add(f"RB-{r}", f"Runbook {r} restart redis-sessions pods", ["restart redis", "scale up"])
        memory.ledger.import_outcomes([
            {"runbook_id": f"RB-{n % runbooks}", "kind": rng.choice(["succeeded", "failed"]), "incident_id": f"INC-{n}",
             "service": f"svc-{n % 300}", "time_to_mitigate_s": rng.randint(60, 9000), "comment": "x" * 50,
             "at": (start + timedelta(seconds=n * 60)).isoformat(), "actor": "bench"}
            for n in range(runbooks * outcomes)
        ], prefix="bench")  # fmt: skip
        _, key = memory.keys.create("read", name="bench")
        figures: dict[str, float] = {}
        with TestClient(create_app(grandbo, mcp=False, console=False)) as client:
            client.headers["Authorization"] = f"Bearer {key}"
            for limit in (20, 500):

                def listing(limit: int = limit) -> None:
                    response = client.get("/v1/runbooks", params={"limit": limit})
                    assert response.status_code == 200, response.text
                    assert len(response.json()["items"]) == min(limit, runbooks)

                listing()
                figures[f"list_limit{limit}_ms"] = median_ms(listing, 5)
        tools.get_runbook(memory, "RB-1")
        figures["get_runbook_ms"] = median_ms(lambda: tools.get_runbook(memory, "RB-1"), 9)
        memory.recall(TOPIC, 5)
        figures["recall_warm_ms"] = median_ms(lambda: memory.recall(TOPIC, 5), 15)
        after = []
        for n in range(15):
            memory.ledger.record(f"RB-{n % runbooks}", "rated", rating=1, actor="api")
            started = time.perf_counter()
            memory.recall(TOPIC, 5)
            after.append(time.perf_counter() - started)
        figures["recall_after_thumbs_up_ms"] = round(statistics.median(after) * 1000, 2)
        figures["after_vs_warm"] = round(figures["recall_after_thumbs_up_ms"] / figures["recall_warm_ms"], 2)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--before", type=Path, help="the src directory of the tree to compare with")
    parser.add_argument("--runbooks", type=int, default=20)
    parser.add_argument("--outcomes", type=int, default=5000, help="outcomes of each runbook")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a round in this process
    args = parser.parse_args()
    shown = {"runbooks": args.runbooks, "outcomes": args.runbooks * args.outcomes}
    if args.one or args.before is None:  # the runner (`ab.alternate`) adds what it shows itself
        print(json.dumps({**({} if args.one else shown), **measure(args.runbooks, args.outcomes)}))
        return
    options = ["--runbooks", str(args.runbooks), "--outcomes", str(args.outcomes)]
    alternate(__file__, options, args.before, args.rounds, shown)


if __name__ == "__main__":
    main()
