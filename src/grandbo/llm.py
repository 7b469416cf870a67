"""The LLM client interface: optional, explicit, and never a reason to lose data.

Grandbo works without an LLM. When `GRANDBO_LLM_BASE_URL` names an OpenAI-compatible chat endpoint,
features that benefit from one (classifying an edit, wording a learned note) ask it, and fall back to
their documented deterministic rules when it is slow, down or answers nonsense; the input is stored
either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import httpx

from grandbo.config import Settings
from grandbo.errors import ProviderUnavailableError

if TYPE_CHECKING:
    from grandbo.redaction import Redactor


class LLMClient(Protocol):
    name: str

    def complete(self, system: str, prompt: str) -> str:
        """The model's answer to `prompt` under `system` instructions; raises ProviderUnavailableError."""
        ...


class OpenAIChatClient:
    """Chat completions over HTTP (OpenAI, vLLM, Ollama, any compatible server)."""

    def __init__(self, base_url: str, model: str, api_key: str | None, timeout: float) -> None:
        self.name = f"openai-chat:{model}"
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout

    def complete(self, system: str, prompt: str) -> str:
        payload = {
            "model": self._model,
            "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
        }
        try:
            response = httpx.post(self._url, json=payload, headers=self._headers, timeout=self._timeout)
            response.raise_for_status()
            return str(response.json()["choices"][0]["message"]["content"]).strip()
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as error:
            raise ProviderUnavailableError(
                f"The LLM at {self._url} did not answer usefully ({type(error).__name__}: {error}); the "
                "deterministic rules were used instead.",
                detail={"url": self._url},
            ) from error


class RedactingClient:
    """An LLM client whose instructions and prompt are masked by an organization's redaction patterns before
    they leave the process (the only way the org-bound handle hands out a client)."""

    def __init__(self, inner: LLMClient, redactor: Redactor) -> None:
        self.name = inner.name
        self._inner = inner
        self._redactor = redactor

    def complete(self, system: str, prompt: str) -> str:
        return self._inner.complete(self._redactor.text(system), self._redactor.text(prompt))


def client_from(settings: Settings) -> LLMClient | None:
    """The configured LLM client, or None when none is configured (the default)."""
    if not settings.llm_base_url:
        return None
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return OpenAIChatClient(settings.llm_base_url, settings.llm_model, key, settings.http_timeout_seconds)
