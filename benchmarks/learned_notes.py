"""The context block (and the review queue) of an org that has learned many notes: what each costs once most of
the notes are archived, rejected or waiting for review.

An embedded store (deterministic embeddings) gets N notes in one org, the last 25 in force, the rest archived,
rejected or pending, written as the learning tier writes them (their ref holds their status) and, for the
comparison, with their category alone as their ref (as a release before migration 25 wrote them, which reads as the
code before it did: every note of the org read and validated). Prints one JSON line per N of medians (ms).

    python benchmarks/learned_notes.py [--notes 3000 20000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from grandbo.config import Settings
from grandbo.model import utcnow
from grandbo.ports import DocumentWrite
from grandbo.service import Grandbo
from grandbo.tiers.context import build
from grandbo.tiers.edit_rules import Category
from grandbo.tiers.learning import Learning
from grandbo.tiers.learning_model import NOTES, Note

CATEGORIES = [Category.TONE, Category.STYLE, Category.VOCABULARY, Category.LENGTH, Category.STRUCTURE]
IN_FORCE = 25


def _notes(count: int) -> list[Note]:
    start = utcnow()
    inactive = ("archived", "rejected", "pending", "archived")
    return [
        Note(
            id=f"note-{n:06d}",
            category=CATEGORIES[n % 5],
            part="tone_style",
            text=f"Rule {n}: write it plainly.",
            status="active" if n >= count - IN_FORCE else inactive[n % 4],
            fingerprint=f"print-{n}",
            created_at=start + timedelta(seconds=n),
        )
        for n in range(count)
    ]


def _median_ms(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return round(statistics.median(times) * 1000, 3)


def measure(count: int, repeat: int, *, legacy: bool) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="grandbo-notes-")) / "home"
    with Grandbo.init(Settings(home=home), embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        writes = [Learning._write(note, "note.learned", 0) for note in _notes(count)]
        if legacy:
            writes = [DocumentWrite(NOTES, w.doc_id, w.data, w.event, ref=w.data["category"], expected_version=0)
                      for w in writes]  # fmt: skip
        for start in range(0, len(writes), 500):
            memory.learning.documents.put(writes[start : start + 500], "bench")
        return {
            "context_ms": _median_ms(lambda: build(memory), repeat),
            "pending_ms": _median_ms(memory.learning.pending, repeat),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, nargs="+", default=[3000, 20000])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    for count in args.notes:
        by_status = measure(count, args.repeat, legacy=False)
        by_category = measure(count, args.repeat, legacy=True)
        print(json.dumps({"notes": count, "in_force": IN_FORCE, "status_in_ref": by_status,
                          "category_alone_as_before": by_category}))  # fmt: skip


if __name__ == "__main__":
    main()
