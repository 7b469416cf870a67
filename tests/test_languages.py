"""Text in any language: normalisation, words of every script, stemming by language, and recall by an
entry's own words in German, French, Spanish, Russian, Japanese and Chinese."""

import pytest

from grandbo.errors import InvalidTopicError
from grandbo.retrieval.text import check_topic, identifier_term, index_terms, language_of, terms

INCIDENTS = [
    {
        "id": "DE-1",
        "title": "Störung der Zahlungsdatenbank",
        "body": "Die Verbindungen zur Datenbank wurden nach dem Failover abgebrochen; Bestellungen schlugen fehl.",
        "lang": "german",
        "topic": "Verbindung zur Zahlungsdatenbank abgebrochen, wieder eine Störung",
    },
    {
        "id": "FR-1",
        "title": "Panne du café en ligne : certificats expirés",
        "body": "Le certificat TLS du site a expiré pendant la nuit et les paiements ont échoué jusqu'au matin.",
        "lang": "french",
        "topic": "les paiements échouent car le certificat a expiré",
    },
    {
        "id": "ES-1",
        "title": "Caída del balanceador de carga",
        "body": "Las conexiones se agotaron en el balanceador y los usuarios recibieron errores de tiempo de espera.",
        "lang": "spanish",
        "topic": "los usuarios reciben errores por conexiones agotadas del balanceador",
    },
    {
        "id": "RU-1",
        "title": "Отказ очереди сообщений",
        "body": "Брокер сообщений перестал принимать соединения, очередь заказов переполнилась.",
        "lang": "english",  # no Latin words: the Cyrillic ones are stemmed as Russian by their script
        "topic": "брокер не принимает соединения и очереди переполнены",
    },
    {
        "id": "JA-1",
        "title": "決済サービスのタイムアウト",
        "body": "データベースへの接続がタイムアウトし、決済が失敗しました。",
        "lang": "english",
        "topic": "決済が失敗する、データベース接続のタイムアウト",
    },
    {
        "id": "ZH-1",
        "title": "支付服务数据库连接超时",
        "body": "数据库连接池耗尽，支付请求全部失败。",
        "lang": "english",
        "topic": "数据库连接池耗尽导致支付失败",
    },
]


def test_letters_outside_ascii_stay_in_their_words():
    assert terms("Störung") == ["störung"] and terms("the café is closed") == ["café", "close"]
    assert "störung" in terms("Die Störungen der Datenbank")  # the German stem keeps its umlaut


def test_fullwidth_and_compatibility_forms_are_the_same_word():
    assert terms("ＥＲＲ＿ＣＯＮＮ＿ＲＥＳＥＴ on ｃｈｅｃｋｏｕｔ－ａｐｉ") == terms("ERR_CONN_RESET on checkout-api")
    assert identifier_term("ＩＮＣ－０４４") == "inc-044"


def test_case_folding_goes_beyond_ascii():
    assert terms("STRASSE") == terms("straße") and terms("ΣΦΑΛΜΑ") == terms("σφαλμα")


def test_words_of_every_script_become_terms():
    for text in ("Отказ базы данных", "خطأ في قاعدة البيانات", "σφάλμα βάσης δεδομένων", "डेटाबेस त्रुटि"):
        found = terms(text)
        assert len(found) >= 2 and all(term.strip() for term in found), text


def test_chinese_and_japanese_runs_become_character_pairs():
    assert terms("连接超时") == ["连接", "接超", "超时"]
    assert "接続" in terms("データベース接続エラー") and "タイ" in terms("タイムアウト")


def test_identifiers_are_kept_whole_beside_other_scripts():
    found = terms("ERR_CONN_RESET 接続エラー on checkout-api, INC-044 at 10.0.0.1")
    for whole in ("err_conn_reset", "checkout-api", "inc-044", "10.0.0.1", "接続"):
        assert whole in found


@pytest.mark.parametrize("incident", INCIDENTS, ids=lambda case: case["id"])
def test_each_language_is_detected_and_stemmed_in_it(incident):
    assert language_of(f"{incident['title']}\n{incident['body']}") == incident["lang"]


def test_stemming_follows_the_language():
    assert terms("die Verbindungen sind abgebrochen") == terms("die Verbindung wurde abgebrochen")
    assert terms("Отказы брокера") == terms("отказ брокер")  # Russian inflections meet at one stem
    assert terms("Le certificat a expiré") == ["certificat", "expir"]  # French function words dropped


def test_english_text_is_unchanged_by_language_detection():
    assert terms("The keys were evicted during the eviction") == ["key", "evict", "evict"]
    assert language_of("The database in the data centre was down for an hour") == "english"


@pytest.mark.parametrize("topic", ["接続エラー", "连接"])
def test_a_short_cjk_topic_is_refused_like_a_slug(topic):
    with pytest.raises(InvalidTopicError):
        check_topic(topic)


def test_a_cjk_sentence_is_a_topic():
    assert check_topic("データベース接続のタイムアウト") == "データベース接続のタイムアウト"


def test_each_entry_is_found_lexically_by_its_own_words(memory):
    memory.remember_many(
        [{"id": c["id"], "title": c["title"], "body": c["body"], "kind": "finding"} for c in INCIDENTS], strict=True
    )
    for case in INCIDENTS:
        hits = memory.recall(case["topic"], k=3, arm="lexical").hits
        assert hits and hits[0].entry.id == case["id"], (case["id"], [hit.entry.id for hit in hits])
    shown = memory.recall("Störung der Zahlungsdatenbank heute Nacht", k=1, arm="lexical").hits[0]
    assert "störung" in shown.why.lexical.terms


def test_index_terms_stem_every_part_in_the_entry_language():
    title, body = "Ausfall", "Die Verbindungen wurden abgebrochen und der Dienst war nicht erreichbar."
    assert index_terms(title, body)[:2] == ["ausfall", "ausfall"]
    assert "verbind" in index_terms(title, body)
