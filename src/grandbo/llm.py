"""The LLM client interface: optional, explicit, and never a reason to lose data or miss a deadline.

Grandbo works without an LLM. When one is configured (`GRANDBO_LLM_PROVIDER`, `GRANDBO_LLM_BASE_URL`),
features that benefit from it (classifying an edit, wording a learned note, narrating a triage plan) ask
it, and fall back to their documented deterministic answer when it is slow, down or answers nonsense.

Every client takes the same two parts: `system`, the stable part (instructions and the organization's
context block), and `prompt`, what changes per call (the retrieved evidence). The prompt-cache
breakpoint sits between them: Anthropic gets `cache_control` on the system block, Bedrock Converse a
`cachePoint` after it, and OpenAI-compatible servers cache a repeated prefix on their own.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from grandbo.bedrock import refusal, runtime_client
from grandbo.config import Settings
from grandbo.errors import ConfigError, ProviderUnavailableError
from grandbo.http import client, retry_after, send_bounded

if TYPE_CHECKING:
    from grandbo.redaction import Redactor

ANTHROPIC_URL = "https://api.anthropic.com"
OPENAI_DEFAULT_MODEL = "gpt-4o-mini"
ANTHROPIC_VERSION = "2023-06-01"
ANSWER_BYTES = 4 * 1024 * 1024  # an answer of GRANDBO_LLM_MAX_TOKENS (at most 8,192) tokens in JSON, many times over
MOST_WAIT_S = 3600.0  # the longest Retry-After an LLM client honours
_RETRY_LATER = {429, 503}  # the statuses whose Retry-After says when to ask again


def json_object(answer: str) -> dict[str, Any]:
    """The JSON object in a model's answer, read as models write it: bare, inside a ```json fence, or with a
    sentence around it (the fence is outside the braces); a ValueError when there is none. No pattern runs over
    the answer: an endpoint's answer of any length is read in linear time."""
    text = answer.strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the answer")
    try:
        value = json.loads(text[start : end + 1])
    except RecursionError:  # nested past Python's parser: no ValueError, and past the callers' excepts (probe 31)
        raise ValueError("a JSON object nested deeper than the answer asked for") from None
    if not isinstance(value, dict):
        raise ValueError("the answer is not a JSON object")
    return value


class LLMClient(Protocol):
    name: str

    def complete(self, system: str, prompt: str, *, timeout: float | None = None) -> str:
        """The model's answer to `prompt` under `system` (the cacheable prefix); raises
        ProviderUnavailableError when it cannot give one within `timeout` seconds (or its own default)."""
        ...


def _unavailable(name: str, where: str, error: Exception, wait: float | None = None) -> ProviderUnavailableError:
    return ProviderUnavailableError(
        f"The LLM {name} at {where} did not answer usefully ({type(error).__name__}: {str(error)[:200]}); the "
        "deterministic answer was used instead"
        + ("." if wait is None else f", and it is not asked again for the {wait:g} s its Retry-After asks."),
        detail={"llm": name, "url": where, **({} if wait is None else {"retry_after_s": wait})},
    )


class _Patient:
    """An LLM client that honours its endpoint's Retry-After (a 429 or 503, a Bedrock throttle): asked nothing until
    then, every call meanwhile fails at once (its callers use their deterministic answer), as the embed worker waits
    for a provider's (`embeddings._http`), rather than adding to the load the endpoint asked to shed."""

    name: str
    _where: str
    _quiet_until = 0.0  # time.monotonic() before which the endpoint is not asked

    def _wait(self) -> None:
        left = self._quiet_until - time.monotonic()
        if left > 0:
            raise _unavailable(self.name, self._where, ValueError("it asked to be left alone for now"), left)

    def _waited(self, error: Exception, wait: float | None) -> ProviderUnavailableError:
        if wait:
            self._quiet_until = max(self._quiet_until, time.monotonic() + wait)
        return _unavailable(self.name, self._where, error, wait)


class _HTTPClient(_Patient):
    """What the two HTTP clients share: one connection pool, a default timeout, errors as one kind."""

    def __init__(self, name: str, url: str, headers: dict[str, str], timeout: float) -> None:
        self.name = name
        self._url = self._where = url
        self._timeout = timeout
        self._http = client(timeout, headers)  # one per LLM client; the process keeps one client (`Grandbo.llm`)

    def _post(self, payload: dict[str, Any], timeout: float | None) -> Any:
        # The whole answer within the timeout and at most ANSWER_BYTES (`send_bounded`): a trickling endpoint held
        # a write-behind's thread for as long as it trickled, and its answer was read whole into memory.
        self._wait()
        try:
            status, headers, body = send_bounded(self._http, "POST", self._url, timeout=timeout or self._timeout,
                                                 limit=ANSWER_BYTES, json=payload)  # fmt: skip
            if not 200 <= status < 300:
                wait = retry_after(headers, MOST_WAIT_S) if status in _RETRY_LATER else None
                raise self._waited(ValueError(f"it answered HTTP {status}"), wait)
            return json.loads(body)
        except (httpx.HTTPError, ValueError, RecursionError) as error:  # RecursionError: nested past the parser
            raise _unavailable(self.name, self._url, error) from error

    def close(self) -> None:
        self._http.close()

    def _text(self, payload: dict[str, Any], timeout: float | None, read: Any) -> str:
        body = self._post(payload, timeout)
        try:
            return str(read(body)).strip()
        except (KeyError, IndexError, TypeError) as error:
            raise _unavailable(self.name, self._url, error) from error


