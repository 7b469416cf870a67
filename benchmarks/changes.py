"""What changed, measured: how often the plan's `changes` put an outage's true cause first and in the top 3, how often
an innocent change comes first, how often the probable origin is right, on the scenario generator's held-out seeds
(`grandbo.eval.changes_scenario`); and what 1,000 changes in the window cost a triage, against triage without
changes in the same run.

    python benchmarks/changes.py [--seeds 100-119] [--tune] [--latency] [--changes 1000] [--alerts 200]
        [--embedding deterministic|local]

`--tune` searches the change policy's weights, half-life and burst gap on the dev seeds 0-9 only (never the held-out
ones) and prints the best; the shipped `ChangePolicy` defaults came from it. `--latency` builds two orgs of the
shipped incident set in one store, one with `--changes` changes in the last two hours on every service of its
catalog (and a month of earlier deploys), and triages the same alerts in turn on each (no LLM): medians, p95 and
their ratios. Prints one JSON line per part.

Alert grouping is measured against the scenario's true outage ids (`changes_scenario.grouped_together`):
`grouping_together` is the share of outages whose alerts all land in one group of `tiers.grouping.group_alerts`
at its default window (`benchmarks/alert_grouping.py` has the fuller report: pair precision, noise joining).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.eval import beir, changes_scenario
from grandbo.eval.metrics import percentile
from grandbo.eval.runner import load_corpus, shipped_set
from grandbo.ingest.alert import Alert
from grandbo.model import utcnow
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.service import Grandbo
from grandbo.tiers.change_model import ChangeKind, NewChange
from grandbo.tiers.grouping import group_alerts

DEV_SEEDS = range(10)
WARMUP = 10


def seeds_of(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def groups_of(scenario: changes_scenario.Scenario) -> list[list[str]]:
    """The scenario's alerts grouped as `Alerts.receive` groups them (in one pass, no store), by scenario alert id."""
    alerts = [
        Alert(source="manual", event_id=a.id, fingerprint=a.fingerprint, service=a.service, summary=a.summary,
              started_at=a.at, received_at=a.at)
        for a in scenario.alerts
    ]  # fmt: skip
    back = {alert.id: original.id for alert, original in zip(alerts, scenario.alerts, strict=True)}
    return [[back[alert_id] for alert_id in group.alerts] for group in group_alerts(alerts, scenario.topology)]


def tune() -> dict[str, Any]:
    """The best (true cause first, then top 3) of a grid on the dev seeds."""
    scenarios = [changes_scenario.generate(seed) for seed in DEV_SEEDS]
    best: tuple[float, float, dict[str, float]] | None = None
    grid = itertools.product([20, 40, 60], [0.25, 0.35], [0.15, 0.25, 0.4], [0.4, 0.6], [8, 10, 15])
    for half_life, recency, topology, explains, gap in grid:
        update = {"recency_half_life_minutes": half_life, "recency_weight": recency, "topology_weight": topology,
                  "explains_weight": explains, "burst_gap_minutes": gap}  # fmt: skip
        policy = DEFAULT_POLICY.changes.model_copy(update=update)
        total = changes_scenario.Score()
        for scenario in scenarios:
            total.add(changes_scenario.measure(scenario, policy))
        report = total.report()
        key = (report["true_cause_first"], report["true_cause_top3"], update)
        if best is None or key[:2] > best[:2]:
            best = key
    assert best is not None
    return {"part": "tune", "dev_seeds": list(DEV_SEEDS), "first": best[0], "top3": best[1], "policy": best[2]}


