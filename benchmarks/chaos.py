"""Chaos runs: is anything acknowledged ever lost or stored twice, and does every embedding drain in the end?

Each run, for a few seconds, on a fresh store:
* two importer processes write entries (single `remember`s with an idempotency key, and small JSONL imports
  whose lines carry no id), recording each write to an acknowledgement file only once Grandbo returned;
* two `grandbo worker` processes drain the embed outbox;
* a SIGKILL hits a random importer or worker every 0.4-1.6 s, and the dead are restarted (an importer
  resumes after its last acknowledged write and sends the unacknowledged one again, as a client would);
* on Postgres the server is crash-restarted (`pg_ctl stop -m immediate`) once, mid-load;
* the embedding provider (an OpenAI-compatible fake on 127.0.0.1) fails 30% of calls with a 500 and sleeps
  past the client's timeout on 10% more.
Then every process is killed, the acknowledged writes are compared with what the store holds (lost: acknowledged
and not stored; duplicates: one write stored twice), and a backfill with the same faulty provider runs until
no embedding is pending (bounded).

    python benchmarks/chaos.py --backend sqlite --runs 20 --seconds 12 --seed 1 [--out results/chaos-sqlite.json]

Everything listens on loopback and stops by itself; a run is repeatable from its seed (the schedule of kills
and faults; what the processes manage in between depends on the machine).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from grandbo.config import Settings

DIMENSION = 8
TIMEOUT_S = 0.5  # the client's timeout; a stalled call sleeps past it
ORG = "chaos"
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["grandbo.service", "grandbo.store.sqlite.store", "grandbo.store.postgres.store"])


# ------------------------------------------------------------------------------------------- the provider


class FlakyEmbeddings:
    """OpenAI-compatible embeddings on 127.0.0.1 that fail `fail` of calls (500) and stall `stall` of them."""

    def __init__(self, seed: int, fail: float = 0.3, stall: float = 0.1) -> None:
        rng, lock = random.Random(seed), threading.Lock()
        self.counts: Counter[str] = Counter()
        counts = self.counts

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with lock:
                    draw = rng.random()
                counts["calls"] += 1
                if draw < fail:
                    counts["failed"] += 1
                    return self._send(500, {"error": {"message": "chaos: provider failure"}})
                if draw < fail + stall:
                    counts["stalled"] += 1
                    time.sleep(TIMEOUT_S * 3)
                data = [{"object": "embedding", "index": i, "embedding": _vector(text)}
                        for i, text in enumerate(body.get("input", []))]  # fmt: skip
                return self._send(200, {"object": "list", "data": data, "model": body.get("model")})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:  # the client gave up (timeout) or was killed
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    values = [digest[i] / 128.0 - 1.0 + 0.01 for i in range(DIMENSION)]
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


def _settings(home: Path, database_url: str | None, provider_url: str) -> Settings:
    return Settings(
        home=home, database_url=database_url, org=ORG, openai_base_url=provider_url, openai_api_key="chaos-key",
        openai_model="chaos-embed", openai_dimension=DIMENSION, http_timeout_seconds=TIMEOUT_S,
        embed_retry_seconds=0.05, embed_lease_seconds=2, embed_batch_size=16, pg_pool_size=3,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------- an importer


def _is_batch(worker: str, n: int) -> bool:
    """Whether the write starting at number `n` is a small import (decided by the position, so that a restarted
    importer sends the very same write again)."""
    return random.Random(f"{worker}-{n}").random() < 0.3


def _logging_to(path: Path) -> None:
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)


def importer(settings: Settings, worker: str, folder: Path) -> None:
    """Write numbered entries until killed; append each write's titles to its acknowledgement file once
    Grandbo returned."""
    from grandbo.errors import GrandboError
    from grandbo.service import Grandbo

    _logging_to(folder / f"importer-{worker}.log")
    ack_path = folder / f"{worker}.ack"
    done = [line.split("\t")[0] for line in _lines(ack_path)]
    n = int(done[-1]) + 1 if done else 0
    with Grandbo.open(settings, background=True) as grandbo, ack_path.open("a") as ack:
        memory = grandbo.org(ORG)
        while True:
            size = 12 if _is_batch(worker, n) else 1
            titles = [f"chaos {worker} write {n + i}: checkout-api pool exhausted" for i in range(size)]
            try:
                if size == 1:
                    memory.remember({"title": titles[0], "body": "seen under load"}, idempotency_key=f"{worker}-{n}")
                else:
                    path = folder / f"{worker}-{n}.jsonl"
                    path.write_text("".join(json.dumps({"title": t, "body": "seen in a batch"}) + "\n" for t in titles))
                    report = memory.import_file(path)
                    if not report.complete:
                        raise RuntimeError(f"import refused lines: {report.to_dict()}")
            except (GrandboError, RuntimeError) as error:  # the store is restarting, say: send it again
                print(f"retry {n}: {type(error).__name__}: {str(error)[:160]}", file=sys.stderr, flush=True)
                time.sleep(0.2)
                continue
            ack.write("".join(f"{n + i}\t{t}\n" for i, t in enumerate(titles)))
            ack.flush()
            n += size


def embed_worker(settings: Settings, name: str, folder: Path) -> None:
    """What `grandbo worker` does: drain the embed outbox, poll when idle, until killed."""
    from grandbo.errors import GrandboError
    from grandbo.service import Grandbo

    _logging_to(folder / f"{name}.log")
    while True:
        try:
            with Grandbo.open(settings) as grandbo:
                worker = grandbo.worker()
                while True:
                    if worker.drain().claimed == 0:
                        time.sleep(0.1)
        except GrandboError as error:  # the store went away: open it again, as a supervisor would restart us
            print(f"worker: {type(error).__name__}: {str(error)[:160]}", file=sys.stderr, flush=True)
            time.sleep(0.2)


# ------------------------------------------------------------------------------------------- one run


class _Children:
    """The importer and worker processes of a run, restarted when they die. They fork from a server process
    that imported Grandbo once, so a restart takes milliseconds, not the seconds of a fresh interpreter."""

    def __init__(self, settings: Settings, folder: Path) -> None:
        self.folder, self.kills = folder, 0
        self.targets = {
            **{f"importer-w{i}": (importer, (settings, f"w{i}", folder)) for i in range(2)},
            **{f"worker-{i}": (embed_worker, (settings, f"worker-{i}", folder)) for i in range(2)},
        }
        self.procs: dict[str, multiprocessing.process.BaseProcess] = {}

    def keep_alive(self) -> None:
        for name, (target, args) in self.targets.items():
            proc = self.procs.get(name)
            if proc is None or not proc.is_alive():
                self.procs[name] = _CONTEXT.Process(target=target, args=args, daemon=True)
                self.procs[name].start()

    def kill(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.is_alive():
            proc.kill()  # SIGKILL
            proc.join()
            self.kills += 1

    def kill_all(self) -> None:
        for name in list(self.procs):
            self.kill(name)


def one_run(
    backend: str, run: int, seed: int, seconds: float, server: Any = None, drain_batch: int = 16
) -> dict[str, Any]:
    from grandbo.service import Grandbo

    rng = random.Random(seed * 1000 + run)
    folder = Path(tempfile.mkdtemp(prefix=f"grandbo-chaos-{backend}-{run}-"))
    provider = FlakyEmbeddings(rng.randrange(1 << 30))
    url, owner = None, None
    if backend == "postgres":
        name = f"chaos_{seed}_{run}"
        server.drop_database(name)
        url, owner = server.create_app_database(name), server.owner_url(name)
    settings = _settings(folder / "home", url, provider.url)
    with Grandbo.init(settings.model_copy(update={"migrate_database_url": owner}), embedding="openai") as grandbo:
        grandbo.org(ORG, create=True)
    warm = _CONTEXT.Process(target=time.sleep, args=(0,))  # the fork server imports Grandbo before the clock runs
    warm.start()
    warm.join()
    children = _Children(settings, folder)
    restarts, restarter, timings = 0, None, [0.0]
    restart_at = time.monotonic() + seconds * rng.uniform(0.2, 0.5) if backend == "postgres" else float("inf")
    next_kill = time.monotonic() + rng.uniform(0.4, 1.6)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            children.keep_alive()
            if time.monotonic() >= next_kill:
                children.kill(rng.choice(sorted(children.targets)))
                next_kill = time.monotonic() + rng.uniform(0.4, 1.6)
            if time.monotonic() >= restart_at:  # on a thread: the kills go on while the server recovers
                restarter = threading.Thread(target=_timed_restart, args=(server, timings))
                restarter.start()
                restarts, restart_at = restarts + 1, float("inf")
            time.sleep(0.05)
    finally:
        if restarter is not None:
            restarter.join()
        children.kill_all()
    acked = [line.split("\t", 1)[1] for i in range(2) for line in _lines(folder / f"w{i}.ack")]
    drain_started = time.monotonic()
    with Grandbo.open(settings.model_copy(update={"embed_batch_size": drain_batch})) as grandbo:
        memory = grandbo.org(ORG)
        stored = Counter(entry.title for entry in memory.entries(include_inactive=True))
        # Every active entry needs a vector: the outbox is empty and nothing is left unreadable.
        while (stats := memory.stats()).unreadable + stats.pending and time.monotonic() - drain_started < 60:
            grandbo.backfill()
        pending = stats.unreadable + stats.pending
    provider.close()
    result = {
        "backend": backend, "run": run, "seed": seed, "seconds": seconds,
        "acknowledged": len(acked), "stored": sum(stored.values()),
        "lost": len(set(acked) - set(stored)), "duplicates": sum(c - 1 for c in stored.values() if c > 1),
        "kills": children.kills, "postgres_restarts": restarts, "postgres_restart_s": round(timings[0], 2),
        "provider_calls": provider.counts["calls"], "provider_failed": provider.counts["failed"],
        "provider_stalled": provider.counts["stalled"],
        "pending_after_drain": pending, "readable": stats.readable, "total": stats.total,
        "drained": pending == 0 and stats.readable == stats.total,
        "drain_s": round(time.monotonic() - drain_started, 2),
    }  # fmt: skip
    if backend == "postgres":
        server.drop_database(f"chaos_{seed}_{run}")
    if result["lost"] == 0 and result["duplicates"] == 0 and result["drained"] and not os.environ.get("CHAOS_KEEP"):
        shutil.rmtree(folder, ignore_errors=True)
    else:
        result["kept"] = str(folder)  # the processes' logs and acknowledgements, for a look
    return result


def _timed_restart(server: Any, timings: list[float]) -> None:
    began = time.monotonic()
    server.restart(crash=True)
    timings[0] = time.monotonic() - began


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def run(backend: str, runs: int, seconds: float, seed: int, drain_batch: int = 16) -> list[dict[str, Any]]:
    """`runs` chaos runs on `backend`; one row per run. The final backfill sends `drain_batch` texts per
    provider call (the workers send 16): larger batches mean fewer calls to fail or stall, a shorter drain."""
    results = []
    server = None
    if backend == "postgres":
        from grandbo.devtools.postgres import LocalPostgres

        server = LocalPostgres(durable=True).start()  # durable: a crash must not lose what was committed
    try:
        for number in range(runs):
            result = one_run(backend, number, seed, seconds, server, drain_batch)
            results.append(result)
            print(
                f"{backend} run {number:2d}: acknowledged {result['acknowledged']:5d}, stored {result['stored']:5d}, "
                f"lost {result['lost']}, duplicates {result['duplicates']}, kills {result['kills']:2d}, "
                f"pg restarts {result['postgres_restarts']}, provider {result['provider_failed']}/"
                f"{result['provider_stalled']}/{result['provider_calls']} failed/stalled/calls, "
                f"drained {result['drained']} ({result['drain_s']} s)",
                flush=True,
            )
    finally:
        if server is not None:
            server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from grandbo.logs import configure

    configure("ERROR")  # the faults make every retry log a warning: the rows below say what matters
    results = run(args.backend, args.runs, args.seconds, args.seed)
    summary = {
        "backend": args.backend, "runs": len(results), "seconds_per_run": args.seconds, "seed": args.seed,
        "acknowledged": sum(r["acknowledged"] for r in results), "lost": sum(r["lost"] for r in results),
        "duplicates": sum(r["duplicates"] for r in results), "kills": sum(r["kills"] for r in results),
        "postgres_restarts": sum(r["postgres_restarts"] for r in results),
        "runs_drained": sum(r["drained"] for r in results),
    }  # fmt: skip
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "runs": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
