"""An alert storm from a large organization against a small one's recalls, on a real `grandbo serve` on loopback
(SQLite, deterministic embeddings): what a 500-alert delivery's acceptance costs, how fast the accepted backlog
drains at the org's size, and what the small org's recall latency is during the storm and the drain against alone.

    PYTHONPATH=src python benchmarks/storm_large_org.py [--entries 60000] [--store DIR] [--storm-threads 4]
        [--seconds 30] [--alone-seconds 10] [--drain-limit 120] [--gap 0.05]

`storm` (`--entries` generated memories and the generated catalog) sends Alertmanager deliveries of 500 new firing
alerts from `--storm-threads` threads for `--seconds`, from a process of its own, never honouring Retry-After; each
202's time is its acceptance (client side). `quiet` (2,000 memories) asks `POST /v1/recall` (k=5) every `--gap`
seconds: alone for `--alone-seconds`, during the storm, then during the drain. The drain is read from the SQLite
file (the storm's `alert.triage` pending work) every second after the storm stopped, for at most `--drain-limit`
seconds; its rate is the alerts triaged over that time. `--store DIR` copies a store this script seeded before
(`--seed-only DIR`) instead of seeding one (about a minute for 60,000 memories). Prints one JSON line.

The code measured is the one on PYTHONPATH: an A/B is two runs with two trees' `src`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from alert_storm import _delivery, _pending, _start, _summary

from grandbo.config import Settings
from grandbo.eval.bench import seeded_org
from grandbo.eval.metrics import percentile
from grandbo.eval.serve_bench import _cpu_seconds, _free_port, _wait_ready, stop_servers
from grandbo.service import Grandbo

MAX_DELIVERIES = 2_000  # a hard bound on the storm's requests, whatever --seconds says
TOPICS = [
    "redis connection resets on auth-service during a key eviction spike, p99 above one second",
    "checkout-api error rate above five percent after a deploy, payments timing out",
    "payments-db replication lag grows while the primary's disk fills up",
    "search-indexer consumer falls behind on the kafka topic, queue depth rising",
]


def seed(home: Path, entries: int) -> None:
    """The two orgs and a write key each (in `home`/<org>.key)."""
    with Grandbo.init(Settings(home=home), embedding="deterministic") as grandbo:
        for number, (org, count) in enumerate((("storm", entries), ("quiet", 2_000))):
            memory = seeded_org(grandbo, random.Random(number), count, org)
            (home / f"{org}.key").write_text(memory.keys.create("write", name="bench")[1])


class _Recalls(threading.Thread):
    """One recall every `gap` seconds until stopped; each request's latency (ms) and when it started."""

    def __init__(self, url: str, key: str, gap: float) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.gap = url, key, gap
        self.samples: list[tuple[float, float]] = []
        self.statuses: dict[int, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=60) as client:
            while not self.stop.is_set():
                topic = TOPICS[len(self.samples) % len(TOPICS)]
                started = time.monotonic()
                answer = client.post("/v1/recall", json={"topic": topic, "k": 5})
                self.samples.append((started, (time.monotonic() - started) * 1000))
                self.statuses[answer.status_code] = self.statuses.get(answer.status_code, 0) + 1
                self.stop.wait(self.gap)

    def between(self, start: float, end: float) -> list[float]:
        return [ms for at, ms in self.samples if start <= at < end]


