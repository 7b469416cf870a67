"""One small edit signal's cost once its category holds many large settled signals (probe 19 F6: ~400 length
signals of ~160 KB each; every edit read all of them whole, 202 ms a small edit, linear in the signals kept).

An embedded store gets `--signals` settled length signals of `--size` characters (written as the store keeps
them, folded up to the last complete group, so the seeding costs no folds), then `--edits` small length edits
are timed through `Learning.record_edit`, each followed by the fold it completes. Prints one JSON line.

    python benchmarks/learning_edit.py [--signals 400] [--size 160000] [--edits 12]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path

from grandbo.config import Settings
from grandbo.model import utcnow
from grandbo.ports import DocumentWrite
from grandbo.service import Grandbo
from grandbo.tiers.edit_rules import classify
from grandbo.tiers.learning_model import FOLD_EVERY, FOLDS, SIGNALS, Signal

WORDS = "the checkout service was degraded for users while we rolled back the deploy and restored traffic".split()


def text(size: int, shift: int = 0) -> str:
    return " ".join(WORDS[(shift + i) % len(WORDS)] for i in range(size // 6 + 1))[:size]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--signals", type=int, default=400)
    parser.add_argument("--size", type=int, default=160_000)
    parser.add_argument("--edits", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home), database_url=None, org_storage_limit_mb=4096)
        with Grandbo.init(settings, embedding="deterministic") as grandbo:
            memory = grandbo.org("bench", create=True)
            documents, ids = memory.learning.documents, []
            for n in range(args.signals):
                draft = text(args.size, n)
                category, summary, details = classify(draft, draft[: len(draft) * 6 // 10])
                signal = Signal(id=f"sig-{n:06d}-{secrets.token_hex(3)}", content_type="status-update", author="eve",
                                category=category, summary=summary, details=details, classified_by="rules",
                                draft=draft, edited=draft[: len(draft) * 6 // 10], at=utcnow())  # fmt: skip
                documents.put([DocumentWrite(SIGNALS, signal.id, signal.model_dump(mode="json"),
                                             f"edit.{category.value}", ref=category.value)], "bench")  # fmt: skip
                ids.append(signal.id)
            folded = args.signals - args.signals % FOLD_EVERY
            cursor = {"through": ids[folded - 1], "folded": folded}  # as any release reads it
            documents.put([DocumentWrite(FOLDS, "length", cursor, "learning.folded", ref="length")], "bench")
            learning, took = memory.learning_with(None), []
            for n in range(args.edits):
                draft = text(7000, n)
                started = time.perf_counter()
                learning.record_edit(draft, draft[:3000], content_type="status-update", author="eve")
                took.append((time.perf_counter() - started) * 1000)
    print(json.dumps({
        "signals": args.signals, "size": args.size, "edits": args.edits,
        "first_edit_ms": round(took[0], 1), "edit_p50_ms": round(statistics.median(took), 1),
        "edit_max_ms": round(max(took), 1), "each_ms": [round(t) for t in took],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
