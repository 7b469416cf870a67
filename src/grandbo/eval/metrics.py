"""Ranking metrics with the usual BEIR semantics (linear gain, judged documents only)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def ndcg_at(ranked: Sequence[str], relevance: Mapping[str, int], k: int = 10) -> float:
    """Normalised discounted cumulative gain of the top `k` (gain = graded relevance; a negative grade, TREC's
    "judged not relevant", gains nothing, so the score stays within 0..1)."""
    dcg = sum(max(relevance.get(doc, 0), 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted((grade for grade in relevance.values() if grade > 0), reverse=True)[:k]
    best = sum(grade / math.log2(rank + 2) for rank, grade in enumerate(ideal))
    return dcg / best if best else 0.0


def recall_at(ranked: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top `k`."""
    relevant = {doc for doc, grade in relevance.items() if grade > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at(ranked: Sequence[str], relevance: Mapping[str, int], k: int = 10) -> float:
    """Reciprocal rank of the first relevant document in the top `k` (0 when none)."""
    for rank, doc in enumerate(ranked[:k], start=1):
        if relevance.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
