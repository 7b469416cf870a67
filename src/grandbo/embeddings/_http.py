"""One place that turns a hosted provider's HTTP answer into vectors or a clear error."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import httpx
import structlog

from grandbo.errors import EmbeddingCountError, EmbeddingError, ProviderUnavailableError
from grandbo.http import AnswerTooLarge, client, retry_after, send_bounded
from grandbo.pending_work import EMBED_MOST_SECONDS

log = structlog.get_logger(__name__)

_RETRYABLE = {408, 409, 425, 429, 500, 502, 503, 504}


class HostedProvider:
    """What the OpenAI-style hosted providers share: `{base_url}/embeddings` with a bearer key (none when empty),
    through one HTTP client per provider per process, closed by `close`. `answered_model`: the name the service
    answers with for the model asked, when it answers with an alias (`post_embeddings`)."""

    name: str
    dimension: int

    def __init__(self, base_url: str, key: str, timeout: float, *, answered_model: str | None = None) -> None:
        self._url = base_url.rstrip("/") + "/embeddings"
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._timeout = timeout
        self._answered_model = answered_model
        self._http = client(self._timeout, self._headers)

    def _post(self, payload: dict[str, Any]) -> list[list[float]]:
        return post_embeddings(self.name, self._http, self._url, payload, self._timeout, self.dimension,
                               answered_model=self._answered_model)  # fmt: skip

    def close(self) -> None:
        self._http.close()


def post_embeddings(
    provider: str, http: httpx.Client, url: str, payload: dict[str, Any], timeout: float, dimension: int,
    *, answered_model: str | None = None,
) -> list[list[float]]:  # fmt: skip
    """POST an OpenAI-style embeddings request through the provider's one client (`grandbo.http`) and return
    `data[*].embedding` in input order. The answer is read within `timeout` for the whole call, and refused past
    the size its vectors could take (`answer_limit`), or when its `model` names another model than asked
    (`same_model`) or than `answered_model` (GRANDBO_OPENAI_ANSWERED_MODEL: the alias the service answers with)."""
    inputs = payload.get("input")
    count = len(inputs) if isinstance(inputs, list) else 1
    limit = answer_limit(count, dimension)
    try:
        status, headers, body = send_bounded(http, "POST", url, timeout=timeout, limit=limit, json=payload)
    except AnswerTooLarge:
        # Most likely its vectors are wider than configured: a model not asked for a dimension answers its own.
        setting = f"GRANDBO_{provider.upper()}_DIMENSION"
        raise _malformed(provider, f"an answer over {limit:,} bytes for {count} vectors of {dimension} dimensions "
                         "(reading stopped there)", remedy=f"If it persists, check {setting} ({dimension}): a model "
                         "that answers wider vectors (one not asked for a dimension answers its own) sends more than "
                         f"vectors of {dimension} could take; set it to the model's dimension. Otherwise "
                         f"{_UNDOCUMENTED}.") from None  # fmt: skip
    except httpx.HTTPError as error:
        message = (
            f"{provider} did not answer within {timeout:g}s ({url}); the entries stay stored and the "
            "embed jobs will be retried. Raise GRANDBO_HTTP_TIMEOUT_SECONDS if the service is just slow."
            if isinstance(error, httpx.TimeoutException)
            else f"{provider} is unreachable at {url}: {error}. The entries stay stored and the embed jobs "
            "will be retried; check the base URL and the network."
        )
        # timed out: the worker deals the batch's jobs apart next (`embed_jobs.TIMED_OUT`)
        detail = {"provider": provider, "url": url, "timed_out": isinstance(error, httpx.TimeoutException)}
        raise ProviderUnavailableError(message, detail=detail) from error
    if status != 200:
        kind = ProviderUnavailableError if status in _RETRYABLE else EmbeddingError
        remedy = "it will be retried" if kind is ProviderUnavailableError else "check the API key, model and dimension"
        # The body goes to the operator's log, not into the error: a recall's notes show this message to whichever
        # organization asked, and an upstream's body can name another tenant's input or the account.
        log.warning("embedding.provider_error", provider=provider, status=status,
                    body=body[:300].decode(errors="replace"))  # fmt: skip
        # A provider's Retry-After (429, 503) is the least the worker waits before the jobs' next attempt.
        wait = retry_after(headers, EMBED_MOST_SECONDS) if kind is ProviderUnavailableError else None
        raise kind(
            f"{provider} answered HTTP {status} (its answer is in the server's log as embedding.provider_error); "
            f"{remedy}{'' if wait is None else f' after the {wait:g} s its Retry-After asks'}.",
            detail={"provider": provider, "status": status, **({} if wait is None else {"retry_after_s": wait})},
        )
    try:
        answer = json.loads(body)
        data = answer["data"]
    except RecursionError:  # arrays nested past Python's parser: no ValueError (probe 31)
        raise _malformed(provider, "a body nested deeper than any embeddings response") from None
    except (ValueError, KeyError, TypeError) as error:
        raise _malformed(provider, f"a body that is not an embeddings response ({type(error).__name__})") from None
    asked, answered = payload.get("model"), answer.get("model")
    alias = answered_model is not None and same_model(answered_model, answered)
    if isinstance(asked, str) and answered not in (None, "") and not same_model(asked, answered) and not alias:
        raise _other_model(provider, asked, answered, answered_model)
    return _in_order(provider, data, count)


def _other_model(provider: str, asked: str, answered: object, alias: str | None) -> EmbeddingError:
    """The refusal of an answer naming another model than asked; its remedy names the setting of the alias the
    service may answer with (`HostedSettings.openai_answered_model`), where the provider has one."""
    named, model = str(answered)[:80], f"GRANDBO_{provider.upper()}_MODEL"
    setting = ANSWERED_SETTINGS.get(provider)
    remedy = "If it persists, a proxy in front of the service answers with another model: fix its routing"
    if setting:
        remedy += (f"; if {named!r} is the service's own name for {asked!r} (an Azure OpenAI deployment behind a "
                   f"proxy, Hugging Face TEI's model id, a LiteLLM alias), set {setting}={named} (now "
                   f"{'unset' if alias is None else repr(alias)}): the vectors keep their space, nothing is "
                   "embedded again")  # fmt: skip
    remedy += f". If it serves another model, set {model} to it and run `grandbo reembed`."
    return _malformed(provider, f"vectors of the model {named!r}, not {asked!r} as asked (vectors of two models "
                      "never mix, even of one dimension)", remedy=remedy)  # fmt: skip


ANSWERED_SETTINGS = {"openai": "GRANDBO_OPENAI_ANSWERED_MODEL"}
"""The setting of each hosted provider that may name the alias its service answers with (`post_embeddings`)."""


def same_model(asked: str, answered: object) -> bool:
    """Whether an answer's `model` names the model asked for: the same name, or the same with a vendor's prefix on
    one side (`openai/text-embedding-3-small`, as a router names it, asked or answered) or a version suffix of digits
    (OpenAI answers `text-embedding-ada-002-v2` for `text-embedding-ada-002`; a dated `-2024-05-13`); any other name
    is another model, whose vectors would share the store's space by their dimension alone (`voyage-3-lite` for
    `voyage-3`). Two vendor prefixes are compared whole."""
    if not isinstance(answered, str):
        return False
    name = answered
    if "/" not in answered:  # a router asked for `vendor/model` may answer with the model's own name
        asked = asked.rsplit("/", 1)[-1]
    elif "/" not in asked:
        name = answered.rsplit("/", 1)[-1]
    if name == asked or name == f"{asked}:latest":
        return True
    suffix = name.removeprefix(f"{asked}-")
    return suffix != name and suffix.removeprefix("v").replace("-", "").isdigit()


def answer_limit(count: int, dimension: int) -> int:
    """The most bytes an embeddings answer of `count` vectors of `dimension` numbers may take: 32 a number (a
    float in JSON is at most 24 characters with its comma and spaces) and 1 KiB a vector for its object, plus
    64 KiB for the rest (usage, model name). An answer past it is refused as it arrives: read whole, one 300 MB
    answer took 4 GB of the shared server's memory (probe 24)."""
    return count * (dimension * 32 + 1024) + 64 * 1024


