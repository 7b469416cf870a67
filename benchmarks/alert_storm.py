"""One organization's alert storm against another organization's single alerts, on a real `grandbo serve` on
loopback: does the storm slow the quiet org, and how long does the storm's backlog take to drain once it stops?

    PYTHONPATH=src python benchmarks/alert_storm.py [--storm-threads 4] [--storm-status firing]
        [--storm-alerts 500] [--seconds 30] [--alone-seconds 10] [--memories 300] [--drain-limit 300] [--gap 0.1]
        [--rate-limit 0] [--home DIR]

`storm` sends Alertmanager deliveries of 500 firing alerts (new fingerprints each time, as a storm's are) from
`--storm-threads` threads in a loop for `--seconds`, answered 202 (stored, triaged after the answer) or refused
(429/503 with Retry-After, which this sender does not honour: it sends the next one at once). `quiet` sends one
single-alert delivery (triaged before its answer) every `--gap` seconds, first alone for `--alone-seconds`, then
during the storm, then while the storm's backlog drains (`quiet_in_drain`: the storm's background triage alone,
without its requests); its latency is the whole request, client side. Once the storm stops, the drain is the time
until none of `storm`'s alerts is left untriaged (its `alert.triage` pending work, read from the SQLite file),
bounded by `--drain-limit` (`drain_s` is null past it). The server runs without the per-key rate limit by
default (a storm's fairness must not rest on it; `--rate-limit -1`: the server's default, 50 a second) and with
the deterministic embedding provider (the queueing is measured, not a model); the storm sends from a process of
its own. Every request goes to 127.0.0.1; counts and time are bounded. Prints one JSON line.

The code measured is the one on PYTHONPATH: an A/B is two runs with two trees' `src`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from grandbo.config import Settings
from grandbo.eval.bench import seeded_org
from grandbo.eval.metrics import percentile
from grandbo.eval.serve_bench import _cpu_seconds, _free_port, _wait_ready, stop_servers
from grandbo.service import Grandbo

STORM_ALERTS = 500  # Alertmanager's largest group (`ingest.adapters.MAX_ALERTS`)
MAX_DELIVERIES = 20_000  # a hard bound on the storm's requests, whatever --seconds says


def _delivery(prefix: str, count: int, rng: random.Random, status: str = "firing") -> bytes:
    services = ["redis-sessions", "checkout-api", "payments-db", "auth-service", "search-indexer"]
    alerts = []
    for n in range(count):
        service = services[n % len(services)]
        alerts.append({
            "status": status,
            "labels": {"alertname": f"HighErrorRate{n % 7}", "service": service, "severity": "critical",
                       "instance": f"{service}-{n}"},
            "annotations": {"summary": f"{service} error rate above 5% for 5m, shard {n % 13}"},
            "startsAt": "2026-11-30T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example:9090/graph",
            "fingerprint": f"{prefix}{rng.getrandbits(48):012x}{n:04x}",
        })  # fmt: skip
    return json.dumps({
        "version": "4", "groupKey": "{}:{alertname=\"HighErrorRate\"}", "truncatedAlerts": 0, "status": status,
        "receiver": "grandbo", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093", "alerts": alerts,
    }).encode()  # fmt: skip


def _pending(db: Path, org: str) -> int:
    """The org's alert triages not done yet (recorded with the delivery, deleted when done)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pending_work WHERE org_id = ? AND kind = 'alert.triage'", (org,)
        ).fetchone()
    return int(row[0])


class _Quiet(threading.Thread):
    """One single-alert delivery every `gap` seconds until stopped; each request's latency, in ms."""

    def __init__(self, url: str, key: str, gap: float) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.gap = url, key, gap
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.stop = threading.Event()
        self._rng = random.Random(11)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=60) as client:
            while not self.stop.is_set() and len(self.latencies) < MAX_DELIVERIES:
                body = _delivery("q", 1, self._rng)
                started = time.perf_counter()
                answer = client.post("/v1/webhooks/alertmanager", content=body)
                self.latencies.append((time.perf_counter() - started) * 1000)
                self.statuses[answer.status_code] = self.statuses.get(answer.status_code, 0) + 1
                self.stop.wait(self.gap)


