"""Recall latency and write throughput of the embedded store at several sizes, against peers measured
in the same run: a bare numpy exact search, and bm25s + numpy cosine + RRF (the fastest exact hybrid
peer measured here). Prints one JSON line per size and a table; medians over the timed queries.

    python benchmarks/recall_latency.py [--sizes 10000 100000] [--queries 300]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time

import numpy as np

from grandbo.config import Settings
from grandbo.embeddings.deterministic import DeterministicProvider
from grandbo.eval.bench import bench_recall, synthetic_entry, synthetic_query
from grandbo.model import entry_text
from grandbo.retrieval.fusion import rrf


def peer_hybrid_p50(entries: int, queries: int, seed: int = 7) -> float | None:
    """bm25s (stemmed, English stop words) + numpy exact cosine + RRF over both top 25s, in ms."""
    try:
        import bm25s
        import Stemmer
    except ImportError:
        return None
    rng = random.Random(seed)
    texts = [entry_text(e.title, e.body, e.tags, e.services) for e in (synthetic_entry(rng, n) for n in range(entries))]
    topics = [synthetic_query(rng) for _ in range(queries)]
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    provider = DeterministicProvider()
    matrix = np.stack(provider.embed(texts))
    probes = provider.embed(topics)
    timings = []
    for topic, probe in zip(topics, probes, strict=True):
        start = time.perf_counter()
        tokens = bm25s.tokenize([topic], stopwords="en", stemmer=stemmer, show_progress=False)
        docs, _ = retriever.retrieve(tokens, k=25, show_progress=False, n_threads=1)
        scores = matrix @ probe
        top = np.argpartition(-scores, 24)[:25]
        top = top[np.argsort(-scores[top])]
        rrf([docs[0].tolist(), top.tolist()])[:10]
        timings.append((time.perf_counter() - start) * 1000)
    return statistics.median(timings)


def peer_in_own_process(entries: int, queries: int) -> float | None:
    """The peer measured in a fresh process: ours holds BLAS to one thread once recall ran both arms at once
    (docs/architecture.md), and the peer gets the BLAS threads a process of its own would have."""
    done = subprocess.run(
        [sys.executable, __file__, "--peer-only", str(entries), "--queries", str(queries)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    value = json.loads(done.stdout.strip().splitlines()[-1])["peer_p50_ms"]
    return float(value) if value is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--peer-only", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer_only:
        print(json.dumps({"peer_p50_ms": peer_hybrid_p50(args.peer_only, args.queries)}))
        return
    rows = []
    for size in args.sizes:
        peer = peer_in_own_process(size, args.queries)
        figures = bench_recall(Settings(), entries=size, queries=args.queries)
        figures["peer_bm25s_numpy_rrf_p50_ms"] = round(peer, 3) if peer is not None else None
        figures["p50_over_peer"] = round(figures["p50_ms"] / peer, 2) if peer else None
        print(json.dumps(figures), flush=True)
        rows.append(figures)
    print()
    print(
        f"{'entries':>8} {'hybrid p50':>11} {'p95':>8} {'vector':>8} {'numpy':>8} {'vec/np':>7} "
        f"{'lexical':>8} {'peer p50':>9} {'us/peer':>8} {'writes/s':>9}"
    )
    for r in rows:
        peer = r["peer_bm25s_numpy_rrf_p50_ms"]
        print(
            f"{r['entries']:>8} {r['p50_ms']:>9.2f}ms {r['p95_ms']:>6.2f}ms {r['vector_p50_ms']:>6.2f}ms "
            f"{r['numpy_p50_ms']:>6.2f}ms {r['vector_over_numpy']:>7.2f} {r['lexical_p50_ms']:>6.2f}ms "
            f"{(peer or 0):>7.2f}ms {(r['p50_over_peer'] or 0):>8.2f} {r['write_per_s']:>9.0f}"
        )


if __name__ == "__main__":
    main()
