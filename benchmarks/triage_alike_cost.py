"""What a triage's "alike" test costs in CPU over an org's stored alerts on one service: `--alerts` received alerts
(8,000 by default; past `triage.run.KEPT_ALERTS`, 10,000, they are read from the store on every triage) with
2,000-character summaries of random words (probe 18's storm: about 660 distinct words each), then as many with short
ordinary summaries in a second org, and one new alert of each kind triaged (no LLM) on the embedded store. In this
tree and in the tree of `--before` (a src directory, e.g. main's exported with `git archive`), alternated round by
round, each round a fresh process.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/triage_alike_cost.py --before /tmp/main-tree/src [--alerts 8000] [--rounds 2]
    PYTHONPATH=src python benchmarks/triage_alike_cost.py --profile long|short [--alerts 12000]

One JSON line per tree and round: the process's CPU seconds of the first triage (which reads the kept alerts) and the
median of the next TRIAGES, for each kind, and the plan's recurrence and outlier parts (the same in both trees).
`--profile` prints the costliest functions of the plan's reads (`Triage._facts`) and labels of one long triage.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ab import command_line

CATALOG = "services:\n  - name: checkout\n    depends_on: [payments]\n  - name: payments\n"
TRIAGES = 5  # timed after the first
LIKE_EVERY = 40  # of the long alerts, one in this many is alike the triaged one (and one more, nearly)
BATCH = 500  # alerts a delivery
WORDS = ("latency", "errors", "rate", "above", "threshold", "pool", "exhausted", "disk", "full", "restarts", "5xx",
         "p99", "timeouts", "queue", "depth", "growing", "memory", "pressure", "replica", "lag")  # fmt: skip
_TOKENS = ["".join(p) for p in itertools.product("abcdefghijklmnopqrstuvwxyz0123456789", repeat=2)]


def long_summary(rng: random.Random) -> str:
    return " ".join(rng.sample(_TOKENS, 666))[:2000]


def short_summary(rng: random.Random) -> str:
    return f"alert{rng.randrange(40)} on checkout: " + " ".join(rng.sample(WORDS, 5))


def alerts(n: int, kind: str, rng: random.Random, now: datetime, like: str = "") -> list[Any]:
    """`n` alerts on one service received in the last days; with `like`, one in LIKE_EVERY says its words again (in
    another order) and one a quarter of them changed, so that the long triage has alerts alike it to count."""
    from grandbo.ingest.alert import Alert

    def summary(i: int) -> str:
        if like and i % LIKE_EVERY == 0:
            return " ".join(rng.sample(like.split(), len(like.split())))
        if like and i % LIKE_EVERY == LIKE_EVERY // 2:
            words = like.split()
            return " ".join(w if rng.random() > 0.25 else rng.choice(_TOKENS) for w in words)
        return long_summary(rng) if kind == "long" else short_summary(rng)

    return [Alert(source="alertmanager", event_id=f"{kind}-{i}", fingerprint=f"fp-{kind}-{i}", service="checkout",
                  summary=summary(i), started_at=now - timedelta(days=2, seconds=n - i),
                  received_at=now - timedelta(days=2, seconds=n - i))
            for i in range(n)]  # fmt: skip


def _stored(g: Any, org: str, kind: str, n: int, rng: random.Random, now: datetime, like: str = "") -> Any:
    memory = g.org(org, create=True)
    memory.catalog.import_text(CATALOG)
    past = alerts(n, kind, rng, now, like)
    for at in range(0, n, BATCH):
        memory.alerts.receive(past[at : at + BATCH])
    return memory


def measure(size: int) -> dict[str, Any]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.ingest.alert import Alert
    from grandbo.service import Grandbo

    rng, now = random.Random(18), datetime.now(UTC).replace(microsecond=0)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home), triage_budget_ms=600_000, triage_recall_budget_ms=300_000)
        with Grandbo.init(settings, embedding="deterministic") as g:
            for kind in ("long", "short"):
                summary = long_summary(rng) if kind == "long" else short_summary(rng)
                memory = _stored(g, kind, kind, size, rng, now, summary if kind == "long" else "")
                new = Alert(source="alertmanager", event_id=f"{kind}-new", fingerprint=f"fp-{kind}-new",
                            service="checkout", summary=summary, received_at=now)  # fmt: skip
                cpu = []
                for _ in range(TRIAGES + 1):
                    started = time.process_time()
                    plan = memory.triage(new, narrate=False, now=now)
                    cpu.append(time.process_time() - started)
                figures[f"{kind}_first_cpu_s"] = round(cpu[0], 4)
                figures[f"{kind}_cpu_s"] = round(statistics.median(cpu[1:]), 4)
                figures[f"{kind}_plan"] = [plan.recurrence, plan.similar_alerts, plan.outlier, plan.outlier_share]
    return figures


def profile(size: int, kind: str) -> None:
    """The costliest functions of the plan's reads of one triage of `kind` (after a first one), on this thread."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo
    from grandbo.triage import evidence

    rng, now = random.Random(18), datetime.now(UTC).replace(microsecond=0)
    with tempfile.TemporaryDirectory() as home, Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as g:
        summary = long_summary(rng) if kind == "long" else short_summary(rng)
        memory = _stored(g, kind, kind, size, rng, now, summary if kind == "long" else "")
        new = alerts(1, "new", rng, now)[0].model_copy(update={"summary": summary, "received_at": now})
        triage = memory.triage

        def plan_reads() -> None:
            facts = triage._facts([], new, new.received_at, new.received_at, now)
            if hasattr(evidence, "labels"):  # both labels in one pass (since this benchmark came)
                evidence.labels(new, facts.recent, now)
            else:
                evidence.recurrence(new, facts.recent, now)
                evidence.outlier(new, facts.recent, now)

        plan_reads()
        profiler = cProfile.Profile()
        started = time.process_time()
        profiler.runcall(plan_reads)
        print(f"plan reads: {time.process_time() - started:.3f} s CPU (profiled) over {size} {kind} alerts", flush=True)
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(18)


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--profile", choices=["long", "short"])
    parser.add_argument("--alerts", type=int, default=8_000)
    known, _ = parser.parse_known_args()
    if known.profile:
        profile(known.alerts, known.profile)
        return
    command_line(__file__, __doc__ or "", measure, "alerts", 8_000)


if __name__ == "__main__":
    main()
