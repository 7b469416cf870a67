"""An OpenAI-compatible embeddings endpoint (OpenAI, Azure OpenAI behind a proxy, vLLM, Ollama, ...)."""

from __future__ import annotations

from collections.abc import Sequence

from grandbo.config import Settings
from grandbo.embeddings._http import post_embeddings
from grandbo.embeddings.base import Purpose, register
from grandbo.http import client


class OpenAIProvider:
    name = "openai"
    min_similarity = 0.2

    def __init__(self, settings: Settings) -> None:
        self.model = settings.openai_model
        self.dimension = settings.openai_dimension
        self._url = settings.openai_base_url.rstrip("/") + "/embeddings"
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._timeout = settings.http_timeout_seconds
        self._http = client(self._timeout, self._headers)  # one per provider per process, closed by `close`

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[list[float]]:
        payload: dict[str, object] = {"model": self.model, "input": list(texts), "encoding_format": "float"}
        if self.model.startswith("text-embedding-3"):
            payload["dimensions"] = self.dimension
        return post_embeddings(self.name, self._http, self._url, payload, self._timeout)

    def close(self) -> None:
        self._http.close()


@register("openai")
def _factory(settings: Settings) -> OpenAIProvider:
    return OpenAIProvider(settings)
