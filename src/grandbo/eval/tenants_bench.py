"""`grandbo bench tenants`: many organizations behind one service, as a shared Grandbo serves them.

N orgs of E generated memories each (written in bulk with precomputed deterministic vectors: no model cost, so
the numbers are the store's and the index's), P `grandbo serve` processes on loopback over the one store, and
C clients that send each request to a random server (no stickiness). Measured in one run:

* warm: every request goes to one org, again and again (its index kept: the baseline): recalls, and one write
  in ten;
* random: the same, but every request picks a random org;
* the spread of the per-org p95 of the random phase;
* the embedding lag of a small org's new memory while another org imports (bulk, embedded by the servers'
  workers): how long until the small org has no embed job left.

Before timing, each org is recalled once on each server (untimed, reported as `prepare_s` and `prepared`): what
a running service whose requests go to any of its processes has done for every org it serves, once in each
process. (It was once on one server: the random phase then timed each server's first recall of half the orgs, an
image's load, as random-org cost: 171 of 751 random recalls in a loaded run, a tail the warm org never has.)
Bounded in count and time; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from grandbo.config import Settings
from grandbo.eval.bench import synthetic_entry, synthetic_query
from grandbo.eval.loadclient import FAILED, Connection
from grandbo.eval.metrics import percentile
from grandbo.eval.serve_bench import MAX_REQUESTS, _free_port, _wait_ready, start_server, stop_servers
from grandbo.model import entry_text
from grandbo.service import Grandbo

WRITE_SHARE = 0.1  # of each phase's requests
PER_ORG_MIN = 5  # recalls an org needs for its own p95 to count in the spread
LAG_TIMEOUT_S = 120.0
# Memories the lag phase's other org imports: 5 batches, still importing while the lag is measured. The run waits for
# the whole import (100,000, the default before, took minutes on two cores: `grandbo bench tenants` is run casually).
IMPORT_ENTRIES = 10_000


def _seed(settings: Settings, orgs: dict[str, int], progress: Callable[[str], None]) -> dict[str, str]:
    """Each org with its number of memories (and their vectors); returns a write key per org."""
    rng = random.Random(7)
    keys = {}
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        generated = [synthetic_entry(rng, number) for number in range(max(orgs.values()))]
        texts = [entry_text(e.title, e.body, e.tags, e.services) for e in generated]
        vectors: list[Any] = list(grandbo.provider().embed(texts))
        for number, (org, entries) in enumerate(orgs.items()):
            memory = grandbo.org(org, create=True)
            if entries:
                memory.remember_many(generated[:entries], actor="bench", vectors=vectors[:entries])
            keys[org] = memory.keys.create("write", name="bench")[1]
            if (number + 1) % 50 == 0:
                progress(f"seeded {number + 1}/{len(orgs)} orgs")
    return keys


class _Load:
    """C clients, each with a keep-alive connection (`loadclient`) to every server, for `seconds`."""

    def __init__(self, urls: list[str], keys: dict[str, str], clients: int) -> None:
        self.urls, self.keys, self.clients = urls, keys, clients
        self.topics = [synthetic_query(random.Random(seed)) for seed in range(500)]

    def run(self, seconds: float, pick: Callable[[random.Random], str], writes: float = 0.0) -> dict[str, Any]:
        recalls: dict[str, list[float]] = {}
        errors, written, reconnects, error_kinds = [0], [0], [0], Counter[str]()
        lock = threading.Lock()
        stop_at = time.monotonic() + seconds

        def client(number: int) -> None:
            rng = random.Random(number)
            mine: dict[str, list[float]] = {}
            failed = wrote = done = 0
            kinds: Counter[str] = Counter()  # what the failed requests got: a status, or no answer
            https = [Connection(url) for url in self.urls]
            try:
                while time.monotonic() < stop_at and done < MAX_REQUESTS // self.clients:
                    org, http = pick(rng), rng.choice(https)
                    write = rng.random() < writes
                    started = time.perf_counter()
                    try:
                        if write:
                            body = synthetic_entry(rng, 900_000 + done).model_dump(
                                mode="json", exclude_none=True, exclude={"source"}
                            )
                            status = http.post("/v1/memories", body, key=self.keys[org])
                            ok = status == 201
                        else:
                            topic = rng.choice(self.topics)
                            status = http.post("/v1/recall", {"topic": topic, "k": 5}, key=self.keys[org])
                            ok = status == 200
                        kind = f"HTTP {status}"
                    except FAILED as error:
                        ok, kind = False, type(error).__name__
                    done += 1
                    if not ok:
                        failed += 1
                        kinds[kind] += 1
                    elif write:
                        wrote += 1
                    else:
                        mine.setdefault(org, []).append((time.perf_counter() - started) * 1000)
            finally:
                for http in https:
                    http.close()
            with lock:
                reconnects[0] += sum(http.reconnects for http in https)
                for org, times in mine.items():
                    recalls.setdefault(org, []).extend(times)
                errors[0] += failed
                error_kinds.update(kinds)
                written[0] += wrote

        threads = [threading.Thread(target=client, args=(n,)) for n in range(self.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        every = [t for times in recalls.values() for t in times] or [0.0]
        per_org = [percentile(times, 95) for times in recalls.values() if len(times) >= PER_ORG_MIN]
        return {
            "recalls": sum(len(times) for times in recalls.values()),
            "writes": written[0],
            "errors": errors[0],
            "error_kinds": dict(error_kinds),
            "reconnects": reconnects[0],
            "p50_ms": round(statistics.median(every), 2),
            "p95_ms": round(percentile(every, 95), 2),
            "per_org_p95": [round(p, 2) for p in per_org],
        }


def _prepare(urls: list[str], keys: dict[str, str], names: list[str], clients: int) -> int:
    """One recall of every org on every server, C at a time; how many were answered. The servers of one org are
    taken in turn, so that no server loads its orgs while the others idle."""
    pending = iter([(org, url) for org in names for url in urls])
    lock = threading.Lock()
    topic = synthetic_query(random.Random(1))
    answered = [0]

    def client() -> None:
        https = {url: httpx.Client(base_url=url, timeout=120) for url in urls}
        try:
            while True:
                with lock:
                    org, url = next(pending, ("", ""))
                if not org:
                    return
                with contextlib.suppress(httpx.HTTPError):  # untimed; the phases after count errors
                    response = https[url].post(
                        "/v1/recall", json={"topic": topic, "k": 5}, headers={"Authorization": f"Bearer {keys[org]}"}
                    )
                    if response.status_code == 200:
                        with lock:
                            answered[0] += 1
        finally:
            for http in https.values():
                http.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answered[0]


def _embedding_lag(settings: Settings, urls: list[str], key: str, import_entries: int) -> float | None:
    """Seconds until a small org's new memory is embedded while another org imports `import_entries` memories
    (embedded by the servers' workers), or None past LAG_TIMEOUT_S."""
    started_import = threading.Event()
    rng = random.Random(3)

    def bulk_import() -> None:
        with Grandbo.open(settings, embed_here=False) as grandbo:
            memory = grandbo.org("import-big", create=True)
            for start in range(0, import_entries, 2_000):
                batch = [synthetic_entry(rng, n) for n in range(start, min(start + 2_000, import_entries))]
                memory.remember_many(batch, actor="bench")
                started_import.set()

    importer = threading.Thread(target=bulk_import)
    importer.start()
    lag: float | None = None
    try:
        started_import.wait(600)
        with httpx.Client(base_url=urls[0], timeout=30, headers={"Authorization": f"Bearer {key}"}) as http:
            entry = synthetic_entry(rng, 999_999).model_dump(mode="json", exclude_none=True, exclude={"source"})
            if http.post("/v1/memories", json=entry).status_code == 201:
                written = time.perf_counter()
                while time.perf_counter() - written < LAG_TIMEOUT_S:
                    stats = http.get("/v1/stats").json()
                    if stats["pending"] == 0 and stats["readable"] == stats["total"]:
                        lag = time.perf_counter() - written
                        break
                    time.sleep(0.05)
    finally:
        importer.join()
    return lag


def bench_tenants(
    settings: Settings,
    *,
    orgs: int = 200,
    entries: int = 2_000,
    clients: int = 16,
    seconds: float = 20.0,
    processes: int = 2,
    import_entries: int = IMPORT_ENTRIES,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Serve N orgs from P servers on loopback and measure warm and random-org recall; one flat dict."""
    with tempfile.TemporaryDirectory(prefix="grandbo-bench-tenants-") as scratch:
        run_settings = settings.model_copy(update={"home": Path(scratch)})
        names = [f"tenant-{number:05d}" for number in range(orgs)]
        started = time.perf_counter()
        keys = _seed(run_settings, {**dict.fromkeys(names, entries), "lag-small": 10}, progress)
        seed_s = time.perf_counter() - started
        ports = [_free_port() for _ in range(processes)]
        servers = [start_server(run_settings, port) for port in ports]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        try:
            for url, server in zip(urls, servers, strict=True):
                _wait_ready(url, server)
            load = _Load(urls, keys, clients)
            progress("servers ready; one recall of every org on every server (untimed)")
            started = time.perf_counter()
            prepared = _prepare(urls, keys, names, clients)
            prepare_s = time.perf_counter() - started
            progress(f"warm: {clients} clients on one org for {seconds:g} s")
            warm = load.run(seconds, lambda _: names[0], writes=WRITE_SHARE)
            progress(f"random: {clients} clients over {orgs} orgs for {seconds:g} s")
            spread = load.run(seconds, lambda rng: rng.choice(names), writes=WRITE_SHARE)
            progress(f"embedding lag of a small org while another imports {import_entries}")
            lag = _embedding_lag(run_settings, urls, keys["lag-small"], import_entries)
        finally:
            stop_servers(servers)
    spread_orgs = spread.pop("per_org_p95")
    per_org = spread_orgs or [0.0]
    warm.pop("per_org_p95")
    return {
        "backend": "postgres" if settings.database_url else "sqlite",
        "orgs": orgs,
        "entries": entries,
        "clients": clients,
        "processes": processes,
        "seconds": seconds,
        "seed_s": round(seed_s, 1),
        "prepare_s": round(prepare_s, 1),
        "prepared": prepared,  # recalls the prepare had answered: every org's on every server
        "warm_p50_ms": warm["p50_ms"],
        "warm_p95_ms": warm["p95_ms"],
        "random_p50_ms": spread["p50_ms"],
        "random_p95_ms": spread["p95_ms"],
        "random_over_warm_p95": round(spread["p95_ms"] / warm["p95_ms"], 2) if warm["p95_ms"] else None,
        "per_org_counted": len(spread_orgs),
        "per_org_p95_min_ms": round(min(per_org), 2),
        "per_org_p95_median_ms": round(statistics.median(per_org), 2),
        "per_org_p95_max_ms": round(max(per_org), 2),
        "recalls": warm["recalls"] + spread["recalls"],
        "writes": spread["writes"],
        "import_entries": import_entries,
        "small_org_embed_lag_s": round(lag, 2) if lag is not None else None,
        "errors": warm["errors"] + spread["errors"],
        "error_kinds": dict(Counter(warm["error_kinds"]) + Counter(spread["error_kinds"])),  # e.g. {"HTTP 503": 1}
        # requests sent again on a new connection: their kept one was closed idle by the server (`loadclient.STALE`)
        "reconnects": warm["reconnects"] + spread["reconnects"],
    }