class OpenAIChatClient(_HTTPClient):
    """Chat completions over HTTP (OpenAI, Groq, vLLM, Ollama, any compatible server)."""

    def __init__(self, base_url: str, model: str, api_key: str | None, timeout: float, max_tokens: int = 800) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(f"openai-chat:{model}", base_url.rstrip("/") + "/chat/completions", headers, timeout)
        self._model, self._max_tokens = model, max_tokens

    def complete(self, system: str, prompt: str, *, timeout: float | None = None) -> str:
        payload = {
            "model": self._model,
            "temperature": 0,
            "max_tokens": self._max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
        }
        return self._text(payload, timeout, lambda body: body["choices"][0]["message"]["content"])


class AnthropicClient(_HTTPClient):
    """Anthropic Messages over HTTP; the system block is marked as the prompt cache's breakpoint."""

    def __init__(self, base_url: str, model: str, api_key: str | None, timeout: float, max_tokens: int = 800) -> None:
        headers = {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": api_key} if api_key else {})}
        super().__init__(f"anthropic:{model}", base_url.rstrip("/") + "/v1/messages", headers, timeout)
        self._model, self._max_tokens = model, max_tokens

    def complete(self, system: str, prompt: str, *, timeout: float | None = None) -> str:
        payload = {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "temperature": 0,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": prompt}],
        }
        return self._text(
            payload, timeout, lambda body: "".join(b["text"] for b in body["content"] if b.get("type") == "text")
        )


class BedrockConverseClient(_Patient):
    """Amazon Bedrock Converse through boto3 (the `bedrock` extra); a cache point follows the system block."""

    def __init__(self, model: str, region: str | None, endpoint_url: str | None, timeout: float,
                 max_tokens: int = 800) -> None:  # fmt: skip
        self.name = f"bedrock:{model}"
        self._model, self._max_tokens, self._where = model, max_tokens, endpoint_url or f"bedrock {region or ''}"
        self._runtime = runtime_client(
            region, endpoint_url, timeout, 1, limit=ANSWER_BYTES,
            needed_by="Bedrock Converse (GRANDBO_LLM_PROVIDER=bedrock)",
            where="GRANDBO_LLM_REGION (or AWS_REGION) to the region your model is enabled in",
        )  # fmt: skip

    def close(self) -> None:
        self._runtime.close()

    def complete(self, system: str, prompt: str, *, timeout: float | None = None) -> str:
        # The whole call within `timeout` (else the client's) and its answer within ANSWER_BYTES (`grandbo.bedrock`)
        from botocore.exceptions import BotoCoreError, ClientError

        self._wait()
        try:
            with self._runtime.within(timeout):
                response = self._runtime.client.converse(
                    modelId=self._model,
                    system=[{"text": system}, {"cachePoint": {"type": "default"}}],
                    messages=[{"role": "user", "content": [{"text": prompt}]}],
                    inferenceConfig={"maxTokens": self._max_tokens, "temperature": 0},
                )
            blocks = response["output"]["message"]["content"]
            return "".join(str(block["text"]) for block in blocks if "text" in block).strip()
        except ClientError as error:  # a throttle's Retry-After is honoured (`_Patient`)
            raise self._waited(error, refusal(error, MOST_WAIT_S).wait) from error
        except (BotoCoreError, httpx.HTTPError, ValueError, KeyError, TypeError, RecursionError) as error:
            raise _unavailable(self.name, self._where, error) from error


class RedactingClient:
    """An LLM client whose instructions and prompt are masked by an organization's redaction patterns before
    they leave the process (the only way the org-bound handle hands out a client)."""

    def __init__(self, inner: LLMClient, redactor: Redactor) -> None:
        self.name = inner.name
        self._inner = inner
        self._redactor = redactor

    def complete(self, system: str, prompt: str, *, timeout: float | None = None) -> str:
        return self._inner.complete(self._redactor.text(system), self._redactor.text(prompt), timeout=timeout)


def client_from(settings: Settings) -> LLMClient | None:
    """The configured LLM client, or None when none is configured (the default)."""
    provider = settings.llm_provider or ("openai" if settings.llm_base_url else None)
    if provider is None:
        return None
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    timeout, tokens = settings.http_timeout_seconds, settings.llm_max_tokens
    model = settings.llm_model or (OPENAI_DEFAULT_MODEL if provider == "openai" else None)
    if model is None:
        raise ConfigError(
            f"GRANDBO_LLM_PROVIDER={provider} needs GRANDBO_LLM_MODEL: the model id your account uses "
            f"({'a Bedrock model id, e.g. anthropic.claude-...' if provider == 'bedrock' else 'e.g. claude-...'}).",
            detail={"provider": provider},
        )
    if provider == "bedrock":
        return BedrockConverseClient(model, settings.llm_region, settings.llm_base_url, timeout, tokens)
    if provider == "anthropic":
        return AnthropicClient(settings.llm_base_url or ANTHROPIC_URL, model, key, timeout, tokens)
    if not settings.llm_base_url:
        raise ConfigError(
            "GRANDBO_LLM_PROVIDER=openai needs GRANDBO_LLM_BASE_URL (e.g. https://api.groq.com/openai/v1).",
            detail={"provider": provider},
        )
    return OpenAIChatClient(settings.llm_base_url, model, key, timeout, tokens)
