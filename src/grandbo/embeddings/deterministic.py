"""A hash-based provider for tests and benchmarks: same text, same vector, on every machine.

Each lexical term is hashed to one of `dimension` buckets with a sign (feature hashing), weighted by
1 + ln(tf), and the vector is normalised. Texts that share terms are similar; texts that share none
are near-orthogonal. It knows no synonyms, so it is no substitute for a real model in evaluations.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from grandbo.config import Settings
from grandbo.embeddings.base import Purpose, register
from grandbo.retrieval.text import terms

DIMENSION = 384


@lru_cache(maxsize=500_000)
def _bucket(term: str, dimension: int) -> tuple[int, float]:
    digest = hashlib.blake2b(term.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dimension, 1.0 if (value >> 63) & 1 else -1.0


class DeterministicProvider:
    name = "deterministic"
    model = "feature-hash-v1"
    min_similarity = 0.1
    # Calibrated on the shipped incident set (benchmarks/calibrate_seen_before.py --embedding deterministic).
    seen_before_bar = 0.31

    def __init__(self, dimension: int = DIMENSION) -> None:
        self.dimension = dimension

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[np.ndarray]:
        out = []
        for text in texts:
            counts = Counter(terms(text))
            if not counts:
                out.append(np.zeros(self.dimension, dtype=np.float32))
                continue
            buckets = [_bucket(term, self.dimension) for term in counts]
            index = np.fromiter((bucket for bucket, _ in buckets), dtype=np.int64, count=len(buckets))
            sign = np.fromiter((sign for _, sign in buckets), dtype=np.float64, count=len(buckets))
            weight = 1.0 + np.log(np.fromiter(counts.values(), dtype=np.float64, count=len(counts)))
            vector = np.bincount(index, weights=sign * weight, minlength=self.dimension).astype(np.float32)
            norm = float(np.linalg.norm(vector))
            out.append(vector / norm if norm > 0 else vector)
        return out


@register("deterministic")
def _factory(settings: Settings) -> DeterministicProvider:
    return DeterministicProvider()
