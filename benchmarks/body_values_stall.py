"""How long another organization's requests wait while one organization sends REST bodies of ~330,000 JSON values
each (within the 1 MiB a body may be: a memory's tags, a recall's services, a tool's list argument, in turn), to
`grandbo serve` in a process of its own: in this tree and in the tree of `--before` (a src directory, e.g. main's
exported with `git archive`), alternated round by round, each round a fresh server on a fresh store.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/body_values_stall.py --before /tmp/main-tree/src [--bodies 30] [--rounds 3]

The other organization asks `GET /v1/settings/rerank` every 10 ms throughout; its p50, p90 and longest wait are
reported with the sender's time a body. One JSON line per tree and round.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ab import command_line, keyed_client, until_up, waits_during

BODIES = [
    ("POST", "/v1/memories", {"title": "t", "tags": [0] * 330_000}),
    ("POST", "/v1/recall", {"topic": "redis evicts keys", "services": [0] * 330_000}),
    ("POST", "/v1/tools/query_org_memory", {"topic": [0] * 330_000}),
]


def measure(bodies: int) -> dict[str, float]:
    """One round in this process (the tree on its path), the server a process of its own."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    with tempfile.TemporaryDirectory() as home:
        with Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as grandbo:
            sender = grandbo.org("big", create=True).keys.create("write")[1]
            other = grandbo.org("other", create=True).keys.create("read")[1]
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        env = {**os.environ, "GRANDBO_HOME": home}
        server = subprocess.Popen([sys.executable, "-m", "grandbo", "serve", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            until_up(url)
            sent = [json.dumps(body, separators=(",", ":")).encode() for _, _, body in BODIES]
            with keyed_client(url, sender, 60) as big, keyed_client(url, other, 60) as small:
                small.get("/v1/settings/rerank").raise_for_status()
                statuses: list[int] = []

                def send_all() -> None:
                    for n in range(bodies):
                        method, path, _ = BODIES[n % len(BODIES)]
                        answer = big.request(method, path, content=sent[n % len(BODIES)],
                                             headers={"Content-Type": "application/json"})  # fmt: skip
                        statuses.append(answer.status_code)

                took, waits = waits_during(lambda n: small.get("/v1/settings/rerank"), send_all)
        finally:
            server.terminate()
            server.wait(30)
    waits.sort()
    return {"body_ms": round(took / bodies * 1000, 1), "other_p50_ms": round(statistics.median(waits) * 1000, 1),
            "other_p90_ms": round(waits[int(len(waits) * 0.9)] * 1000, 1), "other_max_ms": round(waits[-1] * 1000, 1),
            "pings": len(waits), "statuses": sorted(set(statuses))}  # type: ignore[dict-item]  # fmt: skip


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "bodies", 30)


if __name__ == "__main__":
    main()
