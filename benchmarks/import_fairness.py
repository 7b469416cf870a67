"""What a REST import by one organization costs another organization's writes (probe 20b X1), on a real
`grandbo serve` on the embedded store: org `beta` writes a memory every 50 ms (and recalls every tenth) while
org `alpha`'s admin posts an export of N records to `/v1/import-from/jsonl`; beta's write latency alone (before
the import) and during it, in the same run.

    PYTHONPATH=src python benchmarks/import_fairness.py [--records 6000] [--alone 20]

Prints JSON: beta's writes and recalls p50 / p95 / max (ms) alone and during the import, their p95 ratio, the
import's seconds and the export's size. For reference, an org saturating its request slots on 2 cores costs the
others 2-5x their p95 (benchmarks/tenants.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from grandbo.config import Settings
from grandbo.service import Grandbo

MAP = "map=started_at=date,remediation=fix"
TOPIC = "checkout answered 502s after a migration locked the orders table"
TEXT = "A migration locked the orders table and checkout answered 502s until it was killed. " * 12


def _export(path: Path, records: int) -> int:
    with path.open("w") as out:
        for n in range(records):
            out.write(json.dumps({"id": f"INC-{n}", "title": f"Checkout outage {n}", "summary": TEXT[:400],
                                  "date": "2025-03-02T10:00:00Z", "severity": "SEV-2", "services": ["checkout-api"],
                                  "root_cause": f"cause {n}: " + TEXT[:200], "fix": "Killed the migration.",
                                  "postmortem": f"# Outage {n}\n\n" + TEXT}) + "\n")  # fmt: skip
    return path.stat().st_size


def _stats(times: list[float]) -> dict[str, float]:
    if len(times) < 2:
        return {"n": len(times)}
    ms = sorted(t * 1000 for t in times)
    return {"n": len(ms), "p50": round(statistics.median(ms), 1),
            "p95": round(ms[int(0.95 * (len(ms) - 1))], 1), "max": round(ms[-1], 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=6000)
    parser.add_argument("--alone", type=float, default=20.0, help="seconds of beta's writes before the import")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        with Grandbo.init(Settings(home=home), embedding="deterministic") as grandbo:
            _, admin = grandbo.org("alpha", create=True).keys.create("admin")
            _, writer = grandbo.org("beta", create=True).keys.create("write")
        export = Path(scratch) / "big.jsonl"
        size = _export(export, args.records)
        port = 18000 + os.getpid() % 1000
        env = {**os.environ, "GRANDBO_HOME": str(home), "GRANDBO_RATE_LIMIT_PER_KEY": "0",
               "GRANDBO_RATE_LIMIT_PER_ORG": "0"}  # fmt: skip
        server = subprocess.Popen([sys.executable, "-m", "grandbo", "serve", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            phase = {"now": "alone"}
            times: dict[str, dict[str, list[float]]] = {p: {"write": [], "recall": []} for p in ("alone", "import")}
            stop = threading.Event()

            def beta() -> None:
                with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {writer}"}, timeout=60) as c:
                    n = 0
                    while not stop.is_set():
                        kind = "recall" if n % 10 == 9 else "write"
                        started = time.perf_counter()
                        if kind == "write":
                            answer = c.post("/v1/memories", json={"title": f"beta note {n}", "body": TEXT[:300]})
                        else:
                            answer = c.post("/v1/recall", json={"topic": TOPIC})
                        if answer.status_code < 300 and phase["now"] in times:
                            times[phase["now"]][kind].append(time.perf_counter() - started)
                        n += 1
                        stop.wait(0.05)

            writer_thread = threading.Thread(target=beta)
            writer_thread.start()
            time.sleep(args.alone)
            phase["now"] = "import"
            started = time.perf_counter()
            answer = httpx.post(f"{url}/v1/import-from/jsonl?{MAP}", content=export.read_bytes(),
                                headers={"Authorization": f"Bearer {admin}"}, timeout=600)  # fmt: skip
            took = time.perf_counter() - started
            phase["now"] = "after"
            stop.set()
            writer_thread.join()
        finally:
            server.terminate()
            server.wait(30)
    report: dict[str, Any] = {"records": args.records, "export_mb": round(size / 2**20, 1), "import_s": round(took, 1),
                              "import_status": answer.status_code, "load_avg": os.getloadavg()[0]}  # fmt: skip
    for p, kinds in times.items():
        for kind, measured in kinds.items():
            report[f"{kind}_{p}"] = _stats(measured)
    for kind in ("write", "recall"):
        alone, during = report[f"{kind}_alone"].get("p95"), report[f"{kind}_import"].get("p95")
        report[f"{kind}_p95_ratio"] = round(during / alone, 1) if alone and during else None
    print(json.dumps(report))


if __name__ == "__main__":
    main()
