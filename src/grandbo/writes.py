"""What the write seam checks and derives before it appends: ids, idempotency keys, precomputed vectors."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import structlog
from pydantic_core import to_json

from grandbo.errors import InvalidInputError
from grandbo.model import EmbeddingSpace, NewEntry, text_problem
from grandbo.ports import NewEvent

log = structlog.get_logger("grandbo.memory")


def run_guarded(task: Callable[[], None]) -> None:
    """Run a deferred task now; log its failure instead of raising it."""
    try:
        task()
    except Exception as error:
        log.warning("memory.deferred_task_failed", error=f"{type(error).__name__}: {str(error)[:300]}")


def checked_key(key: str) -> str:
    if not 1 <= len(key) <= 200 or text_problem(key) or key != key.strip():
        raise InvalidInputError(
            "An idempotency key is 1 to 200 characters of text without surrounding spaces (a UUID, say).",
            detail={"idempotency_key": key[:200]},
        )
    return key


def request_hash(entries: Sequence[NewEntry]) -> str:
    """What a retry must repeat: the validated entries, ids and all (a generated id is not part of it)."""
    return hashlib.sha256(to_json([entry.model_dump(mode="json") for entry in entries])).hexdigest()


def new_entry_id() -> str:
    """A time-ordered, collision-resistant id: mem-<ms since epoch, hex>-<random>."""
    return f"mem-{time.time_ns() // 1_000_000:011x}-{secrets.token_hex(4)}"


def checked_vectors(
    events: Sequence[NewEvent], vectors: Sequence[npt.ArrayLike | None], space: EmbeddingSpace | None
) -> dict[str, npt.NDArray[np.float32]]:
    """Precomputed vectors, one per event (None where absent), checked against the store's space: each must be
    `space.dimension` finite numbers, not all zero; returned by entry id."""
    if len(vectors) != len(events) or space is None:
        raise InvalidInputError(
            f"{len(vectors)} vectors for {len(events)} entries: give one per entry (None where absent).",
            detail={"vectors": len(vectors), "entries": len(events)},
        )
    present = [(position, vector) for position, vector in enumerate(vectors) if vector is not None]
    if not present:
        return {}
    try:  # the common case, checked as one matrix
        matrix = np.asarray([vector for _, vector in present], dtype=np.float32)
        valid = matrix.shape == (len(present), space.dimension) and bool(np.isfinite(matrix).all())
        valid = valid and bool(np.any(matrix, axis=1).all())  # an all-zero vector has no direction
    except (TypeError, ValueError):  # ragged or not numbers: find the culprit below
        valid = False
    if not valid:
        for position, vector in present:
            try:
                array = np.asarray(vector, dtype=np.float32)
                shape = str(array.shape)
                fine = array.shape == (space.dimension,) and bool(np.isfinite(array).all()) and bool(array.any())
            except (TypeError, ValueError):
                shape, fine = "unknown (not numbers)", False
            if not fine:
                raise InvalidInputError(
                    f"Vector {position} has shape {shape}, non-finite values or only zeros; this store's "
                    f"space is {space}, so each vector must be {space.dimension} finite numbers, not all zero.",
                    detail={"position": position, "dimension": space.dimension},
                )
        raise InvalidInputError(  # unreachable: some vector above is the culprit
            f"The vectors do not form a {len(present)} x {space.dimension} matrix of finite numbers.",
            detail={"dimension": space.dimension},
        )
    return {events[position].entry_id: row for (position, _), row in zip(present, matrix, strict=True)}
