"""Calibrate the "no similar past incident" bar (GRANDBO_SEEN_BEFORE_BAR) on an evaluation set.

For every query, re-ranked recall reports the evidence of its best match: the larger of its cosine
similarity and its lexical idf coverage. The bar separates answerable queries (judged) from the ones the
set marks unanswerable; this prints, for candidate bars, the share of answerable queries said seen before
and of unanswerable ones said novel, and the bar with the best balanced accuracy.

    python benchmarks/calibrate_seen_before.py [DIR] [--embedding local]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from grandbo.config import Settings
from grandbo.eval import beir
from grandbo.eval.runner import load_corpus, reference_time, shipped_set
from grandbo.model import Arm
from grandbo.service import Grandbo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=shipped_set())
    parser.add_argument("--embedding", default="local")
    parser.add_argument("--split", default="dev", help="Calibrate on this split (never on test).")
    args = parser.parse_args()
    dataset = beir.load(args.directory, args.split)
    base = Settings()
    with tempfile.TemporaryDirectory() as scratch:
        settings = base.model_copy(update={"home": Path(scratch), "local_model_dir": base.model_dir})
        with Grandbo.init(settings, embedding=args.embedding) as grandbo:
            memory = grandbo.org("calibration", create=True)
            load_corpus(memory, dataset, lambda _: None)
            now = reference_time(dataset)
            evidence = {}
            for query in dataset.judged + dataset.unanswerable:
                result = memory.recall(query.text, 10, arm=Arm.RERANKED, now=now,
                                       services=query.metadata.get("services"),
                                       severity=query.metadata.get("severity"))  # fmt: skip
                evidence[query.id] = result.evidence or 0.0
    yes = sorted(evidence[q.id] for q in dataset.judged)
    no = sorted(evidence[q.id] for q in dataset.unanswerable)
    rows = []
    for step in range(10, 81):
        bar = step / 100
        seen = sum(e >= bar for e in yes) / len(yes)
        novel = sum(e < bar for e in no) / len(no)
        rows.append({"bar": bar, "seen_when_answerable": round(seen, 3), "novel_when_unanswerable": round(novel, 3),
                     "balanced_accuracy": round((seen + novel) / 2, 3)})  # fmt: skip
    for row in rows:
        print(json.dumps(row))
    best = max(rows, key=lambda r: (r["balanced_accuracy"], r["seen_when_answerable"]))
    print(json.dumps({"set": dataset.name, "best": best, "answerable": len(yes), "unanswerable": len(no),
                      "answerable_evidence": [round(e, 3) for e in yes],
                      "unanswerable_evidence": [round(e, 3) for e in no]}))  # fmt: skip


if __name__ == "__main__":
    main()
