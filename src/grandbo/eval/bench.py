"""`grandbo bench recall`: latency of recall and bulk-write throughput at N realistic entries.

Entries are generated incident memories (services, components, error codes, symptoms, remedies in
sentences of 40-80 words), written through the write seam in bulk, embedded by the chosen provider
(deterministic by default: 384 dimensions, no model cost, so the numbers are the store's). A bare
numpy exact search over a matrix of the same shape runs in the same process as the baseline.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from grandbo.config import Settings
from grandbo.eval.metrics import percentile
from grandbo.memory import OrgMemory
from grandbo.model import Arm, NewEntry, entry_text
from grandbo.service import Grandbo
from grandbo.tiers.topology import Service

SERVICES = [
    "checkout-api",
    "auth-service",
    "payments-gateway",
    "orders-db",
    "redis-sessions",
    "kafka-events",
    "search-indexer",
    "cdn-edge",
    "notification-worker",
    "inventory-api",
    "pricing-engine",
    "user-profile",
    "shipping-quotes",
    "ledger-db",
    "fraud-scorer",
    "email-relay",
    "image-resizer",
    "graphql-gateway",
    "billing-cron",
    "report-builder",
    "feature-flags",
    "session-store",
    "rate-limiter",
    "dns-resolver",
    "object-storage",
    "metrics-pipeline",
    "log-shipper",
    "webhook-dispatcher",
    "tax-service",
    "catalog-api",
]
COMPONENTS = [
    "redis cluster",
    "postgres primary",
    "read replica",
    "kafka broker",
    "nginx ingress",
    "envoy sidecar",
    "connection pool",
    "jvm heap",
    "kubernetes node",
    "load balancer",
    "tls terminator",
    "dns cache",
    "elasticsearch shard",
    "s3 bucket",
    "cron scheduler",
    "message queue",
    "service mesh",
    "cdn pop",
]
SYMPTOMS = [
    "p99 latency above 1200ms",
    "HTTP 503 responses",
    "connection resets",
    "timeouts on writes",
    "elevated error rate",
    "OOMKilled pods",
    "consumer lag growing",
    "TLS handshake failures",
    "stale cache reads",
    "dropped webhooks",
    "disk usage at 95 percent",
    "CPU throttling",
    "slow queries",
    "failed logins",
    "duplicate charges",
    "missing search results",
]
MECHANISMS = [
    "key eviction storm",
    "network partition",
    "connection pool exhaustion",
    "lock contention",
    "memory leak after deploy",
    "certificate expiry",
    "misconfigured autoscaler",
    "retry storm",
    "schema migration holding a lock",
    "noisy neighbour on the node",
    "DNS TTL misconfiguration",
    "thread starvation",
    "runaway batch job",
    "replication lag",
    "hot partition",
    "garbage collection pauses",
]
CODES = [
    "ERR_CONN_RESET",
    "ECONNREFUSED",
    "ETIMEDOUT",
    "OOMKilled",
    "HTTP_503",
    "PG_40P01",
    "KAFKA_LEADER_NOT_AVAILABLE",
    "SSL_ERROR_EXPIRED",
    "ERR_TOO_MANY_REDIRECTS",
    "CrashLoopBackOff",
]
REMEDIES = [
    "rolled back the deploy",
    "raised the pool size and added a circuit breaker",
    "switched maxmemory-policy to volatile-lru",
    "rebuilt the cluster topology",
    "renewed the certificate and added an expiry alert",
    "scaled the node group",
    "killed the batch job and added a quota",
    "failed over to the replica",
    "added an index and rewrote the query",
    "drained the noisy node",
    "lowered the retry budget with jitter",
    "increased the heap and tuned the collector",
]
KINDS = ["finding", "finding", "finding", "runbook", "post-mortem", "fact"]
WARMUP_QUERIES = 30  # untimed recalls per arm before timing: the steady state of a long-running process


def synthetic_entry(rng: random.Random, number: int) -> NewEntry:
    """One incident-like memory of 40-80 words with identifiers an engineer would search for."""
    service, other = rng.sample(SERVICES, 2)
    component, mechanism, symptom = rng.choice(COMPONENTS), rng.choice(MECHANISMS), rng.choice(SYMPTOMS)
    code, remedy = rng.choice(CODES), rng.choice(REMEDIES)
    ticket = f"INC-{number:06d}"
    body = (
        f"{service} showed {symptom} while the {component} suffered a {mechanism}. "
        f"Clients of {other} saw {code} errors for {rng.randint(3, 90)} minutes. "
        f"Root cause: {mechanism} in the {component} triggered by {rng.choice(MECHANISMS)}. "
        f"Remediation: we {remedy}; follow-up {ticket} tracks {rng.choice(REMEDIES)}."
    )
    return NewEntry(
        title=f"{symptom} on {service} during {mechanism}",
        body=body,
        kind=rng.choice(KINDS),
        tags=[code, ticket],
        services=[service, other],
        severity=f"sev{rng.randint(1, 4)}",
    )


def synthetic_catalog(rng: random.Random) -> list[Service]:
    """The generated services, each calling two or three others (for the re-ranker's topology)."""
    return [
        Service(name=name, depends_on=rng.sample([s for s in SERVICES if s != name], rng.randint(2, 3)))
        for name in SERVICES
    ]


def synthetic_query(rng: random.Random) -> str:
    return (
        f"{rng.choice(SYMPTOMS)} on {rng.choice(SERVICES)} while the {rng.choice(COMPONENTS)} "
        f"shows {rng.choice(MECHANISMS)} and clients get {rng.choice(CODES)}"
    )


def _numpy_baseline(n: int, dim: int, queries: int, rng: np.random.Generator) -> float:
    """Median ms of a bare exact search: normalised float32 matrix times query, top 25."""
    matrix = rng.standard_normal((n, dim), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    probes = rng.standard_normal((queries, dim), dtype=np.float32)
    timings = []
    for probe in probes:
        probe /= np.linalg.norm(probe)
        start = time.perf_counter()
        scores = matrix @ probe
        top = np.argpartition(-scores, 24)[:25]
        top[np.argsort(-scores[top])]
        timings.append((time.perf_counter() - start) * 1000)
    return statistics.median(timings)


def _time_recall(memory: Any, topics: list[str], warmup: list[str]) -> dict[str, list[float]]:
    """Wall time of recall per arm (query embedding excluded) and each arm's own time.

    Steady state, as a long-running agent or service sees it: each arm first answers the `warmup`
    topics (different from the timed ones), so lazily built caches are in place before timing.
    """
    figures: dict[str, list[float]] = {
        "hybrid": [], "reranked": [], "vector": [], "lexical": [], "vector_arm": [], "lexical_arm": []
    }  # fmt: skip
    for arm in (Arm.HYBRID, Arm.RERANKED, Arm.VECTOR, Arm.LEXICAL):
        for topic in warmup:
            memory.recall(topic, 10, arm=arm)
        for topic in topics:
            start = time.perf_counter()
            result = memory.recall(topic, 10, arm=arm)
            figures[arm.value].append((time.perf_counter() - start) * 1000 - result.timings.embed_ms)
            if arm is Arm.VECTOR:
                figures["vector_arm"].append(result.timings.vector_ms)
            if arm is Arm.LEXICAL:
                figures["lexical_arm"].append(result.timings.lexical_ms)
    return figures


def _summary(figures: dict[str, list[float]]) -> dict[str, float]:
    reranked = statistics.median(figures["reranked"])
    return {
        "reranked_p50_ms": round(reranked, 3),
        "rerank_overhead_p50_ms": round(reranked - statistics.median(figures["hybrid"]), 3),
        "p50_ms": round(statistics.median(figures["hybrid"]), 3),
        "p95_ms": round(percentile(figures["hybrid"], 95), 3),
        "vector_p50_ms": round(statistics.median(figures["vector_arm"]), 3),
        "lexical_p50_ms": round(statistics.median(figures["lexical_arm"]), 3),
        "vector_recall_p50_ms": round(statistics.median(figures["vector"]), 3),
        "lexical_recall_p50_ms": round(statistics.median(figures["lexical"]), 3),
    }


def bench_recall(
    settings: Settings,
    *,
    entries: int,
    queries: int = 300,
    embedding: str = "deterministic",
    progress: Callable[[str], None] = lambda _: None,
    seed: int = 7,
) -> dict[str, Any]:
    """Build an org of `entries` and time recall; returns one flat dict of figures.

    On the embedded store the entries go through `remember_many` (embedding included) and a bare
    numpy exact search is timed as the baseline. On Postgres they go through the bulk path with
    precomputed vectors, recall is timed with exact search, then with the org's HNSW index, whose
    recall@10 against exact search is reported.
    """
    rng = random.Random(seed)
    postgres = bool(settings.database_url)
    with tempfile.TemporaryDirectory(prefix="grandbo-bench-") as scratch:
        run_settings = settings if postgres else settings.at_home(Path(scratch))
        with Grandbo.init(run_settings, embedding=embedding) as grandbo:
            org_id = f"bench-{rng.randrange(16**8):08x}"
            memory = grandbo.org(org_id, create=True)
            memory.catalog.put(synthetic_catalog(rng), actor="bench")
            extra: dict[str, Any] = {}
            try:
                generated = [synthetic_entry(rng, number) for number in range(entries)]
                if postgres:
                    write_s = _bulk_with_vectors(grandbo, memory, generated, progress)
                else:
                    start = time.perf_counter()
                    for offset in range(0, entries, 5_000):
                        memory.remember_many(generated[offset : offset + 5_000], actor="bench", strict=True)
                        progress(f"written {min(offset + 5_000, entries)}/{entries}")
                    write_s = time.perf_counter() - start
                del generated
                topics = [synthetic_query(rng) for _ in range(queries)]
                warmup = [synthetic_query(rng) for _ in range(WARMUP_QUERIES)]
                start = time.perf_counter()
                memory.recall(warmup[0], 10)  # builds the in-memory index on the embedded store
                extra["index_build_s"] = round(time.perf_counter() - start, 3)
                figures = _time_recall(memory, topics, warmup)
                dimension = grandbo.space.dimension
                if postgres:
                    extra |= _hnsw_figures(grandbo, memory, topics, progress)
            finally:
                grandbo.drop_org(org_id)
    result: dict[str, Any] = {"entries": entries, **_summary(figures), "write_per_s": round(entries / write_s, 1)}
    if not postgres:
        numpy_ms = _numpy_baseline(entries, dimension, min(queries, 200), np.random.default_rng(seed))
        result |= {
            "numpy_p50_ms": round(numpy_ms, 3),
            "vector_over_numpy": round(result["vector_p50_ms"] / numpy_ms, 2),
        }
    return {**result, **extra, "backend": "postgres" if postgres else "sqlite", "embedding": embedding,
            "queries": queries}  # fmt: skip


def _bulk_with_vectors(
    grandbo: Grandbo, memory: Any, generated: list[NewEntry], progress: Callable[[str], None]
) -> float:
    """Embed first (not timed), then time the bulk write of entries with their precomputed vectors."""
    provider = grandbo.provider()
    vectors: list[Any] = []
    for offset in range(0, len(generated), 5_000):
        batch = generated[offset : offset + 5_000]
        vectors.extend(provider.embed([entry_text(e.title, e.body, e.tags, e.services) for e in batch]))
    start = time.perf_counter()
    with grandbo.bulk_load():  # exact search first; the index is built and timed separately
        for offset in range(0, len(generated), 5_000):
            memory.remember_many(
                generated[offset : offset + 5_000], actor="bench", vectors=vectors[offset : offset + 5_000]
            )
            progress(f"written {min(offset + 5_000, len(generated))}/{len(generated)}")
    return time.perf_counter() - start


def _hnsw_figures(grandbo: Grandbo, memory: Any, topics: list[str], progress: Callable[[str], None]) -> dict[str, Any]:
    """Exact vs HNSW on the vector arm: latency, recall@10 of HNSW against exact, and hybrid with HNSW."""
    exact, exact_ms = _vector_arm(memory, topics)
    progress("building the HNSW index")
    start = time.perf_counter()
    grandbo.build_vector_index(memory.org)
    build_s = time.perf_counter() - start
    approximate, hnsw_ms = _vector_arm(memory, topics)
    found = sum(len(set(a) & set(e)) for a, e in zip(approximate, exact, strict=True))
    third = max(1, len(topics) // 3)
    hybrid = _time_recall(memory, topics[:third], topics[third : third + WARMUP_QUERIES])["hybrid"]
    return {
        "exact_vector_p50_ms": round(statistics.median(exact_ms), 3),
        "hnsw_p50_ms": round(statistics.median(hnsw_ms), 3),
        "hnsw_p95_ms": round(percentile(hnsw_ms, 95), 3),
        "hnsw_recall_at_10": round(found / max(1, sum(len(e) for e in exact)), 4),
        "hnsw_hybrid_p50_ms": round(statistics.median(hybrid), 3),
        "hnsw_build_s": round(build_s, 1),
    }


def _vector_arm(memory: Any, topics: list[str]) -> tuple[list[list[str]], list[float]]:
    """The vector arm's top 10 for each topic and its time (query embedding excluded)."""
    found, times = [], []
    for topic in topics:
        result = memory.recall(topic, 10, arm=Arm.VECTOR)
        found.append([hit.entry.id for hit in result.hits])
        times.append(result.timings.vector_ms)
    return found, times


def seeded_org(grandbo: Grandbo, rng: random.Random, entries: int, org_id: str = "bench") -> OrgMemory:
    """An organization of `entries` generated memories and the generated catalog, written as an import writes
    them (`remember_many` in batches of 5,000, each embedded by the Grandbo's provider): what the recall
    benchmarks measure over."""
    memory = grandbo.org(org_id, create=True)
    memory.catalog.put(synthetic_catalog(rng), actor="bench")
    generated = [synthetic_entry(rng, number) for number in range(entries)]
    for offset in range(0, entries, 5_000):
        memory.remember_many(generated[offset : offset + 5_000], actor="bench", strict=True)
    return memory
