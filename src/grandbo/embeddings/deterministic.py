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
_CHUNK = 4_096  # texts per bincount: bounds the float64 work matrix (12 MB)


@lru_cache(maxsize=500_000)
def _bucket(term: str, dimension: int) -> tuple[int, float]:
    digest = hashlib.blake2b(term.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dimension, 1.0 if (value >> 63) & 1 else -1.0


class DeterministicProvider:
    name = "deterministic"
    model = "feature-hash-v1"
    min_similarity = 0.1

    def __init__(self, dimension: int = DIMENSION) -> None:
        self.dimension = dimension

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[np.ndarray]:
        out: list[np.ndarray] = []
        for start in range(0, len(texts), _CHUNK):
            out.extend(self._embed(texts[start : start + _CHUNK]))
        return out

    def _embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        # One bincount over the chunk: row r's term buckets land at r * dimension + bucket.
        dimension = self.dimension
        buckets: list[tuple[int, float]] = []
        counts: list[int] = []
        lengths: list[int] = []
        for text in texts:
            tally = Counter(terms(text))
            lengths.append(len(tally))
            buckets += [_bucket(term, dimension) for term in tally]
            counts += tally.values()
        if not buckets:
            return [np.zeros(dimension, dtype=np.float32) for _ in texts]
        pairs = np.array(buckets, dtype=np.float64)
        rows = np.repeat(np.arange(len(texts)), lengths)
        weights = pairs[:, 1] * (1.0 + np.log(np.array(counts, dtype=np.float64)))
        slots = rows * dimension + pairs[:, 0].astype(np.int64)
        matrix = np.bincount(slots, weights=weights, minlength=len(texts) * dimension)
        matrix = matrix.reshape(len(texts), dimension).astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        return list(matrix)


@register("deterministic")
def _factory(settings: Settings) -> DeterministicProvider:
    return DeterministicProvider()
