"""The console's analytics page, viewed again and again by a read key: what each view costs once the org holds
many entries, outcomes and incidents (probe 19 F3: 20,000 entries, 100,000 outcomes, 500 incidents).

An embedded store (deterministic embeddings) is filled, a read key signs in, and `/ui/analytics` is asked for
in process (Starlette's test client): the first view, then the warm views of nothing changed, then a view right
after each of a few outcome writes (the page must show them). Prints one JSON line of medians (ms).

    python benchmarks/analytics_view.py [--entries 20000] [--outcomes 100000] [--incidents 500] [--views 15]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from grandbo.api.app import create_app
from grandbo.config import Settings
from grandbo.eval.bench import SERVICES, synthetic_entry
from grandbo.service import Grandbo

RUNBOOKS = [f"RB-{n:02d}" for n in range(20)]


def seed(grandbo: Grandbo, entries: int, outcomes: int, incidents: int, rng: random.Random) -> str:
    memory = grandbo.org("bench", create=True)
    start = datetime(2023, 1, 1, tzinfo=UTC)
    for first in range(0, entries, 1000):
        batch = []
        for n in range(first, min(entries, first + 1000)):
            entry = synthetic_entry(rng, n).model_dump(exclude_none=True)
            entry["occurred_at"] = start + timedelta(days=rng.uniform(0, 3 * 365))
            batch.append(entry)
        memory.remember_many(batch, actor="bench")
    for runbook in RUNBOOKS:
        memory.runbooks.add(runbook, f"Runbook {runbook}", ["check", "mitigate", "verify"])
    records = [
        {"runbook_id": RUNBOOKS[n % len(RUNBOOKS)], "kind": rng.choice(["succeeded", "failed"]),
         "incident_id": f"INC-{n}", "service": f"svc-{n % 300}", "time_to_mitigate_s": rng.randint(60, 9000),
         "at": (start + timedelta(seconds=n * 60)).isoformat()}
        for n in range(outcomes)
    ]  # fmt: skip
    memory.ledger.import_outcomes(records, prefix="bulk")
    for n in range(incidents):
        memory.incidents.open(f"checkout latency incident {n}", services=[rng.choice(SERVICES)], incident_id=f"I-{n}")
    return memory.keys.create("read", name="viewer")[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--outcomes", type=int, default=100_000)
    parser.add_argument("--incidents", type=int, default=500)
    parser.add_argument("--views", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home), database_url=None)
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            key = seed(grandbo, args.entries, args.outcomes, args.incidents, random.Random(19))
            client = TestClient(create_app(grandbo, mcp=False), base_url="http://127.0.0.1")
            token = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/sign-in").text)
            assert token is not None
            client.post("/ui/sign-in", data={"key": key, "csrf": token.group(1)})

            def view() -> float:
                started = time.perf_counter()
                response = client.get("/ui/analytics")
                assert response.status_code == 200, response.text[:300]
                return (time.perf_counter() - started) * 1000

            first = view()
            warm = [view() for _ in range(args.views)]
            memory, after_write = grandbo.org("bench"), []
            for n in range(5):
                memory.ledger.record(RUNBOOKS[0], "succeeded", service="svc-1", time_to_mitigate_s=60 + n)
                after_write.append(view())
                memory.remember(synthetic_entry(random.Random(n), args.entries + n), actor="bench")
                after_write.append(view())
    print(json.dumps({
        "entries": args.entries, "outcomes": args.outcomes, "incidents": args.incidents,
        "first_view_ms": round(first, 1), "warm_view_p50_ms": round(statistics.median(warm), 1),
        "warm_view_max_ms": round(max(warm), 1), "view_after_a_write_p50_ms": round(statistics.median(after_write), 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
