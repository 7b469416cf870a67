"""One place that turns a hosted provider's HTTP answer into vectors or a clear error."""

from __future__ import annotations

from typing import Any

import httpx

from grandbo.errors import EmbeddingError, ProviderUnavailableError

_RETRYABLE = {408, 409, 425, 429, 500, 502, 503, 504}


def post_embeddings(
    provider: str, http: httpx.Client, url: str, payload: dict[str, Any], timeout: float
) -> list[list[float]]:
    """POST an OpenAI-style embeddings request through the provider's one client (`grandbo.http`) and return
    `data[*].embedding` in input order."""
    try:
        response = http.post(url, json=payload)
    except httpx.TimeoutException as error:
        raise ProviderUnavailableError(
            f"{provider} did not answer within {timeout:g}s ({url}); the entries stay stored and the "
            "embed jobs will be retried. Raise GRANDBO_HTTP_TIMEOUT_SECONDS if the service is just slow.",
            detail={"provider": provider, "url": url},
        ) from error
    except httpx.HTTPError as error:
        raise ProviderUnavailableError(
            f"{provider} is unreachable at {url}: {error}. The entries stay stored and the embed jobs "
            "will be retried; check the base URL and the network.",
            detail={"provider": provider, "url": url},
        ) from error
    if response.status_code != 200:
        kind = ProviderUnavailableError if response.status_code in _RETRYABLE else EmbeddingError
        remedy = "it will be retried" if kind is ProviderUnavailableError else "check the API key, model and dimension"
        raise kind(
            f"{provider} answered HTTP {response.status_code}: {response.text[:300]}; {remedy}.",
            detail={"provider": provider, "status": response.status_code},
        )
    try:
        data = response.json()["data"]
        ordered = sorted(data, key=lambda item: item.get("index", 0))
        return [list(item["embedding"]) for item in ordered]
    except (ValueError, KeyError, TypeError) as error:
        raise EmbeddingError(
            f"{provider} answered with a body that is not an embeddings response: {error}",
            detail={"provider": provider},
        ) from error
