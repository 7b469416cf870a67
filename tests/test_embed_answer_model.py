"""An embeddings answer that names another model than asked is refused, not filed (probe 31).

A proxy in front of the service (a router, a misrouted gateway) answering with another model of the same dimension
would mix two vector spaces in one store silently: the dimension is all `embed_checked` could see. The answer's
`model` (OpenAI's and Voyage's embeddings responses both carry it) must name the model asked for, allowing what the
vendors answer for it: a version suffix (OpenAI's `text-embedding-ada-002-v2`) or a router's vendor prefix.
"""

from __future__ import annotations

import pytest

from grandbo.config import Settings
from grandbo.embeddings.base import embed_checked, get_provider
from grandbo.errors import EmbeddingError
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings
from tests.test_embedding_faults import _hosted


@pytest.fixture
def fake():
    with FakeEmbeddings(dimension=8) as server:
        yield server


def _provider(name, url, tmp_path):
    if name == "voyage":
        settings = Settings(home=tmp_path, voyage_base_url=url, voyage_api_key="k", voyage_model="fake-embed",
                            voyage_dimension=8)  # fmt: skip
    else:
        settings = Settings(home=tmp_path, openai_base_url=url, openai_model="fake-embed", openai_dimension=8)
    return get_provider(name, settings)


@pytest.mark.parametrize("name", ["openai", "voyage"])
@pytest.mark.parametrize("answered", ["other-embed", "fake-embed-lite", "fake", 7])
def test_an_answer_naming_another_model_is_refused(tmp_path, fake, name, answered):
    fake.behaviour.answer_model = answered
    provider = _provider(name, fake.url, tmp_path)
    with pytest.raises(EmbeddingError, match="not 'fake-embed' as asked"):
        embed_checked(provider, ["disk full on node b"])


@pytest.mark.parametrize("name", ["openai", "voyage"])
@pytest.mark.parametrize("answered", ["fake-embed", "fake-embed-v2", "fake-embed-2024-05-13", "vendor/fake-embed"])
def test_an_answer_naming_the_model_asked_as_its_vendor_does_is_used(tmp_path, fake, name, answered):
    fake.behaviour.answer_model = answered
    (vector,) = embed_checked(_provider(name, fake.url, tmp_path), ["disk full on node b"])
    assert vector is not None and vector.shape == (8,)


def test_the_worker_files_no_vector_of_another_model(tmp_path, fake, database_url):
    fake.behaviour.answer_model = "other-embed"
    settings = _hosted(tmp_path, fake.url, database_url=database_url)
    with Grandbo.init(settings, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        entry = memory.remember({"title": "disk full on node b"})
        grandbo.worker().run_once()
        stats, state = memory.stats(), memory.embedding(entry.id)
    assert (stats.readable, stats.pending) == (0, 1)
    assert "'other-embed', not 'fake-embed' as asked" in state.last_error


@pytest.mark.parametrize("answered", ["fake-embed", "fake-embed-v2"])
def test_a_router_asked_for_a_vendors_model_may_answer_with_the_models_own_name(tmp_path, fake, answered):
    # Refused before when the prefix was on the side asked (a router such as LiteLLM's proxy is asked for
    # `vendor/model` and answers the name the vendor answered it): every vector of a working setup was refused.
    fake.behaviour.answer_model = answered
    settings = Settings(home=tmp_path, openai_base_url=fake.url, openai_model="vendor/fake-embed", openai_dimension=8)
    (vector,) = embed_checked(get_provider("openai", settings), ["disk full on node b"])
    assert vector is not None and vector.shape == (8,)


def test_a_service_answering_with_an_alias_is_refused_with_the_setting_that_names_it(tmp_path, fake):
    # Azure OpenAI behind a proxy answers with the deployment's name, TEI with its model id, LiteLLM with its alias:
    # the only remedy was to set GRANDBO_OPENAI_MODEL to that name, and `grandbo reembed`, another embedding space.
    fake.behaviour.answer_model = "prod-embeddings-deployment"
    with pytest.raises(EmbeddingError) as refused:
        embed_checked(_provider("openai", fake.url, tmp_path), ["disk full on node b"])
    assert "set GRANDBO_OPENAI_ANSWERED_MODEL=prod-embeddings-deployment (now unset)" in refused.value.message


def test_the_alias_the_service_answers_with_is_the_same_model_and_keeps_the_space(tmp_path, fake, database_url):
    fake.behaviour.answer_model = "prod-embeddings-deployment"
    settings = _hosted(
        tmp_path, fake.url, database_url=database_url, openai_answered_model="prod-embeddings-deployment"
    )
    with Grandbo.init(settings, embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember({"title": "disk full on node b"})
        grandbo.worker().run_once()
        stats = memory.stats()
    assert (stats.readable, stats.pending) == (1, 0)
    assert stats.space is not None and (stats.space.provider, stats.space.model) == ("openai", "fake-embed")


@pytest.mark.parametrize("answered", ["other-embed", "fake-embed-lite"])
def test_with_an_alias_set_any_other_model_is_still_refused(tmp_path, fake, answered):
    fake.behaviour.answer_model = answered
    settings = Settings(home=tmp_path, openai_base_url=fake.url, openai_model="fake-embed", openai_dimension=8,
                        openai_answered_model="prod-embeddings-deployment")  # fmt: skip
    with pytest.raises(EmbeddingError, match=f"{answered!r}, not 'fake-embed' as asked") as refused:
        embed_checked(get_provider("openai", settings), ["disk full on node b"])
    assert "(now 'prod-embeddings-deployment')" in refused.value.message
