"""A document-embedding cache for evaluations and re-imports: the same text in the same space is
embedded once per machine. Query embeddings are never cached, so their timing stays honest."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from grandbo.embeddings.base import Provider, Purpose, space_of


class CachedProvider:
    """Wraps a provider; same name, model and dimension, so vectors stay in the provider's space."""

    def __init__(self, inner: Provider, path: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.dimension = inner.dimension
        self.min_similarity = inner.min_similarity
        self._space = str(space_of(inner))
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (space TEXT, hash TEXT, vector BLOB, PRIMARY KEY (space, hash))"
        )
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[np.ndarray]:
        if purpose != "document":
            return [np.asarray(v, dtype=np.float32) for v in self.inner.embed(texts, purpose)]
        keys = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                rows = self._db.execute(
                    f"SELECT hash, vector FROM vectors WHERE space = ? AND hash IN ({','.join('?' * len(chunk))})",
                    (self._space, *chunk),
                ).fetchall()
                found.update((key, np.frombuffer(blob, dtype="<f4")) for key, blob in rows)
        missing = [i for i, key in enumerate(keys) if key not in found]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            computed = self.inner.embed([texts[i] for i in missing], purpose)
            if len(computed) == len(missing):
                fresh = {
                    keys[i]: np.asarray(vector, dtype=np.float32) for i, vector in zip(missing, computed, strict=True)
                }
                with self._lock:
                    self._db.executemany(
                        "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                        [
                            (self._space, key, v.astype("<f4").tobytes())
                            for key, v in fresh.items()
                            if v.shape == (self.dimension,) and np.all(np.isfinite(v))  # never keep a bad answer
                        ],
                    )
                found.update(fresh)
            else:  # let the caller's count check reject the whole answer
                return [np.asarray(v, dtype=np.float32) for v in computed]
        return [found[key] for key in keys]

    def close(self) -> None:
        self._db.close()
