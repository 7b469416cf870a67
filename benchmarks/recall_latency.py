"""Recall latency and write throughput of the embedded store at several sizes, against peers measured
in the same run: a bare numpy exact search, and bm25s + numpy cosine + RRF (the fastest exact hybrid
peer measured here). Prints one JSON line per size and a table; medians over the timed queries.

On a shared machine one block of our queries and one of the peer's, minutes apart, can differ by 3x for the
machine's sake alone; so the ratio the target reads (`p50_over_peer`) comes from rounds that alternate
between the two (`--rounds`, the peer waiting in its own process between its rounds): the median of the
rounds' ratios, with their range. `peer_bm25s_numpy_rrf_p50_ms` and `p50_ms` are from the separate blocks.

    python benchmarks/recall_latency.py [--sizes 10000 100000] [--queries 300] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from grandbo.config import Settings
from grandbo.embeddings.deterministic import DeterministicProvider
from grandbo.eval.bench import bench_recall, seeded_org, synthetic_entry, synthetic_query
from grandbo.model import Arm, entry_text
from grandbo.retrieval.fusion import rrf
from grandbo.service import Grandbo


def peer_timer(entries: int, queries: int, seed: int = 7) -> Callable[[int], list[float]] | None:
    """bm25s (stemmed, English stop words) + numpy exact cosine + RRF over both top 25s: a function timing its
    next `count` queries (cycling through `queries` topics), in ms each."""
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
    position = 0

    def timed(count: int) -> list[float]:
        nonlocal position
        timings = []
        for _ in range(count):
            topic, probe = topics[position % len(topics)], probes[position % len(topics)]
            position += 1
            start = time.perf_counter()
            tokens = bm25s.tokenize([topic], stopwords="en", stemmer=stemmer, show_progress=False)
            docs, _ = retriever.retrieve(tokens, k=25, show_progress=False, n_threads=1)
            scores = matrix @ probe
            top = np.argpartition(-scores, 24)[:25]
            top = top[np.argsort(-scores[top])]
            rrf([docs[0].tolist(), top.tolist()])[:10]
            timings.append((time.perf_counter() - start) * 1000)
        return timings

    return timed


def peer_hybrid_p50(entries: int, queries: int, seed: int = 7) -> float | None:
    """The peer's median over `queries` queries, in ms."""
    timed = peer_timer(entries, queries, seed)
    return statistics.median(timed(queries)) if timed else None


def serve_peer(entries: int, queries: int) -> None:
    """The peer in this process, timing a round of N queries for each line N read (one JSON line back each)."""
    timed = peer_timer(entries, queries)
    print(json.dumps({"ready": timed is not None}), flush=True)
    for line in sys.stdin:
        print(json.dumps({"ms": timed(int(line)) if timed else []}), flush=True)


def interleaved(entries: int, queries: int, rounds: int) -> dict[str, float | None]:
    """Hybrid recall (query embedding excluded) and the peer in alternating rounds of queries/rounds each."""
    peer = subprocess.Popen(
        [sys.executable, __file__, "--peer-serve", str(entries), "--queries", str(queries)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert peer.stdin is not None
    assert peer.stdout is not None
    rng = random.Random(7)
    per_round = max(1, queries // rounds)
    ours: list[float] = []
    theirs: list[float] = []
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="grandbo-bench-") as scratch:
        settings = Settings().at_home(Path(scratch))
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            memory = seeded_org(grandbo, rng, entries)
            topics = [synthetic_query(rng) for _ in range(queries + 30)]
            for topic in topics[queries:]:  # warm: the index built, its caches filled
                memory.recall(topic, 10, arm=Arm.HYBRID)
            if not json.loads(peer.stdout.readline())["ready"]:
                peer.kill()
                return {"interleaved_p50_over_peer": None}
            for number in range(rounds):
                peer.stdin.write(f"{per_round}\n")
                peer.stdin.flush()
                their_round = json.loads(peer.stdout.readline())["ms"]
                our_round = []
                for topic in topics[number * per_round : (number + 1) * per_round]:
                    start = time.perf_counter()
                    result = memory.recall(topic, 10, arm=Arm.HYBRID)
                    our_round.append((time.perf_counter() - start) * 1000 - result.timings.embed_ms)
                ours += our_round
                theirs += their_round
                ratios.append(statistics.median(our_round) / statistics.median(their_round))
    peer.stdin.close()
    peer.wait(30)
    return {
        "interleaved_p50_ms": round(statistics.median(ours), 3),
        "interleaved_peer_p50_ms": round(statistics.median(theirs), 3),
        "interleaved_p50_over_peer": round(statistics.median(ratios), 2),
        "interleaved_ratio_min": round(min(ratios), 2),
        "interleaved_ratio_max": round(max(ratios), 2),
        "rounds": rounds,
    }


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
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds of ours and the peer's queries")
    parser.add_argument("--peer-only", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--peer-serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer_only:
        print(json.dumps({"peer_p50_ms": peer_hybrid_p50(args.peer_only, args.queries)}))
        return
    if args.peer_serve:
        serve_peer(args.peer_serve, args.queries)
        return
    rows = []
    for size in args.sizes:
        peer = peer_in_own_process(size, args.queries)
        figures = bench_recall(Settings(), entries=size, queries=args.queries)
        figures["peer_bm25s_numpy_rrf_p50_ms"] = round(peer, 3) if peer is not None else None
        figures["separate_p50_over_peer"] = round(figures["p50_ms"] / peer, 2) if peer else None
        alternating = interleaved(size, args.queries, args.rounds)
        figures["p50_over_peer"] = alternating.pop("interleaved_p50_over_peer")
        figures |= alternating
        print(json.dumps(figures), flush=True)
        rows.append(figures)
    print()
    print(
        f"{'entries':>8} {'hybrid p50':>11} {'p95':>8} {'vector':>8} {'numpy':>8} {'vec/np':>7} "
        f"{'lexical':>8} {'peer p50':>9} {'us/peer':>8} {'range':>11} {'writes/s':>9}"
    )
    for r in rows:
        peer = r["peer_bm25s_numpy_rrf_p50_ms"]
        print(
            f"{r['entries']:>8} {r['p50_ms']:>9.2f}ms {r['p95_ms']:>6.2f}ms {r['vector_p50_ms']:>6.2f}ms "
            f"{r['numpy_p50_ms']:>6.2f}ms {r['vector_over_numpy']:>7.2f} {r['lexical_p50_ms']:>6.2f}ms "
            f"{(peer or 0):>7.2f}ms {(r['p50_over_peer'] or 0):>8.2f} "
            f"{r.get('interleaved_ratio_min', 0):>5.2f}-{r.get('interleaved_ratio_max', 0):<5.2f} "
            f"{r['write_per_s']:>9.0f}"
        )


if __name__ == "__main__":
    main()
