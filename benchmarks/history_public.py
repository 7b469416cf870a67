"""`grandbo eval|calibrate --from-history` measured on the 200 public post-mortems (public-incidents.jsonl).

The file is imported as `grandbo demo --public` imports it (the jsonl reader with the public mapping, through the
importer: unknown dates stay unknown, the category kept as a label) into an org of a temporary embedded store;
then every arm is scored on the org's history set and the verdict is fit on its dev split and reported on its test
split. Prints one JSON line each: the import's report, the set, the eval lines and separations, the calibration's
dev and test scores.

    python benchmarks/history_public.py [../shared/data/public-incidents.jsonl] [--embedding local]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from grandbo.config import Settings
from grandbo.eval.history import build
from grandbo.eval.history_runs import calibrate_history, evaluate_history
from grandbo.history.importer import import_history
from grandbo.history.public import PUBLIC_MAPPING, public_file
from grandbo.history.registry import reader
from grandbo.service import Grandbo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=None)
    parser.add_argument("--embedding", default="local")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grandbo-history-public-") as home:
        settings = Settings(home=Path(home), local_model_dir=Settings().model_dir)
        with Grandbo.init(settings, embedding=args.embedding) as grandbo:
            memory = grandbo.org("public", create=True)
            report = import_history(memory, reader("jsonl"), public_file(args.path), mapping=PUBLIC_MAPPING)
            print(json.dumps(report.to_dict()))
            built = build(memory)
        print(json.dumps(built.summary()))
        scored = evaluate_history(built, settings, args.embedding, cache=False)
        for line in [*scored.lines, *scored.separations]:
            print(json.dumps(line))
        fitted = calibrate_history(built, settings, args.embedding, cache=False)
        print(json.dumps({"split": "dev", **fitted.dev}))
        print(json.dumps({"split": "test", **fitted.test}))
        print(json.dumps(fitted.calibration.model_dump()))


if __name__ == "__main__":
    main()
