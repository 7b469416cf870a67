"""Where redaction's CPU goes on realistic text: every string of the public post-mortems, of an import's records
(`import_history.py`'s export) and of the eval bench's synthetic entries, masked by the default patterns.

    PYTHONPATH=src python benchmarks/redaction_parts.py [../shared/data/public-incidents.jsonl] [--rounds 5]

Per set of texts: `Redactor.text` per text (process CPU, median of the rounds); the shadow and the masks' search;
per default pattern, the share of texts its prefilter (`needs`) lets through, the share the screen names (its sign
matches; `masking.Screen`, when the code has one), and what its search costs over the texts its prefilter lets
through. Prints one JSON line per set, then a table. Run it with an older tree first on the path to compare.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from import_history import flat, pagerduty_incident  # beside this file

from grandbo import masking
from grandbo.eval.bench import synthetic_entry
from grandbo.masking import Budget, masks, shadow
from grandbo.redaction import DEFAULT_PATTERNS, Redactor


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    if isinstance(value, dict):
        return [text for item in value.values() for text in strings(item)]
    return []


def text_sets(public: Path) -> dict[str, list[str]]:
    rng = random.Random(7)
    entries = [synthetic_entry(rng, number) for number in range(2000)]
    sets = {
        "import_records": [text for n in range(2000) for text in strings(flat(pagerduty_incident(n)))],
        "synthetic_entries": [text for entry in entries for text in (entry.title, entry.body, *entry.tags)],
    }
    if public.is_file():
        sets["public_postmortems"] = [
            text for line in public.read_text().splitlines() for text in strings(json.loads(line))
        ]
    return sets


def cpu(work: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return statistics.median(times)


def measure(name: str, texts: list[str], rounds: int) -> dict[str, Any]:
    redactor = Redactor()
    texts = [text for text in texts if text]
    lowered, shades = [text.lower() for text in texts], [shadow(text) for text in texts]
    screen = masking.Screen(DEFAULT_PATTERNS) if hasattr(masking, "Screen") else None
    screened = [screen.matching(shade) for shade in shades] if screen else None
    us = 1e6 / len(texts)
    out: dict[str, Any] = {
        "set": name,
        "texts": len(texts),
        "chars_median": statistics.median(map(len, texts)),
        "text_us": cpu(lambda: [redactor.text(text) for text in texts], rounds) * us,
        "shadow_us": cpu(lambda: [shadow(text) for text in texts], rounds) * us,
        "masks_us": cpu(lambda: [masks(text, redactor._masks) for text in texts], rounds) * us,
        "screen_us": cpu(lambda: [screen.matching(shade) for shade in shades], rounds) * us if screen else None,
        "patterns": {},
    }
    for index, pattern in enumerate(DEFAULT_PATTERNS):
        passing = [
            (text, shade)
            for text, low, shade in zip(texts, lowered, shades, strict=True)
            if pattern.may_match(text, low)
        ]
        prefilter = cpu(
            lambda p=pattern: [p.may_match(text, low) for text, low in zip(texts, lowered, strict=True)], rounds
        )
        search = cpu(lambda p=pattern, ps=passing: [p.sub(text, shade, Budget()) for text, shade in ps], rounds)
        out["patterns"][pattern.name] = {
            "prefilter_pass": len(passing) / len(texts),
            "screen_pass": sum(index in found for found in screened if found) / len(texts) if screened else None,
            "prefilter_us": prefilter * us,
            "search_us": search * us,  # per text of the set, over the texts the prefilter lets through
            "masked": sum(pattern.sub(text, shade, Budget())[0] != text for text, shade in passing),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("public", nargs="?", type=Path, default=Path("../shared/data/public-incidents.jsonl"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = [measure(name, texts, args.rounds) for name, texts in text_sets(args.public).items()]
    for result in results:
        print(json.dumps(result))
    for result in results:
        print(f"\n{result['set']}: {result['texts']} texts (median {result['chars_median']} chars), "
              f"{result['text_us']:.2f} us a text; shadow {result['shadow_us']:.2f}, masks {result['masks_us']:.2f}, "
              f"screen {result['screen_us'] or 0:.2f} us")  # fmt: skip
        print(f"{'pattern':16} {'prefilter':>9} {'screen':>7} {'prefilter us':>12} {'search us':>10} {'masked':>7}")
        for name, row in result["patterns"].items():
            screen = "-" if row["screen_pass"] is None else f"{row['screen_pass']:.1%}"
            print(f"{name:16} {row['prefilter_pass']:>9.1%} {screen:>7} {row['prefilter_us']:>12.2f} "
                  f"{row['search_us']:>10.2f} {row['masked']:>7}")  # fmt: skip


if __name__ == "__main__":
    main()
