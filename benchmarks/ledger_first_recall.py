"""The first re-ranked recall of an org of many ledger outcomes in a fresh process, and another org's recalls meanwhile
(the snapshot read the org's whole ledger for its win rates: 1.6 s alone at 100,000 outcomes, 3.2-6.8 s at load 8).

    python benchmarks/ledger_first_recall.py [--backend sqlite|postgres] [--outcomes 100000] [--rounds 3] [--old SRC]

The store is `ledger_first_view`'s (a `victim` org of 2,000 entries; a `big` org of 200 entries, 20 runbooks and the
outcomes, each service's outcomes of one runbook). Each round starts a fresh process per tree (`--old`: another tree's
`src`, alternated with this one's); scipy is imported and the big org's index made first (a hybrid recall), so the
time is the re-ranking's facts. The victim recalls k=5 every 20 ms, 4 s alone, then while a thread runs the big org's
first re-ranked recall. Prints one JSON line a run: that recall's time and CPU (its thread's), the next one's, the
one after a thumbs-up, whether the ledger was read whole, a digest of every answer (hits, scores, explanations: equal
across trees), and the victim's p50 / p95 / max alone and meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any

from ledger_first_view import TOPICS, _percentiles, alternated, victim_recalls, whole_reads_counted

from grandbo.config import Settings
from grandbo.service import Grandbo

ASKED = [("check mitigate verify the runbook on svc-7 after the failover", ["svc-7"]),
         ("check mitigate verify the runbook for the checkout errors", None),
         ("disk full on the kafka brokers, mitigate and verify", ["svc-12", "svc-13"])]  # fmt: skip


def _answer(result: Any) -> list[Any]:
    return [(hit.entry.id, hit.composite, hit.why.model_dump(mode="json")) for hit in result.hits]


def recall(settings: Settings) -> dict[str, Any]:
    """In this (fresh) process: the victim alone, then meanwhile the big org's first re-ranked recall."""
    made = whole_reads_counted()
    with Grandbo.open(settings) as grandbo:
        victim, big = grandbo.org("victim"), grandbo.org("big")
        for n in range(10):
            victim.recall(TOPICS[n % 4], k=5)
        big.recall(ASKED[0][0], k=5, arm="hybrid")  # its index made: the re-ranking alone is timed

        alone, out, answers, done = victim_recalls(victim, None), {}, [], threading.Event()

        def first_recall() -> None:
            cpu, started = time.thread_time(), time.perf_counter()
            answers.append(_answer(big.recall(ASKED[0][0], k=5, services=ASKED[0][1])))
            out["first_recall_ms"] = round((time.perf_counter() - started) * 1000, 1)
            out["first_recall_cpu_ms"] = round((time.thread_time() - cpu) * 1000, 1)
            done.set()

        thread = threading.Thread(target=first_recall)
        thread.start()
        during = victim_recalls(victim, done)
        thread.join()
        started = time.perf_counter()
        answers.extend(_answer(big.recall(topic, k=5, services=services)) for topic, services in ASKED[1:])
        out["next_recalls_ms"] = round((time.perf_counter() - started) * 1000 / (len(ASKED) - 1), 1)
        out["read_whole"] = len(made)
        big.ledger.record("RB-07", "rated", rating=1, actor="bench")
        started = time.perf_counter()
        answers.append(_answer(big.recall(ASKED[0][0], k=5, services=ASKED[0][1])))
        out["after_thumbs_up_ms"] = round((time.perf_counter() - started) * 1000, 1)
        out["digest"] = hashlib.sha1(json.dumps(answers).encode()).hexdigest()[:12]
        return {**out, "victim_alone": _percentiles(alone), "victim_during": _percentiles(during)}


if __name__ == "__main__":
    alternated(__file__, "ledger_first_recall", "recall", recall)
