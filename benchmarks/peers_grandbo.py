"""Grandbo's side of benchmarks/peers.py: one store per process, fed the set's own vectors.

    python benchmarks/peers_grandbo.py grandbo-embedded|grandbo-postgres SET_FOLDER OUT.json [--pg-url URL]

The documents go through the write seam (`remember_many`) with their precomputed vectors; queries go
through `OrgMemory.recall` with a provider that hands back the query's precomputed vector (the local
model is loaded only for a text that has none, e.g. one that redaction masked, and counted). Times are
recall's wall time minus its embedding time, as for every peer. Postgres keeps exact vector search
(no HNSW index: the threshold is raised above the set), so it is compared with exact peers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from peers_measure import peak_rss_mb, yardstick  # beside this file

from grandbo.config import Settings
from grandbo.embeddings.base import Provider, Purpose, get_provider
from grandbo.errors import InvalidTopicError
from grandbo.eval import beir
from grandbo.eval.runner import reference_time
from grandbo.model import Arm
from grandbo.redaction import DEFAULT_NAMES
from grandbo.service import Grandbo
from grandbo.tiers.transfer import entry_from_record

ARMS = {
    "grandbo-embedded": (Arm.LEXICAL, Arm.VECTOR, Arm.HYBRID, Arm.RERANKED),
    "grandbo-postgres": (Arm.HYBRID, Arm.RERANKED),
}
SHOWN = 10
WARMUP = 20
BATCH = 5_000


class GivenVectors:
    """A provider of the recorded space that answers from precomputed vectors, by text."""

    def __init__(self, inner: Provider, known: dict[str, np.ndarray]) -> None:
        self.inner = inner
        self.name, self.model, self.dimension = inner.name, inner.model, inner.dimension
        self.min_similarity = inner.min_similarity
        self.known = known
        self.computed = 0

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[np.ndarray]:
        keys = [" ".join(text.split()) for text in texts]
        missing = [i for i, key in enumerate(keys) if key not in self.known]
        if missing:  # never on a clean set; counted in the report
            self.computed += len(missing)
            for i, vector in zip(missing, self.inner.embed([texts[i] for i in missing], purpose), strict=True):
                self.known[keys[i]] = np.asarray(vector, dtype=np.float32)
        return [self.known[key] for key in keys]


def _load(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], np.ndarray, np.ndarray, dict[str, Any]]:
    docs = [json.loads(line) for line in (folder / "docs.jsonl").open(encoding="utf-8")]
    topics = [json.loads(line) for line in (folder / "queries.jsonl").open(encoding="utf-8")]
    meta = json.loads((folder / "meta.json").read_text())
    return docs, topics, np.load(folder / "docs.npy"), np.load(folder / "queries.npy"), meta


def run(system: str, folder: Path, out: Path, url: str | None) -> None:
    docs, topics, vectors, probes, meta = _load(folder)
    dataset = beir.load(Path(meta["source"]), meta["split"]) if meta.get("source") else None
    base = Settings()
    provider_name = meta["space"].split(":", 1)[0]
    known = {" ".join(str(t["text"]).split()): probe for t, probe in zip(topics, probes, strict=True)}
    known |= {" ".join(str(d["embed_text"]).split()): v for d, v in zip(docs, vectors, strict=True)}
    given = GivenVectors(get_provider(provider_name, base), known)
    entries = [entry_from_record(record) for record in docs]
    report: dict[str, Any] = {"system": system, "entries": len(entries), "arms": {}}
    before = peak_rss_mb()
    with tempfile.TemporaryDirectory(prefix="peers-grandbo-") as scratch:
        settings = Settings(home=Path(scratch), local_model_dir=base.model_dir, database_url=url, hnsw_threshold=10**9)
        with Grandbo.init(settings, embedding=provider_name, provider=given) as grandbo:
            memory = grandbo.org("peers", create=True)
            memory.org_settings.set_redaction(disable=DEFAULT_NAMES, actor="peers")  # every system: the same text
            start = time.perf_counter()
            with grandbo.bulk_load():
                for offset in range(0, len(entries), BATCH):
                    memory.remember_many(
                        entries[offset : offset + BATCH], actor="peers", strict=True,
                        vectors=list(vectors[offset : offset + BATCH]),
                    )  # fmt: skip
            if dataset is not None and dataset.catalog:
                memory.catalog.import_text(dataset.catalog, actor="peers")
            if dataset is not None and dataset.outcomes:
                memory.ledger.import_outcomes(dataset.outcomes, prefix="peers", actor="peers")
            memory.recall(str(topics[0]["text"]), SHOWN)  # the in-memory index is built: ready to answer
            report["ingest_s"] = time.perf_counter() - start
            now = reference_time(dataset) if dataset is not None else None
            block = yardstick(vectors, probes)
            for arm in ARMS[system]:
                report["arms"][arm.value] = _arm(memory, arm, topics, now, block)
    report |= {
        "peak_rss_mb": peak_rss_mb(),
        "rss_before_mb": before,
        "vectors_computed": given.computed,
    }
    out.write_text(json.dumps(report))


def _arm(
    memory: Any,
    arm: Arm,
    topics: list[dict[str, Any]],
    now: Any,
    block: Callable[[], list[float]],
) -> dict[str, Any]:
    def recall(topic: dict[str, Any]) -> Any:
        metadata = topic.get("metadata") or {}
        return memory.recall(
            str(topic["text"]), SHOWN, arm=arm, services=metadata.get("services"), severity=metadata.get("severity"),
            now=now,
        )  # fmt: skip

    for topic in topics[:WARMUP]:
        with contextlib.suppress(InvalidTopicError):
            recall(topic)
    rankings: dict[str, list[str]] = {}
    times: list[float] = []
    reference = block()
    refused = 0
    for topic in topics:
        start = time.perf_counter()
        try:
            result = recall(topic)
        except InvalidTopicError:
            refused += 1
            rankings[str(topic["_id"])] = []
            continue
        times.append((time.perf_counter() - start) * 1000 - result.timings.embed_ms)
        rankings[str(topic["_id"])] = [hit.entry.id for hit in result.hits]
    reference += block()
    return {"rankings": rankings, "times_ms": times, "reference_ms": reference, "refused": refused}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=list(ARMS))
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--pg-url")
    args = parser.parse_args()
    if args.system == "grandbo-postgres" and not args.pg_url:
        sys.exit("grandbo-postgres needs --pg-url (peers.py starts a server and passes it)")
    run(args.system, args.folder, args.out, args.pg_url)


if __name__ == "__main__":
    main()
