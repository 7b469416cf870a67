"""Fit the verdict's calibration for a provider on a set's dev split and report it on the test split.

Every judged query is "seen before", every query marked unanswerable "no similar past incident"; the
calibration is a logistic regression over the verdict's features (grandbo.retrieval.verdict), fit on dev
only. Prints one JSON line per split (precision and recall of the verdict, the share of unanswerable
queries said novel, the mean probability of each class) and the calibration; `--write` stores it as the
one shipped for that provider (src/grandbo/retrieval/calibrations/PROVIDER.json).

    python benchmarks/calibrate_seen_before.py [DIR] [--embedding local] [--write]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from grandbo.config import Settings
from grandbo.eval.calibration import fit, labelled_queries, scores
from grandbo.eval.runner import shipped_set
from grandbo.retrieval import verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=shipped_set())
    parser.add_argument("--embedding", default="local")
    parser.add_argument("--fit-split", default="dev", help="Fit on this split (never on test).")
    parser.add_argument("--report-split", default="test")
    parser.add_argument("--write", action="store_true", help="Write the shipped calibration of the provider.")
    args = parser.parse_args()
    settings = Settings()
    dataset, provider, dev = labelled_queries(args.directory, settings, args.embedding, args.fit_split)
    calibration = fit(dev, provider.name, provider.model, f"{dataset.name} {args.fit_split}")
    _, _, test = labelled_queries(args.directory, settings, args.embedding, args.report_split)
    for split, rows in ((args.fit_split, dev), (args.report_split, test)):
        print(json.dumps({"set": dataset.name, "split": split, **scores(rows, calibration)}))
    print(json.dumps(calibration.model_dump()))
    if args.write:
        path = verdict.path_for(provider.name)
        path.write_text(json.dumps(calibration.model_dump(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
