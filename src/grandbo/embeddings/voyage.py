"""Voyage AI embeddings, with the query/document distinction Voyage models are trained for."""

from __future__ import annotations

from collections.abc import Sequence

from grandbo.config import Settings
from grandbo.embeddings._http import HostedProvider
from grandbo.embeddings.base import Purpose, register
from grandbo.errors import ConfigError


class VoyageProvider(HostedProvider):
    name = "voyage"
    min_similarity = 0.2
    max_batch = 1000  # texts a request, as Voyage documents its embeddings API (`base.capped_batch`)

    def __init__(self, settings: Settings) -> None:
        if settings.voyage_api_key is None:
            raise ConfigError(
                "The voyage provider needs an API key: set GRANDBO_VOYAGE_API_KEY.",
                detail={"setting": "GRANDBO_VOYAGE_API_KEY"},
            )
        self.model = settings.voyage_model
        self.dimension = settings.voyage_dimension
        super().__init__(
            settings.voyage_base_url, settings.voyage_api_key.get_secret_value(), settings.http_timeout_seconds
        )

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[list[float]]:
        payload = {
            "model": self.model,
            "input": list(texts),
            "input_type": purpose,
            "output_dimension": self.dimension,
        }
        return self._post(payload)


@register("voyage")
def _factory(settings: Settings) -> VoyageProvider:
    return VoyageProvider(settings)
