"""What grouping a delivery costs in CPU: probe 18a's hostile delivery (500 resolved alerts, each on a service the
catalog does not know, with a distinct fingerprint and a 2,000-character summary of 666 random two-letter words) and an
ordinary one (500 alerts of 40 alert names on 25 services, half of them in the catalog, short summaries), each as
`Alerts.receive` takes it (no HTTP, no triage) on the embedded store. In this tree and in the tree of `--before` (a src
directory, e.g. main's exported with `git archive`), alternated round by round, each round a fresh process.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/group_cost.py --before /tmp/main-tree/src [--alerts 500] [--rounds 2]

One JSON line per tree and round: the process's CPU seconds for each delivery and the groups its alerts joined, two
of each kind into one organization each (the second hostile one finds the first's 500 groups open: the most a
delivery reads, `OPEN_GROUPS_READ`; the second ordinary one, ten minutes on, joins the first's groups).
"""

from __future__ import annotations

import itertools
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ab import command_line

CATALOG = "services:\n" + "".join(
    f"  - name: svc-{n}\n" + (f"    depends_on: [svc-{n + 1}]\n" if n % 4 != 3 else "") for n in range(13)
)
WORDS = ("latency", "errors", "rate", "above", "threshold", "pool", "exhausted", "disk", "full", "restarts", "5xx",
         "p99", "timeouts", "queue", "depth", "growing", "memory", "pressure", "replica", "lag")  # fmt: skip


def hostile(n: int, rng: random.Random, tag: str, at: datetime) -> list[Any]:
    from grandbo.ingest.alert import Alert

    tokens = ["".join(p) for p in itertools.product("abcdefghijklmnopqrstuvwxyz0123456789", repeat=2)]
    return [Alert(source="alertmanager", event_id=f"{tag}-{i}", fingerprint=f"fp-{tag}-{i}", status="resolved",
                  service=f"svc-{tag}-{i}", summary=" ".join(rng.sample(tokens, 666))[:2000], started_at=at)
            for i in range(n)]  # fmt: skip


def ordinary(n: int, rng: random.Random, tag: str, at: datetime) -> list[Any]:
    from grandbo.ingest.alert import Alert

    alerts = []
    for i in range(n):
        name, service = rng.randrange(40), f"svc-{rng.randrange(25)}"  # svc-0..12 in the catalog, 13..24 not
        summary = f"alert{name} on {service}: " + " ".join(rng.sample(WORDS, 5))
        alerts.append(Alert(source="alertmanager", event_id=f"{tag}-{i}", fingerprint=f"fp-{name}-{service}",
                            service=service, summary=summary, started_at=at + timedelta(seconds=i)))  # fmt: skip
    return alerts


def measure(size: int) -> dict[str, Any]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    rng, start = random.Random(18), datetime(2026, 12, 6, 5, 0, tzinfo=UTC)
    deliveries = [("hostile", "hostile_first", hostile(size, rng, "a", start)),
                  ("hostile", "hostile_second", hostile(size, rng, "b", start)),
                  ("ordinary", "ordinary_first", ordinary(size, rng, "a", start)),
                  ("ordinary", "ordinary_second", ordinary(size, rng, "b", start + timedelta(minutes=10)))]  # fmt: skip
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as home, Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as g:
        for org, name, alerts in deliveries:
            memory = g.org(org, create=True)
            memory.catalog.import_text(CATALOG)
            started = time.process_time()
            received = memory.alerts.receive(alerts)
            figures[f"{name}_cpu_s"] = round(time.process_time() - started, 3)
            figures[f"{name}_groups"] = len({stored.group_id for stored, _ in received})
    return figures


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "alerts", 500)


if __name__ == "__main__":
    main()
