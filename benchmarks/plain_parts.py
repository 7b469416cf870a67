"""Grandbo's recall against plain parts fed the same vectors, measured in one run.

    python benchmarks/plain_parts.py DIR [DIR ...] [--split test] [--embedding local]

Plain parts: bm25s (English stopwords, its default tokenizer, no stemming) top 25, exact cosine over
the same document vectors Grandbo stores (the same provider and its vector cache) top 25, and RRF
(k = 60) over the two lists. Prints one JSON line per set and arm, Grandbo's four arms first.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import bm25s
import numpy as np

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.cache import CachedProvider
from grandbo.eval import beir
from grandbo.eval.metrics import mrr_at, ndcg_at, recall_at
from grandbo.eval.runner import evaluate, shipped_set
from grandbo.logs import configure as configure_logs
from grandbo.model import entry_text
from grandbo.retrieval.fusion import rrf
from grandbo.tiers.transfer import entry_from_record

TOP = 25


def plain_parts(dataset: beir.Dataset, provider: CachedProvider) -> dict[str, dict[str, list[str]]]:
    entries = [entry_from_record(record) for record in dataset.corpus]
    ids = [str(record["_id"]) for record in dataset.corpus]
    texts = [entry_text(e.title, e.body, e.tags, e.services) for e in entries]
    matrix = np.asarray(provider.embed(texts, "document"), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    queries = dataset.judged
    lexical_ids, _ = retriever.retrieve(
        bm25s.tokenize([q.text for q in queries], stopwords="en", show_progress=False),
        k=min(TOP, len(ids)), show_progress=False,
    )  # fmt: skip
    vectors = np.asarray(provider.embed([q.text for q in queries], "query"), dtype=np.float32)
    runs: dict[str, dict[str, list[str]]] = {"bm25s": {}, "cosine": {}, "bm25s+cosine rrf": {}}
    for row, query in enumerate(queries):
        lexical = [ids[i] for i in lexical_ids[row]]
        scores = matrix @ (vectors[row] / np.linalg.norm(vectors[row]))
        vector = [ids[i] for i in np.argsort(-scores)[:TOP]]
        runs["bm25s"][query.id], runs["cosine"][query.id] = lexical, vector
        runs["bm25s+cosine rrf"][query.id] = [doc for doc, _ in rrf([lexical, vector], 60)]
    return runs


def metrics(rankings: dict[str, list[str]], dataset: beir.Dataset) -> dict[str, float]:
    rows = [(rankings.get(q.id, []), dataset.qrels[q.id]) for q in dataset.judged]
    return {
        "nDCG@10": round(statistics.fmean(ndcg_at(r, rel, 10) for r, rel in rows), 4),
        "R@5": round(statistics.fmean(recall_at(r, rel, 5) for r, rel in rows), 4),
        "R@10": round(statistics.fmean(recall_at(r, rel, 10) for r, rel in rows), 4),
        "MRR@10": round(statistics.fmean(mrr_at(r, rel, 10) for r, rel in rows), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="+")
    parser.add_argument("--split", default="test")
    parser.add_argument("--embedding", default="local")
    args = parser.parse_args()
    settings = Settings()
    # As the CLI: log lines stay off the results unless GRANDBO_LOG_LEVEL asks for them.
    configure_logs(settings.log_level if "log_level" in settings.model_fields_set else "CRITICAL")
    for name in args.directories:
        directory = Path(name) if Path(name).exists() else shipped_set(name)
        report = evaluate(directory, settings, args.embedding, split=args.split)
        for line in report.lines:
            keep = ("set", "arm", "nDCG@10", "R@5", "R@10", "MRR@10")
            print(json.dumps({"split": args.split, **{k: line[k] for k in keep}}))
        dataset = beir.load(directory, args.split)
        provider = CachedProvider(get_provider(args.embedding, settings), settings.home / "cache" / "embeddings.db")
        try:
            for arm, rankings in plain_parts(dataset, provider).items():
                print(json.dumps({"split": args.split, "set": dataset.name, "arm": arm, **metrics(rankings, dataset)}))
        finally:
            provider.close()


if __name__ == "__main__":
    main()
