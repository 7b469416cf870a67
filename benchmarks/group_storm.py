"""One alert group growing through a storm: deliveries of 10 alerts on one service, all into one group, as
`Alerts.receive` takes them (no HTTP, no triage), on the embedded store; the group's document and what a delivery
costs, at the start and at the end. In this tree and in the tree of `--before` (a src directory, e.g. main's
exported with `git archive`), alternated round by round, each round a fresh process on a fresh store.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/group_storm.py --before /tmp/main-tree/src [--deliveries 310] [--rounds 2]

One JSON line per tree and round: the median time of the first ten deliveries and of the last ten, the group's
document (its JSON) at the end, and how many alerts it counts.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ab import command_line


def measure(deliveries: int) -> dict[str, float | int]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.ingest.alert import Alert
    from grandbo.service import Grandbo

    start = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    with tempfile.TemporaryDirectory() as home, Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as g:
        memory = g.org("storm", create=True)
        memory.catalog.import_text("services:\n  - name: payments-db\n")
        took: list[float] = []
        for d in range(deliveries):
            alerts = [Alert(source="alertmanager", event_id=f"e{d}-{n}", fingerprint=f"fp{d}-{n}",
                            service="payments-db", summary="connection pool exhausted on primary",
                            started_at=start + timedelta(seconds=d * 5 + n)) for n in range(10)]  # fmt: skip
            started = time.perf_counter()
            received = memory.alerts.receive(alerts)
            took.append(time.perf_counter() - started)
        group_id = received[0][0].group_id
        assert group_id is not None
        document = memory._documents.get("alert_group", group_id)
        assert document is not None
        data = document.data
    counts = data.get("size", len(data["alerts"]))  # a group before `size` listed them all
    return {"first_ten_ms": round(statistics.median(took[:10]) * 1000, 1),
            "last_ten_ms": round(statistics.median(took[-10:]) * 1000, 1),
            "group_kb": round(len(json.dumps(data)) / 1024, 1), "group_counts": counts}  # fmt: skip


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "deliveries", 310)


if __name__ == "__main__":
    main()
