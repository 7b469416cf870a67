"""The console's analytics page, viewed again and again by a read key: what each view costs once the org holds
many entries, outcomes and incidents (probe 19 F3: 20,000 entries, 100,000 outcomes, 500 incidents).

An embedded store (deterministic embeddings) is filled, a read key signs in, and `/ui/analytics` is asked for
in process (Starlette's test client): the first view, then the warm views of nothing changed, then a view right
after each of a few outcome writes (the page must show them). Prints one JSON line of medians (ms).

With `--served`, a real `grandbo serve --no-worker` on loopback over a store seeded once at `--home` (and reused:
150,000 entries take minutes to write) with the large org and a `victim` of 2,000 entries: the victim recalls every
50 ms for `--seconds` alone, then while a read key of the large org signs into the console and views its analytics
for the first time in the process (probe 20a: 26-57 s at 228,000 entries, the other orgs' requests on the process
waiting). Prints the sign-in's and the views' times and the victim's p50 / p95 / max alone and meanwhile. Run it
with another tree's `src` on PYTHONPATH to measure that tree's server (a copy of the store each: a newer tree
migrates it).

    python benchmarks/analytics_view.py [--entries 20000] [--outcomes 100000] [--incidents 500] [--views 15]
    python benchmarks/analytics_view.py --served --entries 150000 --outcomes 20000 [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
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


# ------------------------------------------------------------------------------------------------ --served
VICTIM_TOPICS = ["redis replica lag after a failover on the checkout service", "disk full on the kafka brokers",
                 "payments-gateway ERR_CONN_RESET on deploy", "certificate expired on the tls terminator"]  # fmt: skip


def seeded_home(home: Path, args: argparse.Namespace) -> dict[str, str]:
    """The served run's store at `home` (seeded once, then reused: 150,000 entries take minutes to write): the
    large org `bench` and a `victim` of 2,000 entries; their keys."""
    keys_file = home / "analytics_view_keys.json"
    if keys_file.exists():
        keys: dict[str, str] = json.loads(keys_file.read_text())
        return keys
    home.mkdir(parents=True, exist_ok=True)
    with Grandbo.init(Settings(home=home, database_url=None), embedding="deterministic") as grandbo:
        rng = random.Random(21)
        victim = grandbo.org("victim", create=True)
        victim.remember_many([synthetic_entry(rng, n) for n in range(2_000)], actor="bench")
        keys = {"bench": seed(grandbo, args.entries, args.outcomes, args.incidents, rng),
                "victim": victim.keys.create("read", name="victim")[1]}  # fmt: skip
    keys_file.write_text(json.dumps(keys))
    return keys


def _percentiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(times) or [0.0]
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(times), "p50_ms": round(at(0.5), 1), "p95_ms": round(at(0.95), 1), "max_ms": round(ordered[-1], 1)}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def served(args: argparse.Namespace) -> dict[str, object]:
    """A real `grandbo serve` on loopback over the seeded store: the victim org's recall alone, then while a read key
    of the large org signs into the console and views its analytics for the first time in the process."""
    home = Path(args.home)
    keys = seeded_home(home, args)
    env = {**os.environ, "GRANDBO_HOME": str(home), "GRANDBO_RATE_LIMIT_PER_KEY": "0",
           "GRANDBO_RATE_LIMIT_PER_ORG": "0", "GRANDBO_EMBEDDING_PROVIDER": "deterministic"}  # fmt: skip
    port = args.port or _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "grandbo", "serve", "--no-worker", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(600):
            assert server.poll() is None, "the server did not start (is the port taken?)"
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        victim = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {keys['victim']}"}, timeout=60)

        def recalls(until: Callable[[], bool]) -> list[float]:
            times: list[float] = []
            while not until() and len(times) < 20 * args.limit:
                started = time.perf_counter()
                response = victim.post("/v1/recall", json={"topic": VICTIM_TOPICS[len(times) % 4], "k": 5})
                assert response.status_code == 200, response.text[:300]
                times.append((time.perf_counter() - started) * 1000)
                time.sleep(max(0.0, 0.05 - (time.perf_counter() - started)))
            return times

        for _ in range(5):
            victim.post("/v1/recall", json={"topic": VICTIM_TOPICS[0], "k": 5})
        ends = time.monotonic() + args.seconds
        alone = recalls(lambda: time.monotonic() > ends)
        viewed: dict[str, float] = {}

        def view() -> None:
            console = httpx.Client(base_url=url, timeout=args.limit)
            token = re.search(r'name="csrf" value="([^"]+)"', console.get("/ui/sign-in").text)
            assert token is not None
            started = time.perf_counter()
            console.post("/ui/sign-in", data={"key": keys["bench"], "csrf": token.group(1)})
            viewed["sign_in_ms"] = (time.perf_counter() - started) * 1000
            started = time.perf_counter()
            response = console.get("/ui/analytics")
            assert response.status_code == 200, response.text[:300]
            viewed["first_view_ms"] = (time.perf_counter() - started) * 1000
            time.sleep(1.0)  # what the sign-in left running, done or not, is measured with the view
            started = time.perf_counter()
            console.get("/ui/analytics")
            viewed["second_view_ms"] = (time.perf_counter() - started) * 1000

        viewer = threading.Thread(target=view)
        viewer.start()
        during = recalls(lambda: not viewer.is_alive())
        viewer.join()
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    return {"entries": args.entries, "outcomes": args.outcomes, "incidents": args.incidents,
            **{key: round(value, 1) for key, value in viewed.items()},
            "victim_alone": _percentiles(alone), "victim_during": _percentiles(during)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--outcomes", type=int, default=100_000)
    parser.add_argument("--incidents", type=int, default=500)
    parser.add_argument("--views", type=int, default=15)
    parser.add_argument("--served", action="store_true", help="a real server, and another org's recall meanwhile")
    parser.add_argument("--home", default="/tmp/analytics-view-home", help="--served: the store (seeded once, kept)")
    parser.add_argument("--port", type=int, default=0, help="--served: the server's (0: a free one)")
    parser.add_argument("--seconds", type=float, default=8.0, help="--served: the victim's recall alone")
    parser.add_argument("--limit", type=float, default=180.0, help="--served: the most a view is waited for (s)")
    args = parser.parse_args()
    if args.served:
        print(json.dumps(served(args)))
        return
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
