"""`grandbo bench tenants`' warm and random-org phases for two code trees in alternating rounds over one seeded
store, so that a shared, noisy machine weighs both alike: each round starts P `grandbo serve` processes of one
tree (its `src` first on PYTHONPATH), recalls every org once on every server (untimed, as the bench does), then
runs the warm and the random phase, and prints one JSON line with both p50/p95, their ratio, the servers' CPU per
request (which hardly moves with what else runs) and the load average before and after.

    PYTHONPATH=src python benchmarks/tenants_ab.py --rounds 2 main=/work/main/src branch=src
        [--orgs 200] [--entries 2000] [--clients 16] [--seconds 20] [--processes 2] [--home DIR]

Seeding (the slow part: 400,000 memories) is done once per `--home` and kept there with the orgs' keys, so that
later runs reuse it; the first round after a seed builds every index row by row and saves its image (reported
with "images": true, not a fair round). The embedding-lag phase of the bench is left out. On Postgres, set
GRANDBO_DATABASE_URL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from grandbo.config import Settings
from grandbo.eval import tenants_bench
from grandbo.eval.serve_bench import _cpu_seconds, _free_port, _wait_ready, start_server, stop_servers


def _load() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def _round(settings: Settings, keys: dict[str, str], args: argparse.Namespace, label: str, src: str) -> dict:
    os.environ["PYTHONPATH"] = src  # the servers' code
    ports = [_free_port() for _ in range(args.processes)]
    servers = [start_server(settings, port) for port in ports]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    names = sorted(keys)
    try:
        for url, server in zip(urls, servers, strict=True):
            _wait_ready(url, server)
        before = _load()
        tenants_bench._prepare(urls, keys, names, args.clients)
        load = tenants_bench._Load(urls, keys, args.clients)
        cpu = [sum(_cpu_seconds(s.pid) or 0.0 for s in servers)]
        warm = load.run(args.seconds, lambda _: names[0], writes=tenants_bench.WRITE_SHARE)
        cpu.append(sum(_cpu_seconds(s.pid) or 0.0 for s in servers))
        spread = load.run(args.seconds, lambda rng: rng.choice(names), writes=tenants_bench.WRITE_SHARE)
        cpu.append(sum(_cpu_seconds(s.pid) or 0.0 for s in servers))
    finally:
        stop_servers(servers)
    requests = [max(1, phase["recalls"] + phase["writes"]) for phase in (warm, spread)]
    return {
        "label": label,
        "at": time.strftime("%H:%M:%S"),
        "load_before": before,
        "load_after": _load(),
        "warm_p50_ms": warm["p50_ms"],
        "warm_p95_ms": warm["p95_ms"],
        "random_p50_ms": spread["p50_ms"],
        "random_p95_ms": spread["p95_ms"],
        "random_over_warm_p95": round(spread["p95_ms"] / warm["p95_ms"], 2) if warm["p95_ms"] else None,
        "warm_cpu_ms_per_request": round((cpu[1] - cpu[0]) * 1000 / requests[0], 2),
        "random_cpu_ms_per_request": round((cpu[2] - cpu[1]) * 1000 / requests[1], 2),
        "recalls": warm["recalls"] + spread["recalls"],
        "errors": warm["errors"] + spread["errors"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="LABEL=SRC: a code tree's src folder, run in this order each round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--orgs", type=int, default=200)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--home", type=Path, default=Path("/tmp/grandbo-tenants-ab"))
    args = parser.parse_args()
    trees = [tree.split("=", 1) for tree in args.trees]
    if any(len(tree) != 2 for tree in trees):
        parser.error("each tree is LABEL=SRC")
    args.home.mkdir(parents=True, exist_ok=True)
    settings = Settings(home=args.home, database_url=os.environ.get("GRANDBO_DATABASE_URL") or None)
    saved = args.home / "tenants-ab-keys.json"
    if not saved.exists():
        names = [f"tenant-{number:05d}" for number in range(args.orgs)]
        keys = tenants_bench._seed(settings, dict.fromkeys(names, args.entries), lambda m: print(m, file=sys.stderr))
        saved.write_text(json.dumps(keys))
        print(json.dumps({"images": True, **_round(settings, keys, args, trees[0][0], trees[0][1])}), flush=True)
    keys = json.loads(saved.read_text())
    for _ in range(args.rounds):
        for label, src in trees:
            print(json.dumps(_round(settings, keys, args, label, src)), flush=True)


if __name__ == "__main__":
    main()
