"""Triage latency without an LLM at 10,000 entries with the local model, against recall in the same run.

The org holds the shipped incident set (93 memories, its catalog and 256-outcome ledger), generated incident
memories up to `--entries`, and 200 received alerts (so the frequent/rare/novel label has history to read).
Each timed alert is triaged with `narrate=False` (query embedding, re-ranked recall, the ledger, the
catalog, the recent alerts, the plan), and the same sentence is recalled alone as the baseline; both are
wall times including the query embedding. Prints one JSON line and a table (medians and p95).

    python benchmarks/triage_latency.py [--entries 10000] [--alerts 200] [--history 200] [--as-webhook]
        [--embedding local|deterministic]

Document vectors are cached in GRANDBO_HOME/cache/triage-bench-<embedding>.db, so only the
first run embeds the corpus.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.cache import CachedProvider
from grandbo.eval import beir
from grandbo.eval.bench import SERVICES, synthetic_entry, synthetic_query
from grandbo.eval.metrics import percentile
from grandbo.eval.runner import load_corpus, shipped_set
from grandbo.ingest.alert import Alert
from grandbo.service import Grandbo
from grandbo.triage.plan import alert_from

WARMUP = 20


def alerts_to_time(dataset: beir.Dataset, rng: random.Random, count: int) -> list[dict[str, object]]:
    """Half the shipped set's questions (with their services), half generated alert sentences."""
    shipped = [
        {
            "summary": q.text,
            "service": (q.metadata.get("services") or [None])[0],
            "severity": q.metadata.get("severity"),
        }
        for q in dataset.judged + dataset.unanswerable
    ]
    generated = [{"summary": synthetic_query(rng), "service": rng.choice(SERVICES)} for _ in range(count)]
    mixed = [item for pair in zip(shipped * 4, generated, strict=False) for item in pair]
    return mixed[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--alerts", type=int, default=200)
    parser.add_argument("--history", type=int, default=200, help="alerts received before the timed ones")
    parser.add_argument(
        "--as-webhook", action="store_true",
        help="receive each timed alert first and triage it through a new handle, as a server's webhook does",
    )  # fmt: skip
    parser.add_argument("--embedding", default="local", help="local (the target's), or deterministic (no model cost)")
    args = parser.parse_args()
    settings = Settings()
    rng = random.Random(11)
    dataset = beir.load(shipped_set(), "dev+test")
    # A cache file per provider of its own: the shared one is written by concurrent evaluations (SQLite locks).
    cache_file = settings.home / "cache" / f"triage-bench-{args.embedding}.db"
    cached = CachedProvider(get_provider(args.embedding, settings), cache_file)
    with tempfile.TemporaryDirectory(prefix="grandbo-triage-bench-") as scratch:
        run = settings.at_home(Path(scratch))
        with Grandbo.init(run, embedding=args.embedding, provider=cached) as grandbo:
            memory = grandbo.org("bench", create=True)
            load_corpus(memory, dataset, print)
            generated = [synthetic_entry(rng, n) for n in range(args.entries - len(dataset.corpus))]
            for offset in range(0, len(generated), 1_000):
                memory.remember_many(generated[offset : offset + 1_000], actor="bench", strict=True)
                print(f"written {min(offset + 1_000, len(generated))}/{len(generated)} generated entries", flush=True)
            history = [
                Alert(source="alertmanager", event_id=f"hist-{n}", fingerprint=f"fp-{n % 40}",
                      service=rng.choice(SERVICES), summary=synthetic_query(rng))
                for n in range(args.history)
            ]  # fmt: skip
            for offset in range(0, len(history), 1_000):
                memory.alerts.receive(history[offset : offset + 1_000])
            timed = alerts_to_time(dataset, rng, args.alerts + WARMUP)
            for alert in timed[:WARMUP]:
                memory.triage(alert, narrate=False)
                memory.recall(str(alert["summary"]), 10)
            triage_ms, recall_ms, plan_ms, inner_recall_ms = [], [], [], []
            for alert in timed[WARMUP:]:
                handle = memory
                if args.as_webhook:  # stored first (a new document), then triaged by a request's own handle
                    memory.alerts.receive([alert_from(alert)])
                    handle = grandbo.org("bench")
                start = time.perf_counter()
                plan = handle.triage(alert, narrate=False)
                triage_ms.append((time.perf_counter() - start) * 1000)
                plan_ms.append(plan.timings.plan_ms)
                inner_recall_ms.append(plan.timings.recall_ms)
                start = time.perf_counter()
                memory.recall(plan.query, 10, services=[plan.service] if plan.service else None,
                              severity=plan.severity)  # fmt: skip
                recall_ms.append((time.perf_counter() - start) * 1000)
            stats = memory.stats()
    cached.close()
    row = {
        "embedding": args.embedding,
        "entries": stats.total,
        "readable": stats.readable,
        "alerts_timed": len(triage_ms),
        "alerts_received_before": args.history,
        "as_webhook": args.as_webhook,
        "triage_p50_ms": round(statistics.median(triage_ms), 2),
        "triage_p95_ms": round(percentile(triage_ms, 95), 2),
        "recall_p50_ms": round(statistics.median(recall_ms), 2),
        "recall_p95_ms": round(percentile(recall_ms, 95), 2),
        "triage_over_recall_p50": round(statistics.median(triage_ms) / statistics.median(recall_ms), 2),
        "plan_part_p50_ms": round(statistics.median(plan_ms), 2),
        "recall_part_p50_ms": round(statistics.median(inner_recall_ms), 2),
        "target_p95_ms": 100,
    }
    print(json.dumps(row))
    print(
        "| entries | triage p50 | triage p95 | recall p50 (baseline) | recall p95 | triage / recall | plan part p50 |"
    )
    print("|---|---|---|---|---|---|---|")
    cells = [f"{row['entries']:,}", *(f"{row[k]} ms" for k in ("triage_p50_ms", "triage_p95_ms", "recall_p50_ms",
             "recall_p95_ms")), str(row["triage_over_recall_p50"]), f"{row['plan_part_p50_ms']} ms"]  # fmt: skip
    print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