def _storm(
    url: str, key: str, threads: int, seconds: float, status: str = "firing", alerts: int = STORM_ALERTS
) -> dict[str, Any]:
    """`threads` senders of deliveries of `alerts` alerts (their `status`) for `seconds`: the answers' counts, and
    the alerts accepted.
    Run in a process of its own (`run`), so that making and sending its bodies takes nothing from the quiet
    org's client; each body is one template with a new token in its fingerprints (a bytes replace)."""
    statuses: dict[int, int] = {}
    retry_after: list[float] = []
    lock = threading.Lock()
    until = time.monotonic() + seconds
    sent = [0]
    template = _delivery("s", alerts, random.Random(0), status)

    def send(number: int) -> None:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
            while time.monotonic() < until:
                with lock:
                    if sent[0] >= MAX_DELIVERIES:
                        return
                    sent[0] += 1
                    token = f"s{sent[0]:011x}".encode()
                body = template.replace(b'"fingerprint": "s', b'"fingerprint": "' + token)
                answer = client.post("/v1/webhooks/alertmanager", content=body)
                with lock:
                    statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                    if "retry-after" in answer.headers:
                        retry_after.append(float(answer.headers["retry-after"]))

    senders = [threading.Thread(target=send, args=(n,), daemon=True) for n in range(threads)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    return {"statuses": statuses, "alerts_accepted": statuses.get(202, 0) * alerts, "body_bytes": len(template),
            "retry_after_p50_s": percentile(retry_after, 50) if retry_after else None}  # fmt: skip


def _start(settings: Settings, port: int, rate_limit: float | None) -> subprocess.Popen[bytes]:
    """`grandbo serve` on loopback over the store of `settings`, with GRANDBO_RATE_LIMIT_PER_KEY `rate_limit`
    (None: the server's own default)."""
    env = {**os.environ, "GRANDBO_HOME": str(settings.home)}
    env.pop("GRANDBO_DATABASE_URL", None)
    env.pop("GRANDBO_RATE_LIMIT_PER_KEY", None)
    if rate_limit is not None:
        env["GRANDBO_RATE_LIMIT_PER_KEY"] = str(rate_limit)
    command = [sys.executable, "-m", "grandbo", "serve", "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _summary(latencies: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(latencies, 50), 1), "p95_ms": round(percentile(latencies, 95), 1),
            "n": len(latencies)}  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(args.home or tempfile.mkdtemp(prefix="grandbo-storm-"))
    settings = Settings(home=home)
    keys = {}
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        for number, org in enumerate(("storm", "quiet")):
            memory = seeded_org(grandbo, random.Random(number), args.memories, org)
            keys[org] = memory.keys.create("write", name="bench")[1]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = _start(settings, port, args.rate_limit)
    load_before = os.getloadavg()
    try:
        _wait_ready(url, server)
        quiet = _Quiet(url, keys["quiet"], args.gap)
        quiet.start()
        time.sleep(args.alone_seconds)
        alone = len(quiet.latencies)
        cpu = _cpu_seconds(server.pid) or 0.0
        started = time.monotonic()
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as storming:
            storm = storming.submit(
                _storm, url, keys["storm"], args.storm_threads, args.seconds, args.storm_status, args.storm_alerts
            ).result()
        storm["lasted_s"] = round(time.monotonic() - started, 1)  # to its last answer: a slow one ends it late
        stopped, during = time.monotonic(), len(quiet.latencies)
        db = home / "grandbo.db"
        backlog = _pending(db, "storm")
        drain: float | None = None
        while time.monotonic() - stopped < args.drain_limit:
            if _pending(db, "storm") == 0:
                drain = time.monotonic() - stopped
                break
            time.sleep(0.5)
        quiet.stop.set()
        quiet.join(120)
        cpu = (_cpu_seconds(server.pid) or 0.0) - cpu
    finally:
        stop_servers([server])
    return {
        "benchmark": "alert_storm",
        "storm_threads": args.storm_threads,
        "storm_status": args.storm_status,
        "storm_alerts": args.storm_alerts,
        "rate_limit_per_key": args.rate_limit,
        "seconds": args.seconds,
        "quiet_alone": _summary(quiet.latencies[:alone]),
        "quiet_in_storm": _summary(quiet.latencies[alone:during]),
        "quiet_in_drain": _summary(quiet.latencies[during:]),
        "quiet_statuses": quiet.statuses,
        "storm": storm,
        "storm_backlog_at_stop": backlog,
        "drain_s": None if drain is None else round(drain, 1),
        "server_cpu_s": round(cpu, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storm-threads", type=int, default=4)
    parser.add_argument(
        "--storm-status",
        choices=("firing", "resolved"),
        default="firing",
        help="the storm's alerts: new firing ones (triaged; refused past the org's backlog) or new resolved ones "
        "(stored, never triaged: no backlog refuses them, each delivery is 500 documents written)",
    )
    parser.add_argument("--storm-alerts", type=int, default=STORM_ALERTS, help="alerts in each storm delivery")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--alone-seconds", type=float, default=10.0)
    parser.add_argument("--memories", type=int, default=300, help="generated memories of each org")
    parser.add_argument("--drain-limit", type=float, default=300.0)
    parser.add_argument("--gap", type=float, default=0.1, help="seconds between the quiet org's deliveries")
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=0.0,
        help="GRANDBO_RATE_LIMIT_PER_KEY of the server (0: off, the worst case; -1: its default)",
    )
    parser.add_argument("--home", default=None, help="a fresh folder for the store (a temporary one by default)")
    args = parser.parse_args()
    args.rate_limit = None if args.rate_limit < 0 else args.rate_limit
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
