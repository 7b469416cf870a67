"""Turning text into lexical terms, and the topic contract.

The lexical arm lives or dies by identifiers: an on-call engineer who types `ERR_CONN_RESET` or
`checkout-api` must hit the entries that carry exactly that string, while ordinary words should match
their inflections ("evicted" and "eviction"). So every token is read twice:

* a compound identifier (`checkout-api`, `ERR_CONN_RESET`, `INC-044`, `10.0.0.1`, `OOMKilled`) is kept
  whole, lowercased and unstemmed, *and* split into its parts, so that "checkout api" still matches it
  and the whole identifier, being rarer, scores higher where it appears verbatim;
* a plain word is lowercased, dropped when it is a function word, and reduced to its Snowball stem;
* a token with digits (`p99`, `1200ms`, `http2`, `503`) is kept as it is.

Both backends index the terms this module produces, so they rank by the same terms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import Stemmer

from grandbo.errors import InvalidTopicError

_RAW_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[-_./:][A-Za-z0-9]+)*")
_CONNECTOR = re.compile(r"[-_./:]")
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_HAS_INNER_UPPER = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")

# Function words carry no evidence of what an entry is about. Written for this project: English
# articles, pronouns, auxiliaries, prepositions, conjunctions and question words.
STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are aren as at be because been before being
    below between both but by can cannot could couldn did didn do does doesn doing don down during each
    either else ever every few for from further had hadn has hasn have haven having he her here hers
    herself him himself his how i if in into is isn it its itself just let me might more most must mustn
    my myself neither no nor not now of off on once only or other ought our ours ourselves out over own
    per same shall shan she should shouldn so some such than that the their theirs them themselves then
    there these they this those through thus to too under until up upon us very via was wasn we were
    weren what when where whether which while who whom whose why will with within without won would
    wouldn yet you your yours yourself yourselves
    """.split()
)

_stemmer = Stemmer.Stemmer("english")


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return str(_stemmer.stemWord(word))


def _word_terms(part: str) -> str | None:
    """The term for one simple part, or None when it carries no evidence."""
    lowered = part.lower()
    if len(lowered) < 2 or lowered in STOP_WORDS:
        return None
    if lowered.isalpha():
        return _stem(lowered)
    return lowered


def _token_terms(raw: str) -> tuple[str, ...]:
    compound = _CONNECTOR.search(raw) is not None
    camel = not compound and _HAS_INNER_UPPER.search(raw) is not None
    if not compound and not camel:
        term = _word_terms(raw)
        return (term,) if term else ()
    parts = _CONNECTOR.split(raw) if compound else []
    pieces: list[str] = []
    for part in parts or [raw]:
        pieces.extend(_CAMEL_PART.findall(part) if _HAS_INNER_UPPER.search(part) else [part])
    terms = [raw.lower()]
    for piece in pieces:
        term = _word_terms(piece)
        if term:
            terms.append(term)
    return tuple(terms)


_TOKEN_CACHE: dict[str, tuple[str, ...]] = {}
_TOKEN_CACHE_LIMIT = 500_000


def terms(text: str) -> list[str]:
    """Every lexical term of `text`, in order, with repeats (term frequency matters)."""
    cache = _TOKEN_CACHE
    out: list[str] = []
    for raw in _RAW_TOKEN.findall(text):
        found = cache.get(raw)
        if found is None:
            found = _token_terms(raw)
            if len(cache) >= _TOKEN_CACHE_LIMIT:
                cache.clear()
            cache[raw] = found
        out += found
    return out


def unique_terms(text: str) -> list[str]:
    """The distinct terms of `text` in first-seen order (a query's terms)."""
    return list(dict.fromkeys(terms(text)))


def index_terms(title: str, body: str, tags: Iterable[str] = (), services: Iterable[str] = ()) -> list[str]:
    """The terms the lexical arm indexes for an entry: its title counts twice.

    A title is the densest statement of what an entry is about; counting its terms twice is a
    light form of field weighting (BM25F) that lifted nDCG@10 on both the shipped incident set
    and SciFact (see docs/evaluation.md).
    """
    # Same as terms(title) twice followed by the terms of the rest of entry_text: no term spans the
    # line breaks between its parts, so the title is tokenized once.
    title_terms = terms(title)
    extras = " ".join([*services, *tags])
    return title_terms + title_terms + terms(body) + terms(extras)


MIN_TOPIC_WORDS = 3


def identifier_term(topic: str, known: Iterable[str] = ()) -> str | None:
    """The whole-identifier term when `topic` is one identifier and nothing else, else None.

    An identifier is one token made of parts joined by `-_./:` or written in CamelCase that carries a
    capital or a digit (`ERR_CONN_RESET`, `INC-044`, `OOMKilled`, `10.0.0.1`), or a name in `known`
    (the org's catalog services: `checkout-api`). A lowercase slug of words (`redis-timeout`) is none
    of these: it describes nothing in particular, and the topic contract refuses it.
    """
    token = topic.strip()
    if not token or _RAW_TOKEN.fullmatch(token) is None:
        return None
    lowered = token.lower()
    if lowered in {name.lower() for name in known}:
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
    words = stripped.split(" ") if stripped else []
    has_word = any(any(ch.isalpha() for ch in word) for word in words)
    if len(words) < MIN_TOPIC_WORDS or not has_word:
        shown = stripped or "(empty)"
        raise InvalidTopicError(
            f"Topic {shown!r} is too short to recall by: it reads like a slug. "
            "Describe the problem in a sentence: the mechanism, the component and the symptom, "
            "e.g. 'redis connection resets on auth-service during a key eviction spike, p99 > 1s'. "
            "(An identifier alone, such as ERR_CONN_RESET, INC-044 or a catalog service, is looked up exactly.)",
            detail={"topic": topic, "words": len(words), "min_words": MIN_TOPIC_WORDS},
        )
    return stripped
