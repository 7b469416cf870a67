"""Voyage AI embeddings, with the query/document distinction Voyage models are trained for."""

from __future__ import annotations

from collections.abc import Sequence

from grandbo.config import Settings
from grandbo.embeddings._http import post_embeddings
from grandbo.embeddings.base import Purpose, register
from grandbo.errors import ConfigError
from grandbo.http import client


class VoyageProvider:
    name = "voyage"
    min_similarity = 0.2

    def __init__(self, settings: Settings) -> None:
        if settings.voyage_api_key is None:
            raise ConfigError(
                "The voyage provider needs an API key: set GRANDBO_VOYAGE_API_KEY.",
                detail={"setting": "GRANDBO_VOYAGE_API_KEY"},
            )
        self.model = settings.voyage_model
        self.dimension = settings.voyage_dimension
        self._url = settings.voyage_base_url.rstrip("/") + "/embeddings"
        self._headers = {"Authorization": f"Bearer {settings.voyage_api_key.get_secret_value()}"}
        self._timeout = settings.http_timeout_seconds
        self._http = client(self._timeout, self._headers)  # one per provider per process, closed by `close`

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[list[float]]:
        payload = {
            "model": self.model,
            "input": list(texts),
            "input_type": purpose,
            "output_dimension": self.dimension,
        }
        return post_embeddings(self.name, self._http, self._url, payload, self._timeout)

    def close(self) -> None:
        self._http.close()


@register("voyage")
def _factory(settings: Settings) -> VoyageProvider:
    return VoyageProvider(settings)
