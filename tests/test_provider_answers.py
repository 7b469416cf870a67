"""A hosted provider's answer is read within the call's timeout and the size the call could need (probe 24).

httpx's timeout bounds each read, not the call, and its `.json()` holds the whole answer: an embeddings endpoint
that sent its answer a byte every half second held a recall a minute past a 3 s timeout, and one answer of 300 MB
took a shared server from 140 MB to 4 GB. The fake sends each answer padded with spaces (JSON all the same), in a
flood or a trickle; the answer is refused, the entry stays stored, and the provider's next good answer is used.
Bedrock's parts go through boto3, whose transport had both faults too (`grandbo.bedrock`): the fake answers its
InvokeModel and Converse as the Bedrock runtime API documents them.
"""

from __future__ import annotations

import threading
import tracemalloc

import pytest

from grandbo.config import Settings
from grandbo.embeddings._http import answer_limit
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.openai import OpenAIProvider
from grandbo.errors import EmbeddingError, ProviderUnavailableError
from grandbo.llm import ANSWER_BYTES, AnthropicClient, BedrockConverseClient, OpenAIChatClient
from grandbo.service import Grandbo
from grandbo.tiers.edit_rules import Category
from grandbo.tiers.learning_llm import classified_by_llm
from tests.fakes import FakeEmbeddings

TOPIC = "checkout-api connection pool exhausted under retry storm"
TRICKLE = {"pad": 40, "trickle_s": 0.25}  # 10 s in all, each read within the 1 s timeout
TRICKLE_HEAD = {"trickle_head": 40, "trickle_s": 0.25}  # the same, in the answer's head


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")  # boto3 signs Bedrock's requests with them
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    with FakeEmbeddings(dimension=8) as server:
        yield server


def _settings(tmp_path, url) -> Settings:  # type: ignore[no-untyped-def]
    return Settings(home=tmp_path / "home", openai_base_url=url, openai_model="fake-embed", openai_dimension=8,
                    openai_api_key="test-key", http_timeout_seconds=1.0, embed_retry_seconds=0,
                    vector_min_similarity=-1.0)  # fmt: skip


def _query_settings(provider: str, tmp_path, url: str) -> tuple[Settings, int]:
    """The settings of `provider` (an OpenAI-compatible API or Bedrock's Titan) answered by the fake, and its dimension."""
    if provider == "openai":
        return _settings(tmp_path, url), 8
    return Settings(home=tmp_path / "home", bedrock_region="us-east-1", bedrock_endpoint_url=url, bedrock_dimension=256,
                    http_timeout_seconds=1.0, embed_retry_seconds=0, vector_min_similarity=-1.0), 256  # fmt: skip


@pytest.mark.parametrize("kind", ["trickle", "trickled head", "flood"])
@pytest.mark.parametrize("provider", ["openai", "bedrock"])
def test_a_query_vector_trickled_or_flooded_is_refused_and_recall_answers_lexically(tmp_path, fake, provider, kind):
    """httpx's timeout (and boto3's) bounds each read, and an answer was read whole: a trickled answer held the recall
    as long as it trickled, and a flooded one was held in memory whole (300 MB: the process peaked 600 MB up)."""
    settings, dimension = _query_settings(provider, tmp_path, fake.url)
    with Grandbo.init(settings, embedding=provider) as grandbo:
        memory = grandbo.org("acme", create=True)
        entry = memory.remember({"title": "checkout-api pool exhausted", "body": "retry storm from clients"})
        assert memory.stats().unreadable == 0  # embedded by a good answer
        misbehaving = {"trickle": TRICKLE, "trickled head": TRICKLE_HEAD}.get(
            kind, {"pad": answer_limit(1, dimension) + 1}
        )
        for name, value in misbehaving.items():
            setattr(fake.behaviour, name, value)
        result = memory.recall(TOPIC)
    assert [hit.entry.id for hit in result.hits] == [entry.id]  # found by its words
    skipped = [note for note in result.notes if note.startswith("vector arm skipped")]
    assert skipped, result.notes
    expected = f"over {answer_limit(1, dimension):,} bytes" if kind == "flood" else "within 1s"
    assert expected in skipped[0]
    if kind == "trickled head":  # the call ended at its deadline, not after the whole head (10 s of it)
        assert fake.behaviour.requests[-1]["head_sent"] < TRICKLE_HEAD["trickle_head"], "the whole head was waited for"


