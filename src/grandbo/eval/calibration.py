"""Fitting the verdict's calibration (`grandbo calibrate`) on labelled queries in BEIR layout.

The set's corpus goes into a temporary organization through the write seam, as for `grandbo eval`; every
judged query is a positive (seen before) and every query marked unanswerable (`metadata.answerable: false`)
a negative. Re-ranked recall gives each query's features (`retrieval.verdict.FEATURES`); a logistic
regression (scikit-learn, classes weighted to balance, features standardized) is fit on them and folded
back into one coefficient per raw feature, so recall needs nothing but the stored numbers.
"""

from __future__ import annotations

import secrets
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.embeddings.base import Provider, get_provider
from grandbo.embeddings.cache import CachedProvider
from grandbo.errors import InvalidInputError, InvalidTopicError
from grandbo.eval import beir
from grandbo.eval.runner import load_corpus, reference_time
from grandbo.memory import OrgMemory
from grandbo.model import Arm, Calibration
from grandbo.retrieval import verdict
from grandbo.retrieval.recall import MAX_K
from grandbo.service import Grandbo

# Chosen on the shipped incident set's dev split (leave-one-out, docs/evaluation.md "The verdict").
REGULARIZATION = 10.0
MIN_PER_CLASS = 3


@dataclass(frozen=True)
class Labelled:
    query_id: str
    values: dict[str, float]
    answerable: bool


def collect(memory: OrgMemory, dataset: beir.Dataset) -> list[Labelled]:
    """Each judged or unanswerable query's verdict features from re-ranked recall (every candidate)."""
    now = reference_time(dataset)
    rows: list[Labelled] = []
    for query in dataset.judged + dataset.unanswerable:
        try:
            result = memory.recall(query.text, MAX_K, arm=Arm.RERANKED, now=now,
                                   services=query.metadata.get("services"),
                                   severity=query.metadata.get("severity"))  # fmt: skip
        except InvalidTopicError:
            continue
        values = verdict.features(
            (hit.why.vector.similarity if hit.why.vector else None for hit in result.hits),
            (hit.why.lexical.coverage if hit.why.lexical else None for hit in result.hits),
        )
        rows.append(Labelled(query.id, values, not query.marked_unanswerable))
    return rows


def fit(rows: Sequence[Labelled], provider: str, model: str, fitted_on: str) -> Calibration:
    """A logistic calibration over `rows`; refused with the remedy when either class is too small."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    positives = sum(1 for row in rows if row.answerable)
    negatives = len(rows) - positives
    _enough(positives, negatives)
    x = np.array([[row.values[name] for name in verdict.FEATURES] for row in rows], dtype=np.float64)
    y = np.array([1 if row.answerable else 0 for row in rows])
    scaler = StandardScaler().fit(x)
    scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    model_ = LogisticRegression(C=REGULARIZATION, class_weight="balanced").fit((x - scaler.mean_) / scale, y)
    coefficients = model_.coef_[0] / scale
    intercept = float(model_.intercept_[0] - np.sum(model_.coef_[0] * scaler.mean_ / scale))
    return Calibration(
        provider=provider, model=model, features=list(verdict.FEATURES),
        coefficients=[round(float(c), 6) for c in coefficients], intercept=round(intercept, 6),
        fitted_on=f"{fitted_on}: {positives} answerable, {negatives} unanswerable queries",
    )  # fmt: skip


def _enough(positives: int, negatives: int) -> None:
    if positives < MIN_PER_CLASS or negatives < MIN_PER_CLASS:
        raise InvalidInputError(
            f"Calibrating needs at least {MIN_PER_CLASS} answerable (judged) and {MIN_PER_CLASS} unanswerable "
            f"queries; got {positives} and {negatives}. Mark questions your memory cannot answer with "
            '"metadata": {"answerable": false} in queries.jsonl (and their split with "split").',
            detail={"answerable": positives, "unanswerable": negatives},
        )


def scores(rows: Sequence[Labelled], calibration: Calibration) -> dict[str, Any]:
    """How the verdict does on `rows`: precision and recall of "seen before", the share of unanswerable
    queries said novel, and the separation (mean probability of each class, and the AUC)."""
    said = {row.query_id: verdict.probability(calibration, row.values) >= calibration.threshold for row in rows}
    p = {row.query_id: verdict.probability(calibration, row.values) for row in rows}
    yes = [row for row in rows if row.answerable]
    no = [row for row in rows if not row.answerable]
    said_seen = [row for row in rows if said[row.query_id]]
    return {
        "seen_before_when_answerable": round(statistics.fmean(said[r.query_id] for r in yes), 4) if yes else None,
        "novel_when_unanswerable": round(statistics.fmean(not said[r.query_id] for r in no), 4) if no else None,
        "precision_seen_before": (
            round(sum(r.answerable for r in said_seen) / len(said_seen), 4) if said_seen else None
        ),
        "answerable_mean_probability": round(statistics.fmean(p[r.query_id] for r in yes), 4) if yes else None,
        "unanswerable_mean_probability": round(statistics.fmean(p[r.query_id] for r in no), 4) if no else None,
        "auc": _auc([p[r.query_id] for r in yes], [p[r.query_id] for r in no]),
        "answerable": len(yes),
        "unanswerable": len(no),
    }


def _auc(yes: Sequence[float], no: Sequence[float]) -> float | None:
    """The separation: the chance that an answerable query scores above an unanswerable one (ties half)."""
    if not yes or not no:
        return None
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in yes for b in no)
    return round(wins / (len(yes) * len(no)), 4)


def labelled_queries(directory: Path, settings: Settings, embedding: str, split: str, cache: bool = True) -> tuple[
    beir.Dataset, Provider, list[Labelled]
]:  # fmt: skip
    """Load the set into a temporary organization and collect the split's labelled features."""
    dataset = beir.load(directory, split)
    _enough(len(dataset.judged), len(dataset.unanswerable))  # before the corpus is embedded, which takes minutes
    with tempfile.TemporaryDirectory(prefix="grandbo-calibrate-") as scratch:
        run_settings = settings.at_home(Path(scratch)).model_copy(update={"database_url": None})
        provider: Provider = get_provider(embedding, settings)
        cached = CachedProvider(provider, settings.home / "cache" / "embeddings.db") if cache else None
        grandbo = Grandbo.init(run_settings, embedding=embedding, provider=cached or provider)
        org_id = f"calibrate-{secrets.token_hex(4)}"
        try:
            memory = grandbo.org(org_id, create=True)
            load_corpus(memory, dataset, lambda _: None)
            rows = collect(memory, dataset)
        finally:
            grandbo.drop_org(org_id)
            grandbo.close()
            if cached:
                cached.close()
    return dataset, provider, rows
