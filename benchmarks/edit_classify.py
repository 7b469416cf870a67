"""CPU time of classifying one edit signal (the rules), against the unbounded word diff the rules ran before
(difflib over every word of both texts) in the same run: medians of three, as JSON lines and a table.

    PYTHONPATH=src python benchmarks/edit_classify.py
"""

from __future__ import annotations

import difflib
import json
import random
import statistics
import time

from grandbo.tiers.learning import classify


def _cpu(call) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(3):
        started = time.process_time()
        call()
        times.append(time.process_time() - started)
    return statistics.median(times)


def main() -> None:
    rng = random.Random(7)
    many = [f"w{n}x" for n in range(5000)]
    colours = "red green blue amber violet".split()
    shuffled = [rng.choice(colours) for _ in range(4000)]
    cases = {
        "random rewrite, 100,000 characters": (
            " ".join(rng.choice(many) for _ in range(14000))[:100_000],
            " ".join(rng.choice(many) for _ in range(14000))[:100_000],
        ),
        "4,000 words of a 5-word vocabulary, shuffled": (" ".join(shuffled), " ".join(rng.sample(shuffled, 4000))),
    }
    rows = []
    for name, (draft, edited) in cases.items():
        old, new = draft.lower().split(), edited.lower().split()
        baseline = _cpu(lambda: difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes())  # noqa: B023
        bounded = _cpu(lambda: classify(draft, edited))  # noqa: B023
        row = {"case": name, "category": classify(draft, edited)[0].value, "classify_cpu_s": round(bounded, 4),
               "unbounded_diff_cpu_s": round(baseline, 4), "ratio": round(bounded / baseline, 4)}  # fmt: skip
        rows.append(row)
        print(json.dumps(row))
    print(f"{'case':<48} {'category':<13} {'classify s':>10} {'old diff s':>10} {'ratio':>7}")
    for row in rows:
        print(f"{row['case']:<48} {row['category']:<13} {row['classify_cpu_s']:>10} {row['unbounded_diff_cpu_s']:>10} "
              f"{row['ratio']:>7}")  # fmt: skip


if __name__ == "__main__":
    main()