def test_an_entry_whose_vectors_came_flooded_stays_stored_and_is_embedded_by_the_next_good_answer(tmp_path, fake):
    with Grandbo.init(_settings(tmp_path, fake.url), embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        fake.behaviour.pad = answer_limit(1, 8) + 1
        entry = memory.remember({"title": "checkout-api pool exhausted", "body": "retry storm from clients"})
        assert memory.stats().unreadable == 1
        fake.behaviour.pad = answer_limit(1, 8) - 4096  # big, yet no more than one vector's answer may be
        grandbo.backfill()
        assert memory.stats().unreadable == 0
        assert memory.get(entry.id).id == entry.id


@pytest.mark.parametrize("make", [
    lambda url: OpenAIChatClient(url, "fake-chat", None, timeout=1.0),
    lambda url: AnthropicClient(url, "fake-chat", None, timeout=1.0),
    lambda url: BedrockConverseClient("fake-chat", "us-east-1", url, timeout=1.0),
], ids=["openai", "anthropic", "bedrock"])  # fmt: skip
@pytest.mark.parametrize("misbehaving", [TRICKLE, TRICKLE_HEAD, {"pad": ANSWER_BYTES + 1}],
                         ids=["trickle", "trickled head", "flood"])  # fmt: skip
def test_an_llm_answer_trickled_or_flooded_is_no_answer(fake, make, misbehaving):
    client = make(fake.url)
    fake.behaviour.chat_answers = ['{"category": "tone"}']
    assert client.complete("system", "prompt") == '{"category": "tone"}'
    for name, value in misbehaving.items():
        setattr(fake.behaviour, name, value)
    fake.behaviour.chat_answers = ['{"category": "tone"}']
    with pytest.raises(ProviderUnavailableError) as refused:
        client.complete("system", "prompt")
    assert "deterministic answer was used instead" in refused.value.message
    if misbehaving is TRICKLE_HEAD:  # the call ended at its deadline, not after the whole head (10 s of it)
        assert fake.behaviour.requests[-1]["head_sent"] < TRICKLE_HEAD["trickle_head"], "the whole head was waited for"
    client.close()


def test_a_large_error_page_is_still_the_providers_status(tmp_path, fake):
    """An error's body past the bound is cut, not refused: a proxy's 502 page stays a retryable outage."""
    with Grandbo.init(_settings(tmp_path, fake.url), embedding="openai") as grandbo:
        memory = grandbo.org("acme", create=True)
        fake.behaviour.status, fake.behaviour.pad = 502, answer_limit(1, 8) * 2
        result = memory.recall(TOPIC)
    assert any(note.startswith("vector arm skipped") and "HTTP 502" in note for note in result.notes), result.notes


def test_a_bedrock_converse_call_ends_at_its_callers_timeout(fake):
    """boto3 fixes its timeouts per client: a triage's budget of a second waited out the client's 30 s on a Bedrock
    LLM still thinking (the HTTP clients took the call's own); now Converse takes the call's timeout too."""
    client = BedrockConverseClient("fake-chat", "us-east-1", fake.url, timeout=30.0)
    fake.behaviour.hold, fake.behaviour.hold_s = threading.Event(), 10.0  # still thinking, 10 s at most
    fake.behaviour.chat_answers = ['{"category": "tone"}']
    try:
        with pytest.raises(ProviderUnavailableError) as refused:
            client.complete("system", "prompt", timeout=0.5)
        assert "ReadTimeout" in refused.value.message
    finally:
        fake.behaviour.hold.set()
        client.close()


def test_a_gzip_answer_is_inflated_within_the_bound(tmp_path, fake):
    """httpx inflates each read whole: 64 KB of gzip from a provider became 64 MB in memory before the bound was
    looked at. Now an answer is inflated a piece at a time: a good one is read, one past the bound refused early."""
    # a timeout that the fake's compressing of 64 MB (over a second on a loaded machine) stays within: this is memory
    provider = get_provider("openai", _settings(tmp_path, fake.url).model_copy(update={"http_timeout_seconds": 30.0}))
    fake.behaviour.gzip = True
    assert len(provider.embed(["checkout-api"])[0]) == 8  # compressed, and used
    fake.behaviour.pad = 64 * 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(EmbeddingError, match=f"over {answer_limit(1, 8):,} bytes"):
            provider.embed(["checkout-api"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        provider.close()
    assert peak < 8 * 1024 * 1024, f"{peak:,} bytes held at once"


def test_a_batch_answered_too_large_for_the_configured_dimension_names_the_setting(tmp_path):
    """A server answering 1536 numbers a vector to a provider set to 256 (a model not asked for a dimension answers its
    own): a batch of 64 passes the bound its 256-number vectors could take, refused as a service that "does not
    answer as the OpenAI API documents", never naming the dimension, the likely cause (review 24)."""
    with FakeEmbeddings(dimension=1536) as wide:
        provider = OpenAIProvider(_settings(tmp_path, wide.url).model_copy(update={"openai_dimension": 256}))
        with pytest.raises(EmbeddingError) as refused:
            provider.embed([f"checkout-api incident {n}" for n in range(64)])
        provider.close()
    assert f"over {answer_limit(64, 256):,} bytes" in refused.value.message
    assert "GRANDBO_OPENAI_DIMENSION (256)" in refused.value.message


_HUGE = b"1" + b"0" * 400  # a JSON number `json` reads as a Python int no float holds
_NESTED = b"[" * 3000 + b"]" * 3000  # deeper than Python's parser goes (about 1,000 levels)
UNREADABLE = {
    "huge integer": {"openai": b'{"data": [{"index": 0, "embedding": [%s, 0, 0, 0, 0, 0, 0, 1]}]}' % _HUGE,
                     "bedrock": b'{"embedding": [%s' % _HUGE + b", 0" * 255 + b"]}"},
    "nested vector": {"openai": b'{"data": [{"index": 0, "embedding": %s}]}' % _NESTED,
                      "bedrock": b'{"embedding": %s}' % _NESTED},
    "nested body": {"openai": _NESTED, "bedrock": _NESTED},
}  # fmt: skip


@pytest.mark.parametrize("kind", list(UNREADABLE))
@pytest.mark.parametrize("provider", ["openai", "bedrock"])
def test_an_answer_python_cannot_hold_skips_the_vector_arm_and_leaves_the_job(tmp_path, fake, provider, kind):
    """An integer of 400 digits (`math.isfinite` raised OverflowError) or arrays nested past Python's parser
    (RecursionError) are neither ValueError nor an EmbeddingError: every recall failed with HTTP 500 while the
    provider answered so, instead of answering by its words (probe 31)."""
    settings, _ = _query_settings(provider, tmp_path, fake.url)
    with Grandbo.init(settings, embedding=provider) as grandbo:
        memory = grandbo.org("acme", create=True)
        fake.behaviour.raw_embeddings = UNREADABLE[kind][provider]
        entry = memory.remember({"title": "checkout-api pool exhausted", "body": "retry storm from clients"})
        result = memory.recall(TOPIC)
        errors = grandbo.backfill().errors
        assert memory.stats().pending == 1
        fake.behaviour.raw_embeddings = None
        grandbo.backfill()
        assert memory.stats().unreadable == 0  # the next good answer is used
    assert [hit.entry.id for hit in result.hits] == [entry.id]  # found by its words
    assert any(note.startswith("vector arm skipped") for note in result.notes), result.notes
    assert errors and "Error:" not in errors[0], errors  # the provider's answer said, not a Python exception's


_DEEP_ANSWER = '{"category": "tone", "summary": ' + "[" * 3000 + "]" * 3000 + "}"


@pytest.mark.parametrize("make", [
    lambda url: OpenAIChatClient(url, "fake-chat", None, timeout=1.0),
    lambda url: AnthropicClient(url, "fake-chat", None, timeout=1.0),
    lambda url: BedrockConverseClient("fake-chat", "us-east-1", url, timeout=1.0),
], ids=["openai", "anthropic", "bedrock"])  # fmt: skip
@pytest.mark.parametrize("misbehaving", [{"raw_chat": b"[" * 3000 + b"]" * 3000}, {"chat_answers": [_DEEP_ANSWER]}],
                         ids=["nested body", "nested answer"])  # fmt: skip
def test_an_llm_answer_nested_past_the_parser_leaves_the_rules_classification(fake, make, misbehaving):
    """Nested past Python's parser, an answer raised RecursionError, which no caller expected: an edit's learning
    failed (its write-behind retried to the end, the rules' classification never kept) instead of falling back."""
    for name, value in misbehaving.items():
        setattr(fake.behaviour, name, list(value) if isinstance(value, list) else value)  # the fake pops answers
    fallback = (Category.STRUCTURE, "the rules' summary", "rules")
    client = make(fake.url)
    assert classified_by_llm(client, "acme", "a draft", "an edited draft", fallback) == fallback
    client.close()
