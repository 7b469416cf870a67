"""Two code trees measured alike, alternated round by round: this checkout's `src` and another's (`--before`, a src
directory such as main's exported with `git archive`), each round a fresh process running the benchmark's own
measurement (its `--one`), so that the machine's load moves both alike. One JSON line per tree and round."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx


def alternate(script: str, options: list[str], before: Path | None, rounds: int, shown: dict[str, Any]) -> None:
    """Run `script --one *options` under each tree `rounds` times, printing each round's figures with `shown`."""
    here = Path(script).resolve().parent.parent / "src"
    trees = {"this": here, **({"before": before.resolve()} if before else {})}
    for round_ in range(rounds):
        for name, src in trees.items():
            done = subprocess.run(
                [sys.executable, script, "--one", *options],
                env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True, text=True, check=True,
            )  # fmt: skip
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            print(json.dumps({"tree": name, "round": round_ + 1, **shown, **figures}), flush=True)


def command_line(script: str, doc: str, measure: Callable[[int], dict[str, Any]], size: str, default: int) -> None:
    """An A/B benchmark's command line, of one size option (`--<size> N`, passed to `measure`): `--before` (the
    other tree's src), `--rounds`; `--one` (the runner's own) measures a round in this process."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--before", type=Path, help="the src directory of the tree to compare with")
    parser.add_argument(f"--{size}", type=int, default=default)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    value = getattr(args, size)
    if args.one:
        print(json.dumps(measure(value)))
        return
    alternate(script, [f"--{size}", str(value)], args.before, args.rounds, {size: value})


def waits_during(write: Callable[[int], object], act: Callable[[], object]) -> tuple[float, list[float]]:
    """`act`'s time, and the times of `write(n)` (another organization's write, one every 10 ms on a thread of its
    own) while `act` ran: what an erasure or a drop makes the other organizations wait."""
    waits: list[float] = []
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            started = time.perf_counter()
            write(n)
            waits.append(time.perf_counter() - started)
            n += 1
            time.sleep(0.01)

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.3)
    before, started = len(waits), time.perf_counter()
    act()
    took = time.perf_counter() - started
    time.sleep(0.1)
    stop.set()
    thread.join()
    return took, waits[before:] or [0.0]


def keyed_client(url: str, key: str, timeout: float = 60) -> httpx.Client:
    """An HTTP client of `grandbo serve` at `url` sending `key`."""
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)


def until_up(url: str, timeout: float = 300) -> None:
    """Wait for `grandbo serve` at `url` to answer /healthz (a loaded machine starts a server slowly)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("`grandbo serve` did not answer /healthz")
