"""Turning text into lexical terms, and the topic contract.

The lexical arm lives or dies by identifiers: an on-call engineer who types `ERR_CONN_RESET` or
`checkout-api` must hit the entries that carry exactly that string, while ordinary words should match
their inflections ("evicted" and "eviction", "Störung" and "Störungen"). Text is first normalised
(Unicode NFKC, so fullwidth `ＥＲＲ` and `ERR` are one word, then case folding), and words are
runs of letters, marks and digits of any script. Every token is then read twice:

* a compound identifier (`checkout-api`, `ERR_CONN_RESET`, `INC-044`, `10.0.0.1`, `OOMKilled`) is kept
  whole, case-folded and unstemmed, *and* split into its parts, so that "checkout api" still matches it
  and the whole identifier, being rarer, scores higher where it appears verbatim;
* a plain word is dropped when it is a function word and otherwise reduced to its Snowball stem in
  the text's language (`languages.py`: Latin-script texts by their function words, or in the language
  their organization declared; other scripts by the script; a word of a script no stemmer covers is
  kept as it is);
* a token with digits (`p99`, `1200ms`, `http2`, `503`) is kept as it is;
* Chinese and Japanese (and Korean) text is written without spaces between words, so a run of those
  scripts becomes its overlapping character pairs ("接続エラー": 接続, 続エ, エラ, ラー): a two-character
  word of the query is then a term of the entry, whatever the words around it.

Both backends index the terms this module produces, so they rank by the same terms. The terms are
stored with each entry; a change to what this module produces ships with a migration that
re-derives them (see the stores' migrations 5 and 6).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import cache, lru_cache

import regex
import Stemmer

from grandbo.errors import InvalidTopicError
from grandbo.retrieval.languages import ENGLISH, STOP_WORDS, latin_language, script_language

_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\u30fc\u3005"  # with the long-vowel and repeat marks
_WORD = rf"[[\p{{L}}\p{{M}}\p{{N}}]--[{_CJK}]]"
_RAW_TOKEN = regex.compile(rf"[{_CJK}]+|{_WORD}+(?:[-_./:]{_WORD}+)*", regex.V1)
_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[-_./:][A-Za-z0-9]+)*")
_CJK_RUN = regex.compile(rf"[{_CJK}]", regex.V1)
_CJK_RUNS = regex.compile(rf"[{_CJK}]+", regex.V1)
_CONNECTOR = regex.compile(r"[-_./:]")
_CAMEL_PART = regex.compile(r"\p{Lu}+(?=\p{Lu}\p{Ll})|\p{Lu}?\p{Ll}+|\p{Lu}+|\p{N}+")
_HAS_INNER_UPPER = regex.compile(r"\p{Ll}\p{Lu}|\p{Lu}{2}\p{Ll}")

STOP_WORDS_EN = STOP_WORDS[ENGLISH]


@cache
def _stemmer(language: str) -> Stemmer.Stemmer:
    return Stemmer.Stemmer(language)


@lru_cache(maxsize=200_000)
def _stem(word: str, language: str) -> str:
    stem = str(_stemmer(language).stemWord(word))
    if word.isascii() or word.startswith(stem):
        return stem
    # Some stemmers also drop accents ("störung" -> "storung"); the term keeps the word's own letters
    # where the stem is the word's beginning but for them, so that "Störung" stays recognisable.
    head = word[: len(stem)]
    return head if _bare(head) == _bare(stem) else stem


def _bare(word: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFD", word) if not unicodedata.combining(ch))


def normalize(text: str) -> str:
    """NFKC, then case folding: the form every comparison of words is made in."""
    return text.casefold() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()


def _word_terms(part: str, latin: str) -> str | None:
    """The term for one simple, case-folded part, or None when it carries no evidence."""
    if len(part) < 2 or part in STOP_WORDS_EN:
        return None
    language = latin if part.isascii() or part[0] <= "\u024f" else script_language(part)
    if language is None:
        return part
    if language != ENGLISH and part in STOP_WORDS.get(language, ()):
        return None
    return _stem(part, language) if part.isalpha() else part


def _cjk_terms(run: str) -> tuple[str, ...]:
    return (run,) if len(run) == 1 else tuple(run[i : i + 2] for i in range(len(run) - 1))


def _token_terms(raw: str, latin: str) -> tuple[str, ...]:
    if _CJK_RUN.match(raw):
        return _cjk_terms(raw)
    compound = _CONNECTOR.search(raw) is not None
    camel = not compound and _HAS_INNER_UPPER.search(raw) is not None
    if not compound and not camel:
        term = _word_terms(raw.casefold(), latin)
        return (term,) if term else ()
    parts = _CONNECTOR.split(raw) if compound else []
    pieces: list[str] = []
    for part in parts or [raw]:
        pieces.extend(_CAMEL_PART.findall(part) if _HAS_INNER_UPPER.search(part) else [part])
    terms = [raw.casefold()]
    for piece in pieces:
        term = _word_terms(piece.casefold(), latin)
        if term:
            terms.append(term)
    return tuple(terms)


_TOKEN_CACHE: dict[str, dict[str, tuple[str, ...]]] = {}
_TOKEN_CACHE_LIMIT = 500_000


def _tokens(text: str) -> list[str]:
    if text.isascii():  # the same tokens, several times faster
        return _ASCII_TOKEN.findall(text)
    found: list[str] = _RAW_TOKEN.findall(unicodedata.normalize("NFKC", text))
    return found


def language_of(text: str) -> str:
    """The stemmer language of `text`'s Latin-script words (English unless the text says otherwise)."""
    return _language(_tokens(text))


