"""Redaction's time against the size of a text built to make a backtracking engine search from every start, and
what one write key's hostile text costs another organization on a real `grandbo serve` (issue 24, part 1).

    python benchmarks/redaction_linear.py [--rounds 3] [--json]

1. Per family of hostile text, the seconds to mask it at 25,000 to 200,000 characters with the defaults (RE2),
   medians of the rounds, and the same pattern on Python's backtracking `re` (what masked before) at the sizes it
   finishes in time, so that both growth rates come from one run: linear doubles with the size, quadratic
   quadruples.
2. A server on loopback with two organizations (SQLite, deterministic embeddings): org bravo asks GET /v1/stats
   back to back, first alone (the baseline), then while org alpha writes (a) the 198,000-character body that took
   69 s before, (b) a 53-character title under an admin's `(a+)+$`, and (c) a 200,000-character body under
   `a[^x]*x|a`, which reads ahead from every match and is refused. Reported: each write's seconds and status,
   and bravo's p50 and worst wait during it against its baseline.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from grandbo.config import Settings
from grandbo.eval.serve_bench import _free_port, _wait_ready, start_server
from grandbo.redaction import DEFAULT_PATTERNS, Redactor
from grandbo.service import Grandbo

SIZES = (25_000, 50_000, 100_000, 200_000)
BACKTRACKING_BUDGET = 5.0  # seconds: a backtracking run past this is not tried at the next size


def _hostile(family: str, size: int) -> str:
    half = size // 2
    return {
        "url_password": "a." * (half // 2) + "://x:" + "y" * half,
        "email": "a." * half + "@",
        "jwt": "eyJ-" * (size // 4),
    }[family]


def _median_seconds(function: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _row(size: int, text: str, backtracking: re.Pattern[str] | None, rounds: int) -> dict[str, Any]:
    row: dict[str, Any] = {"chars": size, "re2_s": round(_median_seconds(lambda: Redactor().text(text), rounds), 4)}
    if backtracking is not None:
        row["backtracking_s"] = round(_median_seconds(lambda: backtracking.sub("x", text), 1), 4)
    return row


def growth(rounds: int) -> dict[str, Any]:
    patterns = {p.name: p for p in DEFAULT_PATTERNS}
    out: dict[str, Any] = {}
    for family in ("url_password", "email", "jwt"):
        backtracking: re.Pattern[str] | None = re.compile(patterns[family].regex.pattern)  # the same source
        rows = []
        for size in SIZES:
            rows.append(_row(size, _hostile(family, size), backtracking, rounds))
            if rows[-1].get("backtracking_s", 0) > BACKTRACKING_BUDGET / 4:
                backtracking = None  # quadratic: the next size would take four times as long
        out[family] = rows
    return out


def _latencies(url: str, key: str, stop: threading.Event, found: list[float]) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get("/v1/stats").raise_for_status()
            found.append((time.perf_counter() - started) * 1000)


def _during(url: str, key: str, write: Any) -> dict[str, Any]:
    stop, waits = threading.Event(), []
    other = threading.Thread(target=_latencies, args=(url, key, stop, waits))
    other.start()
    time.sleep(0.3)
    started = time.perf_counter()
    status = write()
    seconds = time.perf_counter() - started
    time.sleep(0.1)
    stop.set()
    other.join()
    return {
        "write_s": round(seconds, 3),
        "status": status,
        "other_org_p50_ms": round(statistics.median(waits), 2),
        "other_org_p95_ms": round(statistics.quantiles(waits, n=20)[-1], 2),
        "other_org_max_ms": round(max(waits), 2),
        "other_org_requests": len(waits),
    }


def served(home: Path) -> dict[str, Any]:
    settings = Settings(home=home)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        alpha, bravo = grandbo.org("alpha", create=True), grandbo.org("bravo", create=True)
        write = alpha.keys.create("write", name="bench")[1]
        admin = alpha.keys.create("admin", name="bench")[1]
        read = bravo.keys.create("read", name="bench")[1]
        bravo.remember({"title": "bravo's own memory of a redis eviction storm"})
    port = _free_port()
    server = start_server(settings, port)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, server)
        headers = {"Authorization": f"Bearer {write}"}
        admin_headers = {"Authorization": f"Bearer {admin}"}
        with httpx.Client(base_url=url, timeout=300) as client:

            def post(title: str, body: str = "") -> int:
                return client.post("/v1/memories", json={"title": title, "body": body}, headers=headers).status_code

            def own(pattern: str) -> None:
                change = {"add": {"hostile": pattern}}
                client.patch("/v1/settings/redaction", json=change, headers=admin_headers).raise_for_status()

            result = {"baseline": _during(url, read, lambda: time.sleep(2) or 0)}
            result["issue_body_198k"] = _during(url, read, lambda: post("hostile", _hostile("url_password", 198_000)))
            own("(a+)+$")
            result["nested_repeat_53"] = _during(url, read, lambda: post("a" * 52 + "!"))
            client.patch("/v1/settings/redaction", json={"remove": ["hostile"]}, headers=admin_headers)
            own("a[^x]*x|a")
            result["reads_ahead_200k"] = _during(url, read, lambda: post("a long one", "a" * 200_000))
        return result
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object, nothing else")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        result = {"growth": growth(args.rounds), "served": served(Path(home))}
    if args.json:
        print(json.dumps(result))
        return
    for family, rows in result["growth"].items():
        cells = ", ".join(
            f"{r['chars']:,}: re2 {r['re2_s']:.4f} s"
            + (f" / re {r['backtracking_s']:.2f} s" if "backtracking_s" in r else "")
            for r in rows
        )
        print(f"{family:13} {cells}")
    for case, row in result["served"].items():
        print(
            f"{case:17} write {row['write_s']:.3f} s ({row['status']}), other org p50 {row['other_org_p50_ms']} ms, "
            f"p95 {row['other_org_p95_ms']} ms, worst {row['other_org_max_ms']} ms ({row['other_org_requests']})"
        )


if __name__ == "__main__":
    main()
