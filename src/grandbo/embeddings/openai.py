"""An OpenAI-compatible embeddings endpoint (OpenAI, Azure OpenAI behind a proxy, vLLM, Ollama, ...)."""

from __future__ import annotations

from collections.abc import Sequence

from grandbo.config import Settings
from grandbo.embeddings._http import HostedProvider
from grandbo.embeddings.base import Purpose, register


class OpenAIProvider(HostedProvider):
    name = "openai"
    min_similarity = 0.2
    max_batch = 2048  # texts a request, as OpenAI documents its embeddings API (`base.capped_batch`)

    def __init__(self, settings: Settings) -> None:
        self.model = settings.openai_model
        self.dimension = settings.openai_dimension
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
        super().__init__(settings.openai_base_url, key, settings.http_timeout_seconds,
                         answered_model=settings.openai_answered_model or None)  # fmt: skip

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[list[float]]:
        payload: dict[str, object] = {"model": self.model, "input": list(texts), "encoding_format": "float"}
        if self.model.startswith("text-embedding-3"):
            payload["dimensions"] = self.dimension
        return self._post(payload)


@register("openai")
def _factory(settings: Settings) -> OpenAIProvider:
    return OpenAIProvider(settings)
