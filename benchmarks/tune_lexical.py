"""Choosing the lexical arm's constants on dev splits only: BM25 b and k1, the evidence floor and its cap.

    python benchmarks/tune_lexical.py NAME=DIR:SPLIT:VECTOR_RUN [...] [--b ...] [--k1 ...] [--floor ...]
        [--cap ...] [--floor-terms ...]

Each set's corpus goes into a bare `LexicalIndex` (the terms `index_terms` gives, as recall indexes
them); every query is searched under each configuration, and hybrid is the RRF (k 60, top 25 each) of
that lexical list with the vector arm's list read from a TREC run file that `grandbo eval --run-file`
wrote (the vector arm does not depend on these constants). SciFact has only a test split: `test%dev`
and `test%test` select the halves of its queries by a hash of their id (dev for tuning, test held out).
Prints one JSON line per configuration with nDCG@10 of lexical and hybrid on every set.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import statistics
from pathlib import Path

from grandbo.eval import beir
from grandbo.eval.metrics import ndcg_at
from grandbo.retrieval.fusion import rrf
from grandbo.retrieval.lexical import LexicalIndex
from grandbo.retrieval.text import index_terms, unique_terms
from grandbo.tiers.transfer import entry_from_record


def half(query_id: str) -> str:
    return "dev" if int(hashlib.sha256(query_id.encode()).hexdigest(), 16) % 2 == 0 else "test"


def load(spec: str) -> tuple[str, beir.Dataset, dict[str, list[str]]]:
    name, _, rest = spec.partition("=")
    directory, split, run_path = rest.split(":")
    split, _, part = split.partition("%")
    dataset = beir.load(Path(directory), split)
    if part:
        dataset.queries = [q for q in dataset.queries if half(q.id) == part]
    vector: dict[str, list[str]] = {}
    for line in Path(run_path).read_text().splitlines():
        qid, _, doc, *_ = line.split()
        vector.setdefault(qid, []).append(doc)
    return name, dataset, vector


def score(dataset: beir.Dataset, vector: dict[str, list[str]], *, k1: float, b: float, floor: float,
          cap: float | None, corroborate: bool = False,
          floor_terms: int | None = None) -> tuple[float, float]:  # fmt: skip
    index = LexicalIndex(k1=k1, b=b)
    ids = []
    for record in dataset.corpus:
        entry = entry_from_record(record)
        index.add(index_terms(entry.title, entry.body, entry.tags, entry.services))
        ids.append(str(record["_id"]))
    lexical_scores, hybrid_scores = [], []
    for query in dataset.judged:
        seen = set(vector.get(query.id, [])[:25])
        if corroborate:
            found = index.search(unique_terms(query.text), 100, 0.0)
            found = [m for m in found if m.coverage >= floor or dataset.original(ids[m.row]) in seen]
        else:
            found = index.search(unique_terms(query.text), 25, floor, cap, floor_terms)
        lexical = [ids[m.row] for m in found][:25]
        original = [dataset.original(i) for i in lexical]
        fused = [doc for doc, _ in rrf([original, vector.get(query.id, [])[:25]], 60)]
        relevance = {dataset.original(d): g for d, g in dataset.qrels[query.id].items()}
        lexical_scores.append(ndcg_at(original, relevance, 10))
        hybrid_scores.append(ndcg_at(fused, relevance, 10))
    return round(statistics.fmean(lexical_scores), 4), round(statistics.fmean(hybrid_scores), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+")
    parser.add_argument("--b", type=float, nargs="*", default=[0.5, 0.75])
    parser.add_argument("--k1", type=float, nargs="*", default=[1.2])
    parser.add_argument("--floor", type=float, nargs="*", default=[0.0, 0.2])
    parser.add_argument("--cap", type=float, nargs="*", default=[-1.0])
    parser.add_argument("--corroborate", type=int, nargs="*", default=[0])
    parser.add_argument("--floor-terms", type=int, nargs="*", default=[-1])
    args = parser.parse_args()
    sets = [load(spec) for spec in args.sets]
    grid = itertools.product(args.k1, args.b, args.floor, args.cap, args.corroborate, args.floor_terms)
    for k1, b, floor, cap, corr, terms in grid:
        line: dict[str, object] = {"k1": k1, "b": b, "floor": floor, "cap": cap, "corroborate": corr, "terms": terms}
        for name, dataset, vector in sets:
            lexical, hybrid = score(
                dataset,
                vector,
                k1=k1,
                b=b,
                floor=floor,
                cap=None if cap < 0 else cap,
                corroborate=bool(corr),
                floor_terms=None if terms < 0 else terms,
            )
            line[name] = {"lexical": lexical, "hybrid": hybrid}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
