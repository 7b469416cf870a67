"""The first read of the ledger by each path beside recall and analytics, of an org of many outcomes in a fresh
process, and another org's recalls meanwhile: a runbook's record (`grandbo runbook stats`) and a page of them
(`GET /v1/runbooks`), a console's vote taken back (`Ledger.withdraw`), an incident's close (its sync:
`Ledger.results_of`), triage's plan, an outcome of a runbook with no entry and one of an unknown id (refused). Each read
the org's whole ledger the first time in a process (~2 s of CPU at 100,000 outcomes, the GIL held).

    python benchmarks/ledger_first_paths.py [--backend sqlite|postgres] [--outcomes 100000] [--rounds 3] [--old SRC]

The store is `ledger_first_view`'s. Each round starts a fresh process per tree (`--old`: another tree's `src`,
alternated with this one's); before each path the big org's snapshot is dropped (as in a fresh process), what the path
needs written first (a vote, an open incident, outcomes of a runbook with no entry) untimed. A thread runs the paths
one after another while the victim recalls k=5 every 20 ms. Prints one JSON line a run: each path's time and CPU (its
thread's), whether the ledger was read whole, a digest of the answers (records, plan, refusal: equal across trees),
and the victim's p50 / p95 / max alone and meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ledger_first_view import RUNBOOKS, TOPICS, _percentiles, alternated, victim_recalls, whole_reads_counted

from grandbo.config import BUDGET_MS, Settings
from grandbo.errors import NotFoundError
from grandbo.service import Grandbo


def paths(settings: Settings) -> dict[str, Any]:
    """In this (fresh) process: the victim alone, then meanwhile each path's first read of the big org's ledger."""
    made = whole_reads_counted()
    run = f"{os.getpid()}-{time.time_ns()}"
    # Triage's budgets at their most: a plan made past them reads its runbooks as untried (answers then differ by load)
    settings = settings.model_copy(update={"triage_recall_budget_ms": BUDGET_MS, "triage_budget_ms": BUDGET_MS})
    with Grandbo.open(settings) as grandbo:
        victim, big = grandbo.org("victim"), grandbo.org("big")
        for n in range(10):
            victim.recall(TOPICS[n % 4], k=5)
        big.recall(TOPICS[0], k=5, arm="hybrid")  # its index made, its first recall's counts: not the paths'

        def refused() -> str:
            try:
                big.ledger.record("RB-7x", "succeeded")
            except NotFoundError as error:
                return error.message
            return "recorded"

        # GET /v1/runbooks's read of a page's records (each runbook's `effectiveness` before `Ledger.records`)
        records = getattr(big.ledger, "records", lambda ids: {rid: big.ledger.effectiveness(rid) for rid in ids})
        steps: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
            ("stats", lambda: None, lambda: big.ledger.effectiveness("RB-07", "svc-7").model_dump_json()),
            ("list", lambda: None, lambda: [r.model_dump_json() for r in records(RUNBOOKS).values()]),
            ("withdraw", lambda: big.ledger.record("RB-03", "succeeded", service="svc-3", comment=f"vote {run}"),
             lambda: big.ledger.withdraw("RB-03", f"vote {run}")),
            ("close", lambda: big.incidents.open(f"close {run}", services=["svc-9"], incident_id=f"C-{run}"),
             lambda: big.incidents.close(f"C-{run}", runbook_used=f"RB-closed-{run}", succeeded=True) and None),
            ("triage", lambda: None, lambda: [(r.id, r.win_rate, r.attempts, r.scope) for r in big.triage(
                {"summary": "check mitigate verify the runbook", "service": "svc-7"}, narrate=False).runbooks]),
            ("no_entry", lambda: big.ledger.import_outcomes([{"runbook_id": f"RB-wiki-{run}", "kind": "failed",
                                                              "at": "2024-01-01T00:00:00Z"}], prefix=f"wiki-{run}"),
             lambda: big.ledger.record(f"RB-wiki-{run}", "succeeded") and None),
            ("refused", lambda: None, refused),
        ]  # fmt: skip
        alone, out, answers, done = victim_recalls(victim, None), {}, [], threading.Event()

        def first_reads() -> None:
            try:
                for name, before, step in steps:
                    before()
                    grandbo._snapshots.forget("big")  # as a fresh process finds the org
                    read, cpu, started = len(made), time.thread_time(), time.perf_counter()
                    answers.append(step())
                    out[f"{name}_answer"] = hashlib.sha1(json.dumps(answers[-1], default=str).encode()).hexdigest()[:8]
                    out[f"{name}_ms"] = round((time.perf_counter() - started) * 1000, 1)
                    out[f"{name}_cpu_ms"] = round((time.thread_time() - cpu) * 1000, 1)
                    out[f"{name}_whole"] = len(made) - read
            finally:
                done.set()

        thread = threading.Thread(target=first_reads)
        thread.start()
        during = victim_recalls(victim, done)
        thread.join()
        out["digest"] = hashlib.sha1(json.dumps(answers, default=str).encode()).hexdigest()[:12]
        return {**out, "victim_alone": _percentiles(alone), "victim_during": _percentiles(during)}


if __name__ == "__main__":
    alternated(__file__, "ledger_first_paths", "paths", paths)
