"""Hosted providers speak their services' HTTP shapes (checked against a fake at the HTTP layer)."""

import time

import numpy as np
import pytest

from grandbo.config import Settings
from grandbo.embeddings.base import embed_checked, get_provider, provider_names
from grandbo.embeddings.deterministic import DeterministicProvider
from grandbo.errors import ConfigError, EmbeddingError, EmbeddingValueError, ProviderUnavailableError
from tests.fakes import FakeEmbeddings, vector_for


@pytest.fixture
def fake():
    with FakeEmbeddings(dimension=8) as server:
        yield server


def test_registry_knows_every_provider():
    assert provider_names() == ["bedrock", "deterministic", "local", "openai", "voyage"]


def test_openai_request_shape_and_order(tmp_path, fake):
    settings = Settings(
        home=tmp_path,
        openai_base_url=fake.url + "/v1",
        openai_api_key="sk-test",
        openai_model="text-embedding-3-small",
        openai_dimension=8,
    )
    provider = get_provider("openai", settings)
    vectors = provider.embed(["first text", "second text"])
    request = fake.behaviour.requests[-1]
    assert request["path"] == "/v1/embeddings"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    assert request["body"] == {
        "model": "text-embedding-3-small",
        "input": ["first text", "second text"],
        "encoding_format": "float",
        "dimensions": 8,
    }
    # The fake answers in reverse order; the provider restores input order by index.
    assert vectors == [pytest.approx(vector_for("first text", 8)), pytest.approx(vector_for("second text", 8))]


def test_voyage_sends_input_type_for_queries_and_documents(tmp_path, fake):
    settings = Settings(home=tmp_path, voyage_base_url=fake.url, voyage_api_key="pa-test", voyage_dimension=8)
    provider = get_provider("voyage", settings)
    provider.embed(["a document"], "document")
    provider.embed(["a query"], "query")
    bodies = [request["body"] for request in fake.behaviour.requests]
    assert [body["input_type"] for body in bodies] == ["document", "query"]
    assert bodies[0]["model"] == "voyage-3.5" and bodies[0]["output_dimension"] == 8


def test_voyage_without_a_key_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="GRANDBO_VOYAGE_API_KEY"):
        get_provider("voyage", Settings(home=tmp_path))


def test_bedrock_titan_v2_through_boto3(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    settings = Settings(home=tmp_path, bedrock_region="us-east-1", bedrock_endpoint_url=fake.url, bedrock_dimension=256)
    provider = get_provider("bedrock", settings)
    assert (provider.name, provider.model, provider.dimension) == ("bedrock", "amazon.titan-embed-text-v2:0", 256)
    vectors = provider.embed(["one", "two"])
    paths = [request["path"] for request in fake.behaviour.requests]
    assert paths == ["/model/amazon.titan-embed-text-v2%3A0/invoke"] * 2
    assert fake.behaviour.requests[0]["body"] == {"inputText": "one", "dimensions": 256, "normalize": True}
    assert "AWS4-HMAC-SHA256" in fake.behaviour.requests[0]["headers"]["Authorization"]
    assert len(vectors) == 2 and len(vectors[0]) == 256


def test_bedrock_retries_a_connection_lost_before_its_answer(tmp_path, fake, monkeypatch):
    """boto3 retried a connection refused or closed before the answer (its own transport's errors); sent through
    `grandbo.bedrock.Runtime`, httpx's were taken for the call's failure: a proxy's dropped connection failed the
    embedding at once. Now they are botocore's errors again, and retried."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    settings = Settings(home=tmp_path, bedrock_region="us-east-1", bedrock_endpoint_url=fake.url, bedrock_dimension=256)
    provider = get_provider("bedrock", settings)
    try:
        fake.behaviour.hang_up = 1
        (vector,) = provider.embed(["one"])
        assert len(vector) == 256 and len(fake.behaviour.requests) == 2  # the lost one, then its retry
    finally:
        provider.close()


def test_bedrock_keeps_one_connection_for_many_calls_and_closes_it(tmp_path, monkeypatch):
    """Bedrock's requests go out through the provider's own httpx client (`grandbo.bedrock.Runtime`): kept alive
    between calls as boto3's were, and closed with the provider."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    with FakeEmbeddings(keep_alive=True) as fake:
        settings = Settings(home=tmp_path, bedrock_region="us-east-1", bedrock_endpoint_url=fake.url,
                            bedrock_dimension=256)  # fmt: skip
        provider = get_provider("bedrock", settings)
        assert len(provider.embed([f"text {n}" for n in range(10)])) == 10
        assert (len(fake.behaviour.requests), fake.connections, fake.open_connections) == (10, 1, 1)
        provider.close()
        deadline = time.monotonic() + 10
        while fake.open_connections and time.monotonic() < deadline:  # the server sees the close a moment later
            time.sleep(0.01)
        assert fake.open_connections == 0


@pytest.mark.parametrize("answer", [None, 3.5, "not a vector"])
def test_a_bedrock_answer_that_is_no_embedding_is_an_embedding_error(tmp_path, fake, monkeypatch, answer):
    """Before, `"embedding": null` (or a number) raised a bare TypeError, which a recall does not catch: a 500
    instead of the lexical arm answering alone."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    settings = Settings(home=tmp_path, bedrock_region="us-east-1", bedrock_endpoint_url=fake.url, bedrock_dimension=256)
    fake.behaviour.bedrock_embedding_of = lambda text: answer
    with pytest.raises(EmbeddingError):
        embed_checked(get_provider("bedrock", settings), ["one"])


def test_a_bedrock_vector_holding_a_400_digit_integer_is_reported_out_of_range(tmp_path, fake, monkeypatch):
    """JSON has no bound on an integer, and no float holds one of 400 digits: the answer was reported as "a vector of
    shape (0,)", sending the operator to check the dimension (probe 31)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    settings = Settings(home=tmp_path, bedrock_region="us-east-1", bedrock_endpoint_url=fake.url, bedrock_dimension=256)
    fake.behaviour.bedrock_embedding_of = lambda text: [10**400] + [0.1] * 255
    with pytest.raises(EmbeddingValueError, match="out-of-range") as caught:
        embed_checked(get_provider("bedrock", settings), ["one"])
    assert "shape" not in caught.value.message


def test_bedrock_refuses_a_dimension_titan_cannot_produce(tmp_path):
    with pytest.raises(ConfigError, match="256, 512 or 1024"):
        get_provider("bedrock", Settings(home=tmp_path, bedrock_dimension=300))


@pytest.mark.parametrize(
    ("status", "error"), [(503, ProviderUnavailableError), (429, ProviderUnavailableError), (401, EmbeddingError)]
)
def test_http_failures_map_to_clear_errors(tmp_path, fake, status, error):
    fake.behaviour.status = status
    provider = get_provider("openai", Settings(home=tmp_path, openai_base_url=fake.url, openai_dimension=8))
    with pytest.raises(error, match=f"HTTP {status}"):
        provider.embed(["text"])


def test_deterministic_vectors_are_stable_unit_vectors_and_share_terms():
    provider = DeterministicProvider()
    a, b, c = provider.embed(["redis eviction storm", "redis eviction storm", "kafka broker lag"])
    assert np.array_equal(a, b) and np.linalg.norm(a) == pytest.approx(1.0)
    related, unrelated = provider.embed(["eviction storm on redis cache", "kafka broker lag"])
    assert float(a @ related) > float(a @ unrelated)
    assert float(a @ c) == pytest.approx(0.0, abs=0.2)
