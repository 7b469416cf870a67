"""The embedding Provider protocol and the registry that finds providers by explicit name.

There is no default provider and no fallback between providers: a store records the space
(provider, model, dimension) it was created with, and vectors from two spaces never meet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import structlog

from grandbo.config import Settings
from grandbo.errors import (
    EmbeddingCountError,
    EmbeddingDimensionError,
    EmbeddingValueError,
    GrandboError,
    ProviderMismatchError,
    ProviderUnavailableError,
    UnknownProviderError,
)
from grandbo.model import EmbeddingSpace

log = structlog.get_logger(__name__)

Purpose = Literal["document", "query"]
Matrix = npt.NDArray[np.float32]
FLOAT32_MAX = float(np.finfo(np.float32).max)  # ~3.4e38: a number past it becomes Infinity as a float32


def as_float32(values: Any) -> Matrix | None:
    """`values` (numbers, or an array of them) as float32, or None when one is not a number a float32 holds: NaN,
    Infinity, or past FLOAT32_MAX. Checked before the cast, which turned 1e308 into Infinity with numpy's
    "RuntimeWarning: overflow encountered in cast" on stderr (`grandbo import-events`, probe 20b)."""
    try:
        wide = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # not numbers, or an integer past any float
        return None
    if not np.isfinite(wide).all() or (wide.size and float(np.abs(wide).max()) > FLOAT32_MAX):
        return None
    return wide.astype(np.float32)


Vectors = Sequence[Sequence[float]] | Sequence[npt.NDArray[np.floating[Any]]]


@runtime_checkable
class Provider(Protocol):
    """Turns texts into vectors of one fixed dimension."""

    name: str
    model: str
    dimension: int
    min_similarity: float
    """Cosine floor below which a match is noise for this model (the vector arm's default cutoff)."""

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> Vectors:
        """One vector per text, in order. Raises an EmbeddingError subclass on failure."""
        ...


def capped_batch(provider: Provider, size: int) -> int:
    """`size` texts a provider call (GRANDBO_EMBED_BATCH_SIZE), at most the provider's documented limit of a request
    (`max_batch`, where it has one: Voyage's 1,000): a batch past it is refused whole (HTTP 400) and was asked again in
    halves on every call. Logged once, when capped, with the remedy."""
    most = getattr(provider, "max_batch", None)
    if not isinstance(most, int) or size <= most:
        return size
    log.warning("embedding.batch_capped", provider=provider.name, batch_size=size, max_batch=most,
                remedy=f"the provider takes at most {most} texts a request: set GRANDBO_EMBED_BATCH_SIZE to {most} or "
                "less (each batch is sent in parts of that size meanwhile)")  # fmt: skip
    return most


def space_of(provider: Provider) -> EmbeddingSpace:
    return EmbeddingSpace(provider=provider.name, model=provider.model, dimension=provider.dimension)


def space_mismatch(recorded: EmbeddingSpace, wanted: str) -> ProviderMismatchError:
    """The error of a provider named for a store created with another one's space."""
    return ProviderMismatchError(
        f"This store was created with the embedding space {recorded}, not {wanted!r}. Vectors of two "
        f"spaces never mix: keep {recorded.provider!r}, or migrate with `grandbo reembed --embedding {wanted}` "
        "(re-embeds every entry).",
        detail={"store_space": str(recorded), "requested": wanted},
    )


def embed_checked(provider: Provider, texts: Sequence[str], purpose: Purpose = "document") -> list[Matrix | None]:
    """Embed and check the answer as a whole: it is used only when it holds one vector per text, each of the
    provider's dimension and all finite; anything else is an EmbeddingError for the whole batch (nothing may be
    written: an answer wrong in one place cannot be trusted to say which vector is whose), logged as
    `embedding.unusable_answer` with what was wrong. An all-zero vector is the provider's honest answer for a
    text it cannot embed (stopwords only, for the deterministic provider): None in its place, so that the caller
    marks that entry unembeddable (lexical only) and writes the others.
    """
    vectors = provider.embed(texts, purpose)
    if len(vectors) != len(texts):
        _unusable(provider, f"{len(vectors)} vectors for {len(texts)} texts")
        raise EmbeddingCountError(
            f"{provider.name} returned {len(vectors)} vectors for {len(texts)} texts; none were written. "
            "The entries stay searchable lexically and the jobs will be retried.",
            detail={"provider": provider.name, "expected": len(texts), "received": len(vectors)},
        )
    out: list[Matrix | None] = []
    for position, vector in enumerate(vectors):
        wide: npt.NDArray[np.float64] | None
        try:
            wide = np.asarray(vector, dtype=np.float64)
        except OverflowError:  # an integer no float holds (JSON's are unbounded): out of range, not a wrong shape
            wide = None
        except (TypeError, ValueError):
            wide = np.zeros(0)  # not a list of numbers: reported as a wrong shape below
        if wide is not None and wide.shape != (provider.dimension,):
            problem = f"a vector of shape {wide.shape} at position {position}, not ({provider.dimension},)"
            _unusable(provider, problem)
            raise EmbeddingDimensionError(
                f"{provider.name} answered with {problem}, so nothing of that answer was used (entries stay "
                "stored, found by their words, and their embed jobs are retried); if it persists, check the "
                "provider's configured dimension.",
                detail={"provider": provider.name, "dimension": provider.dimension, "position": position},
            )
        array = None if wide is None else as_float32(wide)
        if array is None:
            problem = f"a vector with NaN, infinite or out-of-range values (past ±3.4e38) at position {position}"
            _unusable(provider, problem)
            raise EmbeddingValueError(
                f"{provider.name} answered with {problem}, so nothing of that answer was used (entries stay "
                "stored, found by their words, and their embed jobs are retried).",
                detail={"provider": provider.name, "position": position},
            )
        # An all-zero vector has no direction: cosine cannot rank it, so it is never written or counted readable.
        out.append(array if np.any(array) else None)
    return out


CANARY = "disk full on the primary database"
"""A text of no tenant's that every provider embeds: asked alone when both halves of a failed batch fail too, it tells
a provider that refuses every request (the batch fails whole) from several texts it refuses (halved on)."""
ACCOUNT_REFUSED = frozenset({401, 402, 403, 404})  # a provider's statuses that refuse the account, not a text


def texts_fault(error: BaseException) -> bool:
    """Whether a batch that failed with `error` may have failed for one of its texts (HTTP 400 for a text too long or
    caught by a content filter; an answer unusable in one place), so that its texts asked apart may fare otherwise:
    any Exception but an outage (ProviderUnavailableError) or an account refused (HTTP 401-404; or so said by its
    provider's error code, `refused` in the detail: Bedrock's ValidationException about the model)."""
    if not isinstance(error, Exception) or isinstance(error, ProviderUnavailableError):
        return False
    if not isinstance(error, GrandboError):
        return True
    return not (error.detail.get("status") in ACCOUNT_REFUSED or error.detail.get("refused") == "account")


def _unusable(provider: Provider, problem: str) -> None:
    log.warning("embedding.unusable_answer", provider=provider.name, model=provider.model, problem=problem)


def check_query_vector(provider: Provider, vector: Matrix | None) -> Matrix:
    if vector is None:
        raise EmbeddingValueError(
            f"{provider.name} gave the topic an all-zero vector (no words it can embed), so the vector arm cannot "
            "rank by it; the lexical arm answers alone.",
            detail={"provider": provider.name, "dimension": provider.dimension},
        )
    return vector


def embed_query(provider: Provider, topic: str) -> Matrix:
    """A recall topic's vector (`check_query_vector`: none for an all-zero one)."""
    return check_query_vector(provider, embed_checked(provider, [topic], "query")[0])


Factory = Callable[[Settings], Provider]
_REGISTRY: dict[str, Factory] = {}


def register(name: str) -> Callable[[Factory], Factory]:
    """Register a provider factory under an explicit name."""

    def decorate(factory: Factory) -> Factory:
        _REGISTRY[name] = factory
        return factory

    return decorate


def provider_names() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def get_provider(name: str | None, settings: Settings) -> Provider:
    """The provider registered as `name`. The name is required and has no default on purpose."""
    _load_builtin()
    valid = ", ".join(sorted(_REGISTRY))
    if not name:
        raise UnknownProviderError(
            f"No embedding provider named. Choose one explicitly ({valid}) with --embedding or "
            "GRANDBO_EMBEDDING_PROVIDER; there is no default, so that vectors never mix by accident.",
            detail={"valid": sorted(_REGISTRY)},
        )
    factory = _REGISTRY.get(name)
    if factory is None:
        raise UnknownProviderError(
            f"Unknown embedding provider {name!r}. Valid providers: {valid}.",
            detail={"name": name, "valid": sorted(_REGISTRY)},
        )
    return factory(settings)


def _load_builtin() -> None:
    # Importing the modules registers them; each keeps its heavy imports inside the provider.
    from grandbo.embeddings import bedrock, deterministic, local, openai, voyage  # noqa: F401
