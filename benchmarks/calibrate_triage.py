"""Calibrate the triage plan's confidence formula on the shipped incident set: fit on the dev split, report
on the test split.

    confidence = sigmoid(a + b * evidence + c / rank)        (grandbo.triage.evidence)

Every query of a split (answerable and unanswerable) is triaged as an alert (its text, its metadata's
service and severity), without an LLM, through `OrgMemory.triage`. A runbook suggestion is correct when
the runbook is one a judged entry of the query is or used (meta.runbook_id); a mechanism is correct when
its incident is the incident of a judged entry. (a, b, c) are fitted per kind by maximum likelihood
(scipy), then the test split is scored with them: log loss, Brier score against the base rate's, expected
calibration error over five bins, and how often the first runbook is right.

    python benchmarks/calibrate_triage.py [--embedding local]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.cache import CachedProvider
from grandbo.eval import beir
from grandbo.eval.runner import load_corpus, reference_time, shipped_set
from grandbo.memory import OrgMemory
from grandbo.retrieval.rerank import runbook_of
from grandbo.service import Grandbo
from grandbo.triage import evidence

Rows = dict[str, list[tuple[float, int, int]]]  # kind -> (evidence, rank, correct)


def collect(memory: OrgMemory, dataset: beir.Dataset) -> tuple[Rows, dict[str, int]]:
    rows: Rows = {"runbook": [], "mechanism": []}
    first = {"queries_with_a_right_runbook": 0, "first_runbook_right": 0, "answerable": 0, "unanswerable_plans": 0,
             "unanswerable": 0}  # fmt: skip
    now = reference_time(dataset)
    for query in dataset.judged + dataset.unanswerable:
        services = query.metadata.get("services") or [None]
        alert = {"summary": query.text, "service": services[0], "severity": query.metadata.get("severity")}
        plan = memory.triage(alert, narrate=False, now=now)
        judged = memory.get_many(list(dataset.qrels.get(query.id, {})))
        runbooks = {rb for rb in (runbook_of(entry) for entry in judged.values()) if rb}
        incidents = {i for i in (evidence.incident_of(entry) for entry in judged.values()) if i}
        cited = {c.id: c for c in plan.citations}
        for runbook in plan.runbooks:
            best = cited[runbook.cites[0]]
            rows["runbook"].append((best.evidence, best.rank, int(runbook.id in runbooks)))
        for mechanism in plan.mechanisms:
            best = cited[mechanism.cites[0]]
            rows["mechanism"].append((best.evidence, best.rank, int(mechanism.incident_id in incidents)))
        if query.marked_unanswerable:
            first["unanswerable"] += 1
            first["unanswerable_plans"] += int(bool(plan.runbooks or plan.mechanisms))
        else:
            first["answerable"] += 1
        if runbooks:
            first["queries_with_a_right_runbook"] += 1
            first["first_runbook_right"] += int(bool(plan.runbooks) and plan.runbooks[0].id in runbooks)
    return rows, first


def _features(rows: list[tuple[float, int, int]]) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([[1.0, e, 1.0 / max(r, 1)] for e, r, _ in rows])
    y = np.array([c for _, _, c in rows], dtype=float)
    return x, y


def fit(rows: list[tuple[float, int, int]]) -> tuple[float, float, float]:
    x, y = _features(rows)

    def loss(w: np.ndarray) -> float:
        z = x @ w
        return float(np.mean(np.logaddexp(0, z) - y * z) + 1e-3 * float(w[1:] @ w[1:]))

    found = minimize(loss, np.zeros(3), method="BFGS")
    return tuple(round(float(v), 3) for v in found.x)  # type: ignore[return-value]


def score(rows: list[tuple[float, int, int]], constants: tuple[float, float, float]) -> dict[str, Any]:
    if not rows:
        return {"suggestions": 0}
    p = np.array([evidence.confidence(constants, e, r) for e, r, _ in rows])
    y = np.array([c for _, _, c in rows], dtype=float)
    eps = 1e-6
    base = float(y.mean())
    bins = np.minimum((p * 5).astype(int), 4)
    ece = sum(
        abs(p[bins == b].mean() - y[bins == b].mean()) * (bins == b).mean() for b in range(5) if (bins == b).any()
    )
    return {
        "suggestions": len(rows),
        "correct_rate": round(base, 4),
        "mean_confidence": round(float(p.mean()), 4),
        "log_loss": round(float(-np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))), 4),
        "brier": round(float(np.mean((p - y) ** 2)), 4),
        "brier_base_rate": round(float(np.mean((base - y) ** 2)), 4),
        "ece_5_bins": round(float(ece), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedding", default="local")
    args = parser.parse_args()
    settings = Settings()
    provider = get_provider(args.embedding, settings)
    cached = CachedProvider(provider, settings.home / "cache" / "embeddings.db")
    out: dict[str, Any] = {"embedding": args.embedding}
    with tempfile.TemporaryDirectory(prefix="grandbo-calibrate-") as scratch:
        # Budgets out of the way: the formula is fitted on re-ranked recall, whatever the machine's load.
        run = settings.at_home(Path(scratch)).model_copy(
            update={"triage_recall_budget_ms": 600_000.0, "triage_budget_ms": 600_000.0}
        )
        with Grandbo.init(run, embedding=args.embedding, provider=cached) as grandbo:
            memory = grandbo.org("calibrate", create=True)
            load_corpus(memory, beir.load(shipped_set(), "dev+test"), lambda _: None)
            dev_rows, dev_first = collect(memory, beir.load(shipped_set(), "dev"))
            test_rows, test_first = collect(memory, beir.load(shipped_set(), "test"))
    cached.close()
    for kind, current in (("runbook", evidence.RUNBOOK_CONFIDENCE), ("mechanism", evidence.MECHANISM_CONFIDENCE)):
        fitted = fit(dev_rows[kind])
        out[kind] = {
            "fitted_on_dev": fitted,
            "in_code": current,
            "dev": score(dev_rows[kind], fitted),
            "test": score(test_rows[kind], fitted),
            "test_with_code_constants": score(test_rows[kind], current),
        }
    out["dev_plans"], out["test_plans"] = dev_first, test_first
    print(json.dumps(out, indent=1, default=lambda v: list(v) if isinstance(v, tuple) else str(v)))
    assert all(math.isfinite(v) for v in out["runbook"]["fitted_on_dev"])


if __name__ == "__main__":
    main()
