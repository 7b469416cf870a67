"""What a provider's refusal says is read by its code, and a Retry-After is honoured, by every hosted client.

Bedrock's refusal of the account or of the model (AccessDeniedException, a ValidationException naming the model)
was taken for one text's (`texts_fault`), so each batch it refused was asked again in halves and with a text of no
tenant's: four calls a batch where one says it all. Its throttle's Retry-After, and an LLM endpoint's, were not read:
the embed jobs were retried on their own schedule, and the LLM was asked again at once, by every call that came. The
fake answers as AWS documents Bedrock's errors (x-amzn-ErrorType) and as the HTTP APIs send Retry-After.
"""

from __future__ import annotations

import pytest

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider, texts_fault
from grandbo.errors import EmbeddingError, ProviderUnavailableError
from grandbo.llm import AnthropicClient, BedrockConverseClient, OpenAIChatClient
from tests.fakes import FakeEmbeddings


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")  # boto3 signs Bedrock's requests with them
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    with FakeEmbeddings(dimension=8) as server:
        yield server


def _bedrock_refusal(tmp_path, url: str, kind: type[EmbeddingError]) -> EmbeddingError:  # type: ignore[no-untyped-def]
    """The error of a Bedrock embedding asked of the fake at `url` (as it is told to answer), of type `kind`."""
    settings = Settings(home=tmp_path / "home", bedrock_region="us-east-1", bedrock_endpoint_url=url,
                        bedrock_dimension=256, http_timeout_seconds=10.0)  # fmt: skip
    provider = get_provider("bedrock", settings)
    try:
        with pytest.raises(kind) as refused:
            provider.embed(["disk full on node a"])
    finally:
        provider.close()
    return refused.value


@pytest.mark.parametrize(("status", "code", "message", "texts"), [
    (403, "AccessDeniedException", "You don't have access to the model with the specified model ID.", False),
    (404, "ResourceNotFoundException", "Model not found.", False),
    (400, "ValidationException", "The provided model identifier is invalid.", False),
    (400, "ValidationException", "Malformed input request: expected maxLength: 50000, actual: 50001", True),
])  # fmt: skip
def test_a_bedrock_refusal_is_a_texts_fault_only_when_its_code_says_the_input(tmp_path, fake, status, code, message,
                                                                              texts):  # fmt: skip
    """The account or the model refused: every request would be, so no batch of it is asked again in halves; a text
    too long for the model: its batch is (before: all four taken for a text's)."""
    fake.behaviour.status, fake.behaviour.aws_error, fake.behaviour.aws_message = status, code, message
    refused = _bedrock_refusal(tmp_path, fake.url, EmbeddingError)
    assert not isinstance(refused, ProviderUnavailableError)
    assert refused.detail["code"] == code
    assert texts_fault(refused) is texts


def test_a_bedrock_throttle_says_the_wait_its_retry_after_asks(tmp_path, fake):
    """A ThrottlingException's Retry-After is the least the embed jobs wait (`retry_after_s`, as the HTTP providers')."""
    fake.behaviour.status, fake.behaviour.aws_error, fake.behaviour.retry_after = 429, "ThrottlingException", "120"
    throttled = _bedrock_refusal(tmp_path, fake.url, ProviderUnavailableError)
    assert throttled.detail["retry_after_s"] == 120.0  # before: no wait in the detail
    assert "120 s its Retry-After asks" in throttled.message


@pytest.mark.parametrize("make", [
    lambda url: OpenAIChatClient(url, "fake-chat", None, timeout=10.0),
    lambda url: AnthropicClient(url, "fake-chat", None, timeout=10.0),
    lambda url: BedrockConverseClient("fake-chat", "us-east-1", url, timeout=10.0),
], ids=["openai", "anthropic", "bedrock"])  # fmt: skip
def test_an_llm_that_asks_to_retry_later_is_not_asked_again_before_then(fake, make):
    """A 429 with Retry-After (Bedrock: a ThrottlingException): the call fails with the wait in its detail, and the calls
    within that wait fail at once (their callers answer deterministically), asking the endpoint nothing."""
    client = make(fake.url)
    fake.behaviour.status, fake.behaviour.retry_after, fake.behaviour.aws_error = 429, "120", "ThrottlingException"
    try:
        with pytest.raises(ProviderUnavailableError) as throttled:
            client.complete("system", "prompt")
        asked = len(fake.behaviour.requests)
        fake.behaviour.status, fake.behaviour.chat_answers = 200, ['{"category": "tone"}']
        with pytest.raises(ProviderUnavailableError) as waiting:
            client.complete("system", "prompt")
    finally:
        client.close()
    assert throttled.value.detail["retry_after_s"] == 120.0
    assert 0 < waiting.value.detail["retry_after_s"] <= 120.0
    assert len(fake.behaviour.requests) == asked  # before: asked again at once
