"""What redaction costs an import, this tree against another (`--before`, a src directory), alternated round by round
in fresh processes: the process CPU of importing N records (`import_history.py`'s export; a fresh embedded store,
vectors left to the worker, as `grandbo import-from` leaves them) and of the public post-mortems, per record; and
the CPU of masking again every text the import handed the redactor (median of 5 passes), per record.

    PYTHONPATH=src python benchmarks/redaction_ab.py --before <base>/src [--records 2000] [--rounds 4]
        [--public ../shared/data/public-incidents.jsonl]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ab import alternate  # beside this file
from import_history import MAPPING, write_export

from grandbo import redaction
from grandbo.config import Settings
from grandbo.history.importer import import_history
from grandbo.history.public import PUBLIC_MAPPING
from grandbo.history.registry import reader
from grandbo.service import Grandbo


def imported(path: Path, mapping: dict[str, Any], count: int) -> dict[str, float]:
    """Import `path` into a fresh store: CPU per record, and the redaction of the texts it masked, per record."""
    seen: list[str] = []
    original = redaction.Redactor._text

    def kept(self: redaction.Redactor, text: str, budget: Any) -> str:
        seen.append(text)
        return original(self, text, budget)

    redaction.Redactor._text = kept  # type: ignore[method-assign]  # to collect the texts, not to time them
    try:
        with (
            tempfile.TemporaryDirectory() as home,
            Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as g,
        ):
            memory = g.org("ab", create=True)
            started = time.process_time()
            import_history(memory, reader("jsonl"), path, mapping=mapping)
            took = time.process_time() - started
    finally:
        redaction.Redactor._text = original  # type: ignore[method-assign]
    redactor, passes = redaction.Redactor(), []
    for _ in range(5):
        started = time.process_time()
        for text in seen:
            redactor.text(text)
        passes.append(time.process_time() - started)
    return {
        "import_cpu_ms": took / count * 1e3,
        "redaction_us": statistics.median(passes) / count * 1e6,
        "texts": len(seen) / count,
    }


def measure(records: int, public: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        figures = {"export": imported(write_export(Path(folder), records, "jsonl"), MAPPING, records)}
    if public is not None and public.is_file():
        figures["public"] = imported(public, PUBLIC_MAPPING, sum(1 for line in public.open() if line.strip()))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="the src directory of the tree to compare with")
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--public", type=Path, default=Path("../shared/data/public-incidents.jsonl"))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.records, args.public.resolve())))
        return
    options = ["--records", str(args.records), "--public", str(args.public.resolve())]
    alternate(__file__, options, args.before, args.rounds, {"records": args.records})


if __name__ == "__main__":
    main()