def _language(raws: list[str]) -> str:
    return latin_language(raw.casefold() for raw in set(raws))


def _terms(raws: list[str], latin: str) -> list[str]:
    cache = _TOKEN_CACHE.setdefault(latin, {})
    out: list[str] = []
    for raw in raws:
        found = cache.get(raw)
        if found is None:
            found = _token_terms(raw, latin)
            if len(cache) >= _TOKEN_CACHE_LIMIT:
                cache.clear()
            cache[raw] = found
        out += found
    return out


def terms(text: str, language: str | None = None) -> list[str]:
    """Every lexical term of `text`, in order, with repeats (term frequency matters).

    `language` is the stemmer language of the Latin-script words; by default the text's own
    (`language_of`)."""
    raws = _tokens(text)
    return _terms(raws, language or _language(raws))


def unique_terms(text: str, language: str | None = None) -> list[str]:
    """The distinct terms of `text` in first-seen order (a query's terms); `language` as for `terms`."""
    return list(dict.fromkeys(terms(text, language)))


_WORDS = re.compile(r"\w+(?:[-./:]\w+)*")
_PARTS = re.compile(r"[^\W_]+")


def words_of(text: str) -> dict[str, str]:
    """Each term of `text` with the word of it that gave it (`redi` -> `Redis`, `conn` -> `CONN` of
    ERR_CONN_RESET), so that an explanation names a question's words, never their stems."""
    language, words = language_of(text), dict[str, str]()
    for token in _WORDS.findall(text):
        for piece in [*_PARTS.findall(token), token]:
            for term in terms(piece, language):
                words.setdefault(term, piece)
    return words


def index_terms(
    title: str,
    body: str,
    tags: Iterable[str] = (),
    services: Iterable[str] = (),
    language: str | None = None,
) -> list[str]:
    """The terms the lexical arm indexes for an entry: its title counts twice.

    A title is the densest statement of what an entry is about; counting its terms twice is a
    light form of field weighting (BM25F) that lifted nDCG@10 on both the shipped incident set
    and SciFact (see docs/evaluation.md). The entry's language is read from its title and body
    together (unless `language`, its organization's declared one, is given), and every part is stemmed
    in it.
    """
    # Same as terms(title) twice followed by the terms of the rest of entry_text: no term spans the
    # line breaks between its parts, so each part is tokenized once.
    title_raws, body_raws = _tokens(title), _tokens(body)
    language = language or _language(title_raws + body_raws)
    title_terms = _terms(title_raws, language)
    extras = " ".join([*services, *tags])
    return title_terms + title_terms + _terms(body_raws, language) + _terms(_tokens(extras), language)


