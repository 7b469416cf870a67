import pytest

from grandbo.errors import InvalidTopicError
from grandbo.retrieval.text import check_topic, terms, unique_terms


def test_compound_identifiers_are_kept_whole_and_split():
    assert terms("checkout-api") == ["checkout-api", "checkout", "api"]
    assert terms("ERR_CONN_RESET") == ["err_conn_reset", "err", "conn", "reset"]
    assert terms("INC-044") == ["inc-044", "inc", "044"]


def test_camel_case_identifiers_are_kept_whole_and_split():
    assert terms("OOMKilled") == ["oomkilled", "oom", "kill"]


def test_words_are_stemmed_and_function_words_dropped():
    assert terms("The keys were evicted during the eviction") == ["key", "evict", "evict"]


def test_tokens_with_digits_are_kept_verbatim():
    assert terms("p99 above 1200ms on http2") == ["p99", "1200ms", "http2"]


def test_dotted_versions_and_addresses_survive():
    assert terms("upgrade to v1.2.3 from 10.0.0.1")[:1] == ["upgrad"]
    assert "v1.2.3" in terms("upgrade to v1.2.3") and "10.0.0.1" in terms("host 10.0.0.1 down")


def test_sentence_punctuation_is_not_part_of_an_identifier():
    assert terms("It failed on checkout-api.") == ["fail", "checkout-api", "checkout", "api"]


def test_unique_terms_keep_first_seen_order():
    assert unique_terms("redis redis timeout redis") == ["redi", "timeout"]


@pytest.mark.parametrize("topic", ["redis-timeout", "checkout latency", "  ", "INC-044", "a b", "123 456 789"])
def test_slugs_and_two_word_topics_are_refused_with_the_remedy(topic):
    with pytest.raises(InvalidTopicError) as caught:
        check_topic(topic)
    assert "mechanism" in caught.value.message and "symptom" in caught.value.message
    assert caught.value.status == 422


def test_a_sentence_is_accepted_and_whitespace_normalised():
    assert check_topic("  redis   resets on auth-service\n") == "redis resets on auth-service"


def test_index_terms_are_the_title_twice_then_the_whole_entry_text():
    import json

    from grandbo.eval.runner import shipped_set
    from grandbo.model import entry_text
    from grandbo.retrieval.text import index_terms

    cases = [
        (" checkout-api: pool exhausted- ", "  -ERR_CONN_RESET  at\np99 ", ["INC-044", "p99"], ["checkout-api"]),
        ("RedisTimeout", "", [], []),
        ("", "body only", [], ["auth.service"]),
    ]
    for line in (shipped_set() / "corpus.jsonl").read_text().splitlines():
        doc = json.loads(line)
        cases.append((doc["title"], doc["text"], doc.get("tags", []), doc.get("services", [])))
    for title, body, tags, services in cases:
        expected = terms(title) + terms(entry_text(title, body, tags, services))
        assert index_terms(title, body, tags, services) == expected
