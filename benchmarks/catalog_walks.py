"""How long another organization's recalls take while one organization with a large, dense catalog (10,000 services,
40 dependencies each where the tree takes them, else the most it takes) asks recalls naming 50 services it never named
before ("walks"), or changes one service and recalls ("changes"), on 4 threads (and, to compare, recalls naming none:
"plain"), to `grandbo serve` in a process of its
own: in this tree and in the tree of `--before` (a src directory, e.g. main's exported with `git archive`),
alternated round by round, each round a fresh server on a fresh store.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/catalog_walks.py --before /tmp/main-tree/src [--seconds 20] [--rounds 3]

The other organization recalls every 10 ms throughout; its p50, p90 and longest recall are reported quiet and under
each load, with the dependencies the catalog holds and the loader's requests answered. One JSON line per tree and round.
"""

from __future__ import annotations

import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from ab import command_line, keyed_client, until_up

SERVICES, DEPENDS, NAMED, THREADS = 10_000, 40, 50, 4
TOPIC = "redis connection resets during a key eviction spike; p99 latency above 1200ms"


def measure(seconds: int) -> dict[str, object]:
    """One round in this process (the tree on its path), the server a process of its own."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    with tempfile.TemporaryDirectory() as home:
        with Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as grandbo:
            loader = grandbo.org("big", create=True).keys.create("admin")[1]
            other_org = grandbo.org("other", create=True)
            other = other_org.keys.create("read")[1]
            other_org.remember({"title": "redis evicted session keys", "body": TOPIC, "services": ["auth-service"]})
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        env = {**os.environ, "GRANDBO_HOME": home, "GRANDBO_RATE_LIMIT_PER_KEY": "0", "GRANDBO_RATE_LIMIT_PER_ORG": "0"}
        server = subprocess.Popen([sys.executable, "-m", "grandbo", "serve", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            until_up(url)
            with keyed_client(url, loader, 30) as big, keyed_client(url, other, 30) as small:
                held = _catalog(big)
                for n in range(5):
                    big.post("/v1/memories", json={"title": f"evictions on s{n:05d}", "body": TOPIC,
                                                   "services": [f"s{n:05d}"]}).raise_for_status()  # fmt: skip
                recall = lambda: small.post("/v1/recall", json={"topic": TOPIC, "k": 5})  # noqa: E731
                recall().raise_for_status()
                figures: dict[str, object] = {"dependencies": held}
                figures.update(_waits("quiet", recall, seconds / 2, None))
                plain = lambda c: c.post("/v1/recall", json={"topic": TOPIC})  # noqa: E731
                figures.update(_waits("plain", recall, seconds, lambda: _load(url, loader, plain, seconds)))
                named = iter(range(10**9))
                walks = lambda c: c.post("/v1/recall", json={"topic": TOPIC, "services": _named(next(named))})  # noqa: E731
                figures.update(_waits("walks", recall, seconds, lambda: _load(url, loader, walks, seconds)))
                changes = lambda c: _change(c, next(named))  # noqa: E731
                figures.update(_waits("changes", recall, seconds, lambda: _load(url, loader, changes, seconds)))
        finally:
            server.terminate()
            server.wait(30)
    return figures


def _named(n: int) -> list[str]:
    return [f"s{(n * NAMED + at) % SERVICES:05d}" for at in range(NAMED)]


def _change(client: httpx.Client, n: int) -> httpx.Response:
    client.put("/v1/catalog", json={"services": [{"name": f"s{n % SERVICES:05d}", "depends_on": ["s00001"]}]})
    return client.post("/v1/recall", json={"topic": TOPIC, "services": ["s00001"]})


def _catalog(client: httpx.Client) -> int:
    """The dense catalog, or, where the tree refuses it, the most dependencies a service it takes: what it holds."""
    names = [f"s{n:05d}" for n in range(SERVICES)]
    rng = random.Random(1)
    for depends in (DEPENDS, 5, 2):
        services = [{"name": name, "depends_on": rng.sample(names, depends)} for name in names]
        answers = [client.put("/v1/catalog", json={"services": services[at : at + 2000]}, timeout=600)
                   for at in range(0, SERVICES, 2000)]  # fmt: skip
        if all(answer.status_code == 200 for answer in answers):
            return SERVICES * depends
    raise RuntimeError("the catalog was refused")


def _load(url: str, key: str, send: Callable[[httpx.Client], httpx.Response], seconds: float) -> dict[str, int]:
    """`send` on THREADS threads until `seconds` passed (a request still running then is given up): what came back."""
    deadline, answered, given_up = time.monotonic() + seconds, [], []

    def sender() -> None:
        with keyed_client(url, key, 30) as client:
            while time.monotonic() < deadline:
                try:
                    answered.append(send(client).status_code)
                except httpx.TimeoutException:
                    given_up.append(1)

    threads = [threading.Thread(target=sender) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"answered": len(answered), "given_up": len(given_up)}


def _waits(name: str, recall: Callable[[], httpx.Response], seconds: float,
           load: Callable[[], dict[str, int]] | None) -> dict[str, object]:  # fmt: skip
    """The other org's recall times, one every 10 ms, while `load` runs (or for `seconds` without it)."""
    waits: list[float] = []
    stop = threading.Event()

    def recaller() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            recall()
            waits.append(time.perf_counter() - started)
            time.sleep(0.01)

    thread = threading.Thread(target=recaller)
    thread.start()
    loaded = load() if load is not None else time.sleep(seconds)
    stop.set()
    thread.join()
    waits.sort()
    out: dict[str, object] = {f"{name}_p50_ms": round(statistics.median(waits) * 1000, 1),
                              f"{name}_p90_ms": round(waits[int(len(waits) * 0.9)] * 1000, 1),
                              f"{name}_max_ms": round(waits[-1] * 1000, 1)}  # fmt: skip
    if loaded:
        out[f"{name}_loader"] = loaded
    return out


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "seconds", 20)


if __name__ == "__main__":
    main()
