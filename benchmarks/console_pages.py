"""Server render time of each console page at 10,000 entries (target: under 300 ms each).

An embedded store (deterministic embeddings, so no model time) is filled with generated incident memories
spread over three years, 40 runbooks with 2,000 ledger outcomes, 30 recalled alerts, 20 incidents and a few
learned notes; each page is then asked for in process (FastAPI's ASGI app through Starlette's test client:
routing, the page's reads and recall, template rendering; no network), untimed warm-up first. Medians and
p95 over the timed requests; the REST recall of the same alert sentence (`POST /v1/recall`) is the baseline
measured in the same run, so the triage and search pages read as a multiple of the recall they contain.
The analytics read no entry: the store counts what their charts need (`OrgMemory.figures`), and the last row
times that count on its own; the memory listing reads a page from the store.

    python benchmarks/console_pages.py [--entries 10000] [--requests 25]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from grandbo.api.app import create_app
from grandbo.config import Settings
from grandbo.eval.bench import SERVICES, synthetic_catalog, synthetic_entry, synthetic_query
from grandbo.ingest.alert import Alert
from grandbo.ingest.flow import recall_for
from grandbo.service import Grandbo

RUNBOOKS = [f"RB-GEN-{n:02d}" for n in range(40)]


def seed(grandbo: Grandbo, entries: int, rng: random.Random) -> tuple[str, str, str]:
    memory = grandbo.org("bench", create=True)
    memory.catalog.put(synthetic_catalog(rng))
    start = datetime(2023, 1, 1, tzinfo=UTC)
    batch = []
    for n in range(entries):
        entry = synthetic_entry(rng, n).model_dump(exclude_none=True)
        entry["occurred_at"] = start + timedelta(days=rng.uniform(0, 3 * 365))
        if entry["kind"] == "finding":
            entry["meta"] = {"runbook_id": rng.choice(RUNBOOKS), "incident_id": f"INC-{n // 3:06d}"}
        batch.append(entry)
        if len(batch) == 1000:
            memory.remember_many(batch, actor="bench")
            batch = []
    if batch:
        memory.remember_many(batch, actor="bench")
    for runbook in RUNBOOKS:
        memory.runbooks.add(
            runbook, f"Runbook {runbook}", ["check", "mitigate", "verify"], services=rng.sample(SERVICES, 2)
        )
    outcomes = [
        {
            "runbook_id": rng.choice(RUNBOOKS),
            "kind": rng.choice(["succeeded", "succeeded", "failed"]),
            "service": rng.choice(SERVICES),
            "time_to_mitigate_s": rng.uniform(300, 7200),
            "at": (start + timedelta(days=rng.uniform(0, 3 * 365))).isoformat(),
        }
        for _ in range(2000)
    ]
    memory.ledger.import_outcomes(outcomes, prefix="bench")
    for n in range(20):
        memory.incidents.open(
            synthetic_query(rng), services=[rng.choice(SERVICES)], severity="sev2", incident_id=f"INC-BENCH-{n}"
        )
    alert_id = ""
    for n in range(30):
        alert = Alert(
            source="alertmanager",
            event_id=f"bench-{n}",
            fingerprint=f"fp-{n}",
            service=rng.choice(SERVICES),
            severity="sev2",
            summary=synthetic_query(rng),
        )
        ((stored, _),) = memory.alerts.receive([alert])
        recall_for(memory, stored)
        alert_id = stored.id
    learning = memory.learning_with(None)
    for n in range(6):
        learning.record_edit(
            f"We are very sorry, maybe service {n} is down.",
            f"Service {n} is down.",
            content_type="status-update",
            author="bench",
        )
    _, key = memory.keys.create("admin", name="bench")
    entry_id = memory.entries()[entries // 2].id
    return key, alert_id, entry_id


def timed(client: TestClient, path: str, requests: int, warmup: int = 3, **post: object) -> dict[str, float]:
    def once() -> float:
        started = time.perf_counter()
        response = client.post(path, **post) if post else client.get(path)  # type: ignore[arg-type]
        elapsed = (time.perf_counter() - started) * 1000
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
        return elapsed

    first = once()  # the first ask of the process (analytics: the ledger's and incidents' first read)
    for _ in range(warmup - 1):
        once()
    samples = sorted(once() for _ in range(requests))
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(samples[int(0.95 * (len(samples) - 1))], 2),
        "first_ms": round(first, 2),
    }


def _seconds(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=25)
    args = parser.parse_args()
    rng = random.Random(13)
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home), database_url=None)
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            key, alert_id, entry_id = seed(grandbo, args.entries, rng)
            client = TestClient(create_app(grandbo, mcp=False), base_url="http://127.0.0.1")
            token = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/sign-in").text)
            assert token is not None
            client.post("/ui/sign-in", data={"key": key, "csrf": token.group(1)})
            query = grandbo.org("bench").alerts.get(alert_id).query
            pages = {
                "sign-in": "/ui/sign-in",
                "triage (alert selected)": f"/ui/triage?alert={alert_id}",
                "triage (incident selected)": "/ui/triage?incident=INC-BENCH-0",
                "memory (newest 50 of all)": "/ui/memory",
                "memory (search, 50 explained hits)": "/ui/memory?q=" + query.replace(" ", "+"),
                "entry (history, embedding, stats)": f"/ui/memory/{entry_id}",
                "analytics (5 charts)": "/ui/analytics",
                "profile and notes": "/ui/profile",
            }
            results = {"entries": args.entries, "requests": args.requests, "target_ms": 300}
            baseline = timed(
                client,
                "/v1/recall",
                args.requests,
                json={"topic": query, "k": 8},
                headers={"Authorization": f"Bearer {key}"},
            )
            results["baseline: POST /v1/recall k=8"] = baseline
            for name, path in pages.items():
                figures = timed(client, path, args.requests)
                figures["x_recall"] = round(figures["p50_ms"] / baseline["p50_ms"], 2)
                results[name] = figures
            memory = grandbo.org("bench")
            linked = [incident.id for incident in memory.incidents.summaries()]
            reads = sorted(_seconds(lambda: memory.figures(linked)) * 1000 for _ in range(5))
            results["the analytics' entry figures, counted by the store"] = {
                "p50_ms": round(statistics.median(reads), 2),
                "p95_ms": round(reads[-1], 2),
                "first_ms": round(reads[0], 2),
            }
    print(json.dumps(results))
    print(f"\n{'page':<58} {'p50 ms':>8} {'p95 ms':>8} {'x recall':>9} {'first ms':>9}")
    for name, value in results.items():
        if isinstance(value, dict):
            print(
                f"{name:<58} {value['p50_ms']:>8.2f} {value['p95_ms']:>8.2f} {value.get('x_recall', 1.0):>9.2f} "
                f"{value['first_ms']:>9.2f}"
            )


if __name__ == "__main__":
    main()
