"""What an erasure's pattern (`erased.erasure_pattern`) matches, and that it is cheap to search.

Its words' form checked where it may start (not inside another word, or after a JSON escape) with a look-behind the
pattern began with; Python's `re` tried it at every position of the text, so erasing "kiss kiss" searched each
document ten times slower than erasing "kiss". The check now follows the first word; it must match exactly what it
matched before: the same spans over texts of words in any case (with the characters Python's case-insensitive match
folds into i, k and s), any separators, and JSON escapes.
"""

from __future__ import annotations

import re
from re import _parser

from hypothesis import given, settings
from hypothesis import strategies as st

from grandbo.erased import erasure_pattern


def _checked_first(text: str) -> re.Pattern[str]:
    """The erasure pattern as it was: the text in any case, or its words' form, whose start is checked first."""
    words = re.findall(r"[A-Za-z0-9']+", text)
    if sum(map(len, words)) < 4 or words == [text]:
        return re.compile(re.escape(text), re.IGNORECASE)
    start, gap, end = r"(?:(?<![A-Za-z0-9])|(?<=\\[bfnrt]))", r"[^A-Za-z0-9'\"\\\x00-\x1f]+", r"(?![A-Za-z0-9])"
    spelled = start + gap.join(map(re.escape, words)) + end
    return re.compile(f"{re.escape(text)}|{spelled}", re.IGNORECASE)


# Each letter with what Python's case-insensitive match takes for it: the dotless i and the dotted capital I, the
# Kelvin sign, the long s, the micro sign and mu; letters JSON leaves as they are.
_FOLDS = {"i": "iIıİ", "k": "kK\u212a", "s": "sSſ", "µ": "µμΜ", "e": "eEé", "a": "aA", "n": "nN", "0": "0", "'": "'"}
WORD = st.text(alphabet=st.sampled_from(sorted(_FOLDS)), min_size=1, max_size=5)
SEPARATORS = [" ", "-", ", ", ".", "'", "_", "x", "1", "é", "\\n", "\\t", "\\\\", '\\"', "\\u00e9", "\n", '"', "\t"]
TEXT = st.lists(st.one_of(WORD, st.sampled_from(SEPARATORS)), min_size=1, max_size=5).map("".join)


def _recased(word: str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.sampled_from(_FOLDS.get(c.lower(), c + c.swapcase())) for c in word)).map("".join)


@st.composite
def _text_and_haystack(draw: st.DrawFn) -> tuple[str, str]:
    """A text to erase, and a text holding it and its words in other cases (folded as Python folds them), with any
    separators between them, among other words."""
    text = draw(TEXT)
    words = re.findall(r"[A-Za-z0-9'µ]+|[^\x00-\x7f]+", text) or [text]
    separated = st.lists(st.sampled_from(SEPARATORS), min_size=len(words), max_size=len(words)).flatmap(
        lambda gaps: st.tuples(*(_recased(word) for word in words)).map(
            lambda recased: "".join(word + gap for word, gap in zip(recased, gaps, strict=True))
        )
    )
    pieces = st.one_of(separated, st.sampled_from(words).flatmap(_recased), WORD, st.sampled_from(SEPARATORS))
    return text, "".join(draw(st.lists(pieces, max_size=12)))


@settings(max_examples=1000, deadline=None)
@given(_text_and_haystack())
def test_an_erasure_matches_what_it_matched_when_its_words_form_checked_its_start_first(case: tuple[str, str]):
    text, haystack = case
    assert [m.span() for m in erasure_pattern(text).finditer(haystack)] == [
        m.span() for m in _checked_first(text).finditer(haystack)
    ]


def test_the_words_form_is_found_after_a_json_escape_and_at_either_end_but_not_inside_a_word():
    pattern = erasure_pattern("Kiss-Kiss")
    assert [m.group() for m in pattern.finditer("kiss kiss|\\nKISS_KISS|akiss kiss|\\\\kiss kiss|kiss kissa")] == [
        "kiss kiss",
        "KISS_KISS",  # after `\n` in the stored JSON: its `n` is no letter of the value
        "kiss kiss",  # after `\\`: a backslash of the value, no escape
    ]
    assert pattern.fullmatch("\u212aiſſ - kıss")  # the Kelvin sign, the long s and the dotless i, as before


def test_an_erasure_pattern_begins_with_a_character_of_the_text_never_an_assertion_tried_at_every_position():
    for text in ["kiss kiss", "Jane Roe", "José Müller", "André", "orders-db 7731"]:
        pattern = erasure_pattern(text)
        op, av = _parser.parse(pattern.pattern, pattern.flags)[0]
        firsts = [branch[0][0] for branch in av[1]] if op is _parser.BRANCH else [op]
        assert all(first is _parser.LITERAL for first in firsts), (text, pattern.pattern)