MIN_TOPIC_WORDS = 3
MAX_TOPIC_CHARS = 4000  # a sentence or a paragraph; the vector arm reads only its first 256 word pieces
QUOTED_CHARS = 80  # of a topic refused as too vague, quoted back


def identifier_term(topic: str, known: Iterable[str] = ()) -> str | None:
    """The whole-identifier term when `topic` is one identifier and nothing else, else None.

    An identifier is one token made of parts joined by `-_./:` or written in CamelCase that carries a
    capital or a digit (`ERR_CONN_RESET`, `INC-044`, `OOMKilled`, `10.0.0.1`), or a name in `known`
    (the org's catalog services: `checkout-api`). A lowercase slug of words (`redis-timeout`) is none
    of these: it describes nothing in particular, and the topic contract refuses it.
    """
    token = unicodedata.normalize("NFKC", topic).strip()
    if not token or " " in token or _RAW_TOKEN.fullmatch(token) is None:  # a sentence: no identifier, at once
        return None
    lowered = token.casefold()
    if lowered in {normalize(name) for name in known}:
        return lowered
    shaped = _CONNECTOR.search(token) is not None or _HAS_INNER_UPPER.search(token) is not None
    if shaped and any(ch.isupper() or ch.isdigit() for ch in token):
        return lowered
    return None


def check_topic(topic: str) -> str:
    """Return the topic stripped, or refuse it when it is not a description of a problem.

    A bare slug (`redis-timeout`) or a two-word identifier (`checkout latency`) matches anything
    that mentions those words and nothing in particular; the caller is told to describe the
    mechanism, the component and the symptom in a sentence instead.
    """
    stripped = " ".join(topic.split())
    if len(stripped) > MAX_TOPIC_CHARS:
        raise InvalidTopicError(
            f"Topic is {len(stripped)} characters long; recall takes at most {MAX_TOPIC_CHARS}. Describe the "
            "problem in a sentence or two (the mechanism, the component and the symptom), not a whole log.",
            detail={"characters": len(stripped), "max_characters": MAX_TOPIC_CHARS},
        )
    words = stripped.split(" ") if stripped else []
    has_word = any(any(ch.isalpha() for ch in word) for word in words)
    # Chinese and Japanese put no spaces between words: two characters count as a word.
    runs = () if stripped.isascii() else _CJK_RUNS.findall(stripped)
    count = len(words) + sum(len(run) // 2 - 1 for run in runs if len(run) >= 4)
    if count < MIN_TOPIC_WORDS or not has_word:
        # a prefix: one 4,000-character word was quoted whole, twice, in a 13 KB error
        quoted = stripped[:QUOTED_CHARS] + "…" if len(stripped) > QUOTED_CHARS else stripped
        shown = quoted or "(empty)"
        raise InvalidTopicError(
            f"Topic {shown!r} is too short to recall by: it reads like a slug. "
            "Describe the problem in a sentence: the mechanism, the component and the symptom, "
            "e.g. 'redis connection resets on auth-service during a key eviction spike, p99 > 1s'. "
            "(An identifier alone, such as ERR_CONN_RESET, INC-044 or a catalog service, is looked up exactly.)",
            detail={"topic": quoted, "words": count, "min_words": MIN_TOPIC_WORDS},
        )
    return stripped


def query_text(topic: str) -> str | None:
    """The text recall embeds for `topic` (`check_topic`'s), or None when it embeds none for certain: an identifier
    (looked up exactly), one word (an identifier or refused: a catalog name is known only to the org), a topic
    refused."""
    if len(topic.split()) < 2 or identifier_term(topic) is not None:
        return None
    try:
        return check_topic(topic)
    except InvalidTopicError:
        return None