def _in_order(provider: str, data: Any, count: int) -> list[list[float]]:
    """The vectors of `data` by their `index`, used only when the indexes are exactly 0..count-1, each once, and
    every vector is a list of finite numbers: a vector is filed under the entry its index names, so an answer
    that names them any other way (in reverse with every index 0, as one server did) would file vectors under
    the wrong entries."""
    if not isinstance(data, list) or len(data) != count:
        size = len(data) if isinstance(data, list) else "no list of"
        raise _malformed(provider, f"{size} vectors for {count} texts", EmbeddingCountError)
    by_index: dict[int, list[float]] = {}
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        if type(index) is not int or not 0 <= index < count or index in by_index:
            raise _malformed(provider, f"the indexes {[_index(i) for i in data][:20]} for {count} texts")
        vector = item.get("embedding")
        if not isinstance(vector, list) or not all(_finite(x) for x in vector):
            raise _malformed(provider, f"a vector at index {index} that is not a list of finite numbers")
        by_index[index] = vector
    return [by_index[index] for index in range(count)]


_FLOAT_MAX = int(sys.float_info.max)  # the largest integer a float holds, as JSON may write one


def _finite(number: Any) -> bool:
    """A JSON number a float holds: an integer of 400 digits is one for `json`, and `math.isfinite` of it raised
    OverflowError, which failed every recall (HTTP 500) instead of skipping the vector arm (probe 31)."""
    if type(number) is int:
        return abs(number) <= _FLOAT_MAX
    return type(number) is float and math.isfinite(number)


def _index(item: Any) -> Any:
    return item.get("index") if isinstance(item, dict) else None


_UNDOCUMENTED = "the service (or a proxy in front of it) does not answer as the OpenAI embeddings API documents"


def _malformed(
    provider: str, problem: str, kind: type[EmbeddingError] = EmbeddingError, *, remedy: str = ""
) -> EmbeddingError:
    log.warning("embedding.malformed_answer", provider=provider, problem=problem)
    return kind(
        f"{provider} answered with {problem}; no vector of the batch was used, the entries stay stored and the "
        f"embed jobs will be retried. {remedy or f'If it persists, {_UNDOCUMENTED}.'}",
        detail={"provider": provider},
    )
