"""What masking secrets at the write seam costs a bulk write: entries/s with the default patterns against the
same org with every default switched off, alternated in one run, medians of the rounds.

    python benchmarks/redaction_cost.py [--entries 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from grandbo.config import Settings
from grandbo.redaction import DEFAULT_NAMES, Redactor
from grandbo.service import Grandbo


def entries(n: int, offset: int) -> list[dict[str, object]]:
    return [
        {"id": f"R{offset + i}", "title": f"checkout-api pool exhausted after deploy {offset + i}",
         "body": "p99 rose to 1200ms on checkout-api; the pool of 10 connections to payments-db was exhausted by "
                 f"retries; host 10.0.{i % 250}.7 restarted, see runbook RB-{i % 40}; rolled back at 09:{i % 60:02d}",
         "tags": ["ERR_POOL_EXHAUSTED"], "services": ["checkout-api"]}
        for i in range(n)
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    texts = [str(e["body"]) for e in entries(args.entries, 0)]
    started = time.perf_counter()
    Redactor().text("\n".join(texts))
    print(f"masking alone: {args.entries / (time.perf_counter() - started):,.0f} bodies/s")
    with tempfile.TemporaryDirectory() as home, Grandbo.init(Settings(home=Path(home)), embedding="deterministic") as g:
        masked, plain = g.org("masked", create=True), g.org("plain", create=True)
        plain.org_settings.set_redaction(disable=list(DEFAULT_NAMES))
        rates: dict[str, list[float]] = {"masked": [], "plain": []}
        for round_ in range(args.rounds):
            for name, memory in (
                (("masked", masked), ("plain", plain)) if round_ % 2 else (("plain", plain), ("masked", masked))
            ):
                batch = entries(args.entries, round_ * args.entries)
                started = time.perf_counter()
                memory.remember_many(batch)
                rates[name].append(args.entries / (time.perf_counter() - started))
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"remember_many of {args.entries} (embedding included), median of {args.rounds}: "
          f"masked {median['masked']:,.0f}/s, plain {median['plain']:,.0f}/s, "
          f"ratio {median['masked'] / median['plain']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