def _storm(url: str, key: str, threads: int, seconds: float) -> dict[str, Any]:
    """`threads` senders of 500-alert deliveries for `seconds`: the answers' counts and each 202's time (s)."""
    statuses: dict[int, int] = {}
    accepted: list[float] = []
    lock = threading.Lock()
    until = time.monotonic() + seconds
    sent = [0]
    template = _delivery("s", 500, random.Random(0))

    def send() -> None:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        with httpx.Client(base_url=url, headers=headers, timeout=300) as client:
            while time.monotonic() < until:
                with lock:
                    if sent[0] >= MAX_DELIVERIES:
                        return
                    sent[0] += 1
                    token = f"s{sent[0]:011x}".encode()
                body = template.replace(b'"fingerprint": "s', b'"fingerprint": "' + token)
                started = time.monotonic()
                answer = client.post("/v1/webhooks/alertmanager", content=body)
                took = time.monotonic() - started
                with lock:
                    statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                    if answer.status_code == 202:
                        accepted.append(took)

    senders = [threading.Thread(target=send, daemon=True) for _ in range(threads)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    return {"statuses": statuses, "alerts_accepted": len(accepted) * 500,
            "accept_s": sorted(round(s, 2) for s in accepted)}  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="grandbo-storm-large-"))
    if args.store:
        shutil.copytree(args.store, home, dirs_exist_ok=True)
    else:
        seed(home, args.entries)
    keys = {org: (home / f"{org}.key").read_text() for org in ("storm", "quiet")}
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = _start(Settings(home=home), port, 0.0)
    db = home / "grandbo.db"
    load_before = os.getloadavg()
    try:
        _wait_ready(url, server)
        with httpx.Client(base_url=url, timeout=120) as client:  # each org's first recall loads its index
            for org in ("storm", "quiet"):
                client.post("/v1/recall", json={"topic": TOPICS[0], "k": 5},
                            headers={"Authorization": f"Bearer {keys[org]}"})  # fmt: skip
        quiet = _Recalls(url, keys["quiet"], args.gap)
        quiet.start()
        time.sleep(args.alone_seconds)
        cpu = _cpu_seconds(server.pid) or 0.0
        storm_start = time.monotonic()
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as storming:
            storm = storming.submit(_storm, url, keys["storm"], args.storm_threads, args.seconds).result()
        storm_end = time.monotonic()
        backlog = _pending(db, "storm")
        left, drained_at = backlog, None
        while time.monotonic() - storm_end < args.drain_limit:
            time.sleep(1)
            left = _pending(db, "storm")
            if left == 0:
                drained_at = time.monotonic()
                break
        drain_end = time.monotonic()
        quiet.stop.set()
        quiet.join(120)
        cpu = (_cpu_seconds(server.pid) or 0.0) - cpu
    finally:
        stop_servers([server])
        shutil.rmtree(home, ignore_errors=True)
    accept = storm.pop("accept_s")
    drain_s = drain_end - storm_end
    return {
        "benchmark": "storm_large_org",
        "entries": args.entries,
        "storm_threads": args.storm_threads,
        "seconds": args.seconds,
        "storm": storm,
        "accept_p50_s": round(percentile(accept, 50), 2) if accept else None,
        "accept_max_s": max(accept) if accept else None,
        "storm_lasted_s": round(storm_end - storm_start, 1),
        "backlog_at_stop": backlog,
        "left_at_drain_end": left,
        "drain_s": round(drain_s, 1) if drained_at else None,
        "drain_alerts_per_s": round((backlog - left) / drain_s, 1) if drain_s else None,
        "quiet_alone": _summary(quiet.between(0, storm_start)),
        "quiet_in_storm": _summary(quiet.between(storm_start, storm_end)),
        "quiet_in_drain": _summary(quiet.between(storm_end, drain_end)),
        "quiet_statuses": quiet.statuses,
        "server_cpu_s": round(cpu, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=60_000, help="generated memories of the storm's org")
    parser.add_argument("--store", default=None, help="a store seeded by --seed-only, copied for the run")
    parser.add_argument("--seed-only", default=None, help="seed a store in this folder and stop")
    parser.add_argument("--storm-threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--alone-seconds", type=float, default=10.0)
    parser.add_argument("--drain-limit", type=float, default=120.0)
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between the quiet org's recalls")
    args = parser.parse_args()
    if args.seed_only:
        seed(Path(args.seed_only), args.entries)
        return
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
