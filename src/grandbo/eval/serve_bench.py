"""`grandbo bench serve`: recalls per second and latency of a real `grandbo serve` on loopback.

The benchmark makes a scratch store of N generated incident memories embedded by the chosen provider (the
local model by default; document vectors are cached in GRANDBO_HOME/cache, so a second run does not embed
again), starts `grandbo serve` on a free loopback port in a child process, and drives `POST /v1/recall` from
C concurrent clients for S seconds (query embedding included, as an agent pays it). Bounded in count and
time; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.cache import CachedProvider
from grandbo.eval.bench import synthetic_catalog, synthetic_entry, synthetic_query
from grandbo.eval.loadclient import FAILED, Connection
from grandbo.eval.metrics import percentile
from grandbo.model import entry_text
from grandbo.service import Grandbo

MAX_REQUESTS = 200_000  # a hard bound, whatever --seconds says
SINGLE_REQUESTS = 200


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _load(settings: Settings, embedding: str, entries: int, cache: Path, progress: Callable[[str], None]) -> str:
    """A scratch store of `entries` memories with their vectors; returns a read key of its org."""
    rng = random.Random(7)
    provider = get_provider(embedding, settings)
    cached = CachedProvider(provider, cache)
    try:
        with Grandbo.init(settings, embedding=embedding, provider=cached) as grandbo:
            memory = grandbo.org("bench", create=True)
            memory.catalog.put(synthetic_catalog(rng), actor="bench")
            generated = [synthetic_entry(rng, number) for number in range(entries)]
            for start in range(0, entries, 2_000):
                batch = generated[start : start + 2_000]
                vectors = cached.embed([entry_text(e.title, e.body, e.tags, e.services) for e in batch])
                memory.remember_many(batch, actor="bench", vectors=list(vectors))
                progress(f"loaded {min(start + 2_000, entries)}/{entries} memories")
            _, key = memory.keys.create("read", name="bench")
            return key
    finally:
        cached.close()


def start_server(settings: Settings, port: int) -> subprocess.Popen[bytes]:
    """`grandbo serve` on 127.0.0.1:`port` over the store of `settings` (its home, and its database URL when it
    has one), without the per-key rate limit nor the bound on an org's requests at once: a benchmark's clients share
    keys and send one org's requests together (16 in the warm phase), and it measures the server, not admission."""
    env = {**os.environ, "GRANDBO_HOME": str(settings.home), "GRANDBO_LOCAL_MODEL_DIR": str(settings.model_dir)}
    env["GRANDBO_RATE_LIMIT_PER_KEY"] = env["GRANDBO_REQUESTS_PER_ORG"] = "0"
    if settings.database_url:
        env["GRANDBO_DATABASE_URL"] = settings.database_url
    else:
        env.pop("GRANDBO_DATABASE_URL", None)
    return subprocess.Popen(  # noqa: S603 (our own interpreter and module, fixed arguments)
        [sys.executable, "-m", "grandbo", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_servers(servers: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to every server, then up to 30 s for each to end (closing its store), killed past that."""
    for server in servers:
        server.send_signal(signal.SIGTERM)
    for server in servers:
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time (user and system) process `pid` has used, from /proc (None where there is none): a server's
    CPU per recall, unlike its throughput, hardly moves with what else runs on the machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15


def _wait_ready(url: str, server: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"grandbo serve exited with status {server.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("grandbo serve was not ready in time")


def _drive(url: str, key: str, clients: int, seconds: float, topics: list[str]) -> tuple[list[float], int]:
    """C clients, each with its own keep-alive connection (`loadclient`), as fast as answers come, for `seconds`."""
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(number: int) -> None:
        nonlocal errors
        mine: list[float] = []
        failed = 0
        with Connection(url, key=key) as http:
            position = number
            while time.monotonic() < stop_at and len(latencies) + len(mine) < MAX_REQUESTS:
                topic = topics[position % len(topics)]
                position += clients
                started = time.perf_counter()
                try:
                    ok = http.post("/v1/recall", {"topic": topic, "k": 5}) == 200
                except FAILED:
                    ok = False
                if ok:
                    mine.append((time.perf_counter() - started) * 1000)
                else:
                    failed += 1
        with lock:
            latencies.extend(mine)
            errors += failed

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors


def bench_serve(
    settings: Settings,
    *,
    entries: int = 10_000,
    clients: int = 16,
    seconds: float = 20.0,
    embedding: str = "local",
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Serve N memories on loopback and measure concurrent recalls over HTTP; one flat dict of figures."""
    rng = random.Random(11)
    topics = [synthetic_query(rng) for _ in range(2_000)]
    with tempfile.TemporaryDirectory(prefix="grandbo-bench-serve-") as scratch:
        home = Path(scratch)
        run_settings = settings.at_home(home).model_copy(update={"database_url": None})
        key = _load(run_settings, embedding, entries, settings.home / "cache" / "embeddings.db", progress)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        server = start_server(run_settings, port)
        try:
            _wait_ready(url, server)
            progress("server ready; warming up")
            _drive(url, key, clients, min(3.0, seconds), topics[1000:])  # untimed: caches, threads, the model
            single, single_errors = _single(url, key, topics[1500:])
            progress(f"driving {clients} clients for {seconds:g} s")
            started, cpu_before, clients_before = time.perf_counter(), _cpu_seconds(server.pid), time.process_time()
            latencies, errors = _drive(url, key, clients, seconds, topics[:1000])
            elapsed, cpu_after = time.perf_counter() - started, _cpu_seconds(server.pid)
            clients_cpu = time.process_time() - clients_before
        finally:
            stop_servers([server])
        progress("the query model alone, as the server runs it")
        ceiling, model_cpu_ms = _model_ceiling(run_settings, embedding, topics[:1000], min(5.0, seconds))
    ok = latencies or [0.0]
    server_cpu_ms = None
    if cpu_before is not None and cpu_after is not None and latencies:
        server_cpu_ms = round((cpu_after - cpu_before) * 1000 / (len(latencies) + errors), 2)
    return {
        "entries": entries,
        "clients": clients,
        "requests": len(latencies) + errors,
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(ok), 2),
        "p95_ms": round(percentile(ok, 95), 2),
        "p99_ms": round(percentile(ok, 99), 2),
        "errors": errors + single_errors,
        "single_client_p50_ms": round(statistics.median(single or [0.0]), 2),
        "model_only_per_s": ceiling,
        # CPU per request, which the machine's other load hardly moves (throughput it does): the server's, all of
        # its threads, and the query model's alone (the second run beside it); the difference is what a recall
        # costs beyond its embedding (HTTP, auth, recall, serialisation).
        "server_cpu_ms_per_recall": server_cpu_ms,
        "model_cpu_ms_per_query": model_cpu_ms,
        "client_cpu_ms_per_recall": round(clients_cpu * 1000 / max(1, len(latencies) + errors), 2),  # same cores
        "seconds": seconds,
        "embedding": embedding,
    }


def _single(url: str, key: str, topics: list[str]) -> tuple[list[float], int]:
    """One client, one recall at a time: the latency an agent sees from a warm server."""
    latencies, errors = [], 0
    with Connection(url, key=key) as http:
        for topic in topics[:SINGLE_REQUESTS]:
            started = time.perf_counter()
            try:
                ok = http.post("/v1/recall", {"topic": topic, "k": 5}) == 200
            except FAILED:
                ok = False
            if ok:
                latencies.append((time.perf_counter() - started) * 1000)
            else:
                errors += 1
    return latencies, errors


def _model_ceiling(settings: Settings, embedding: str, topics: list[str], seconds: float) -> tuple[float, float]:
    """Queries per second the provider embeds with nothing else running, the way the server runs it (one
    single-threaded session per core, batches of 8): the most recalls per second the server could give, measured
    in the same run as its throughput; and the CPU milliseconds per query it took."""
    lanes = os.cpu_count() or 1
    models = [get_provider(embedding, settings.model_copy(update={"local_threads": 1})) for _ in range(lanes)]
    for model in models:
        model.embed(topics[:8], "query")  # loaded before the clock starts
    done = [0] * lanes
    stop_at = time.monotonic() + seconds

    def lane(number: int) -> None:
        position = number * 8
        while time.monotonic() < stop_at:
            batch = [topics[(position + i) % len(topics)] for i in range(8)]
            position += 8 * lanes
            models[number].embed(batch, "query")
            done[number] += len(batch)

    threads = [threading.Thread(target=lane, args=(n,)) for n in range(lanes)]
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu, elapsed = time.process_time() - cpu, time.perf_counter() - started
    return round(sum(done) / elapsed, 1), round(cpu * 1000 / max(1, sum(done)), 2)