def latency(changes: int, alerts: int, embedding: str) -> dict[str, Any]:
    """Triage with `changes` changes in the window against triage without, alert by alert in the same run."""
    settings = Settings()
    rng = random.Random(29)
    dataset = beir.load(shipped_set(), "dev+test")
    questions = [q for q in dataset.judged + dataset.unanswerable if q.metadata.get("services")]
    with tempfile.TemporaryDirectory(prefix="grandbo-changes-bench-") as scratch:
        run = settings.at_home(Path(scratch))
        with Grandbo.init(run, embedding=embedding) as grandbo:
            plain, changed = grandbo.org("plain", create=True), grandbo.org("changed", create=True)
            for memory in (plain, changed):
                load_corpus(memory, dataset, lambda _: None)
            services = changed.catalog.topology().names
            now = utcnow()
            window = [
                NewChange(id=f"w-{n}", service=rng.choice(services), kind=rng.choice(list(ChangeKind)),
                          summary=f"change {n}", at=now - timedelta(minutes=rng.uniform(1, 119)))
                for n in range(changes)
            ]  # fmt: skip
            month = [
                NewChange(id=f"m-{n}", service=rng.choice(services), summary=f"deploy {n}",
                          at=now - timedelta(days=rng.uniform(0.1, 30)))
                for n in range(changes)
            ]  # fmt: skip
            for offset in range(0, len(window + month), 500):
                changed.changes.receive((window + month)[offset : offset + 500], "generic", actor="bench")
            timed = [
                Alert(source="alertmanager", event_id=f"a-{n}", fingerprint=f"fp-{n}", summary=q.text,
                      service=q.metadata["services"][0], started_at=now)
                for n, q in enumerate(itertools.islice(itertools.cycle(questions), alerts + WARMUP))
            ]  # fmt: skip
            for memory in (plain, changed):
                memory.alerts.receive(timed)
            with_ms, without_ms, listed = [], [], []
            for position, alert in enumerate(timed):
                pair = [(plain, without_ms), (changed, with_ms)]
                for memory, times in pair if position % 2 else pair[::-1]:  # each goes first half the time
                    start = time.perf_counter()
                    plan = memory.triage(alert, narrate=False, now=now)
                    if position >= WARMUP:
                        times.append((time.perf_counter() - start) * 1000)
                        if memory is changed:
                            listed.append(len(plan.changes))
    p50 = (statistics.median(with_ms), statistics.median(without_ms))
    p95 = (percentile(with_ms, 95), percentile(without_ms, 95))
    return {
        "part": "latency", "embedding": embedding, "changes_in_window": changes, "alerts_timed": len(with_ms),
        "with_changes_p50_ms": round(p50[0], 2), "without_p50_ms": round(p50[1], 2),
        "ratio_p50": round(p50[0] / p50[1], 3),
        "with_changes_p95_ms": round(p95[0], 2), "without_p95_ms": round(p95[1], 2),
        "ratio_p95": round(p95[0] / p95[1], 3),
        "changes_listed_p50": statistics.median(listed), "target_ratio_p95": 1.2,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="100-119", help="held-out seeds, LOW-HIGH (the dev seeds are 0-9)")
    parser.add_argument("--tune", action="store_true", help="search the change policy on the dev seeds first")
    parser.add_argument("--latency", action="store_true", help="also time triage with and without changes")
    parser.add_argument("--changes", type=int, default=1000, help="changes in the window for --latency")
    parser.add_argument("--alerts", type=int, default=200, help="alerts timed for --latency")
    parser.add_argument("--embedding", default="deterministic", help="deterministic (no model cost), or local")
    args = parser.parse_args()
    seeds = seeds_of(args.seeds)
    if set(seeds) & set(DEV_SEEDS):
        parser.error(f"the dev seeds {DEV_SEEDS.start}-{DEV_SEEDS.stop - 1} are for tuning: report on others")
    if args.tune:
        print(json.dumps(tune()), flush=True)
    report = changes_scenario.run(seeds, group=groups_of)
    targets = {"true_cause_top3": 0.90, "true_cause_first": 0.70, "innocent_first_at_most": 0.10}
    print(json.dumps({"part": "accuracy", "seeds": args.seeds, **report, "targets": targets}), flush=True)
    if args.latency:
        print(json.dumps(latency(args.changes, args.alerts, args.embedding)), flush=True)


if __name__ == "__main__":
    main()
