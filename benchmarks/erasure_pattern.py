"""What an erasure's pattern (`erased.erasure_pattern`) costs to search a document's stored JSON text: about 200 KB
of a received alert's JSON (its recall quoting the eval corpus's incidents), searched through for each text (one
word, two, with the letters i, k and s Python's case-insensitive match folds, non-ASCII, a text it holds), in
this tree and in the tree of `--before`, alternated round by round, each round a fresh process. Milliseconds per
200 KB, the median of 5 searches a round; the table gives the medians over rounds and their ratio.

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/erasure_pattern.py --before /tmp/main-tree/src [--kb 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TEXTS = ["kiss", "kiss kiss", "Jane Roe", "José Müller", "Жанна Рой", "Zorbax-quell-7731", "orders-db"]
CORPUS = Path(__file__).resolve().parent.parent / "src/grandbo/eval/data/incidents/corpus.jsonl"


def document(kb: int) -> str:
    """A received alert's stored JSON text of `kb` KB: its recall quotes the corpus's incidents as memories."""
    from pydantic_core import to_json

    incidents = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    memories = [
        {"id": i["_id"], "kind": "incident", "title": i["title"], "body": i["text"], "tags": i["metadata"]["services"]}
        for i in incidents
    ]
    recall: list[dict[str, Any]] = []
    while len(to_json({"summary": "orders-db pool exhausted", "recall": recall})) < kb * 1000:
        recall += memories
    return to_json({"summary": "orders-db pool exhausted", "recall": recall}).decode()[: kb * 1000]


def measure(kb: int) -> dict[str, Any]:
    """One round in this process (the tree on its path): ms per search of each text, and its matches."""
    from grandbo.erased import erasure_pattern

    text = document(kb)
    figures = {}
    for erased in TEXTS:
        pattern, times = erasure_pattern(erased), []
        for _ in range(5):
            started = time.perf_counter()
            found = sum(1 for _ in pattern.finditer(text))
            times.append(time.perf_counter() - started)
        figures[erased] = {"ms": round(statistics.median(times) * 1e3, 2), "found": found}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="the src directory of the tree to compare with")
    parser.add_argument("--kb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.kb)))
        return
    trees = {"this": Path(__file__).resolve().parent.parent / "src", **({"before": args.before} if args.before else {})}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        for name, src in trees.items():
            done = subprocess.run(
                [sys.executable, __file__, "--one", "--kb", str(args.kb)],
                env={**os.environ, "PYTHONPATH": str(Path(src).resolve())}, capture_output=True, text=True, check=True,
            )  # fmt: skip
            rounds[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps({"tree": name, "round": round_ + 1, "kb": args.kb, **rounds[name][-1]}), flush=True)
    heading = "".join(f"{name + ' ms':>12}" for name in trees)
    print(f"{'text':<20}{heading}" + ("   ratio  found" if args.before else ""))
    for erased in TEXTS:
        ms = {name: statistics.median(r[erased]["ms"] for r in rounds[name]) for name in trees}
        found = {r[erased]["found"] for name in trees for r in rounds[name]}
        ratio = f"{ms['before'] / ms['this']:>8.1f}  {found}" if args.before else ""
        print(f"{erased:<20}" + "".join(f"{ms[name]:>12.2f}" for name in trees) + ratio)


if __name__ == "__main__":
    main()
