"""Redaction screens each text in one RE2 pass and searches only the defaults the pass found in it (issue 24: one
org's import must not slow the others, and 85% of masking's CPU was prefilters and searches that found nothing).
The screen must change nothing masked: each text below comes out byte for byte as the straightforward masking
(every pattern in turn: its prefilter, then its search) leaves it, whatever the organization's patterns."""

from __future__ import annotations

import json
import random

import pytest

from grandbo import masking
from grandbo.eval.bench import synthetic_entry
from grandbo.history.public import PUBLIC_FILE
from grandbo.masking import _ASCII_SPACES, Budget, Pattern, Screen, compiled, mask_finder, masks, shadow
from grandbo.redaction import DEFAULT_NAMES, DEFAULT_PATTERNS, Redactor
from tests.test_redaction import SECRETS, TEXT
from tests.test_redaction_linear import ADVERSARIAL


def straightforward(redactor: Redactor, own: dict[str, str], text: str) -> str:
    """What `Redactor.text` did before the screen: each pattern whose prefilter passes searches the text."""
    if not text:
        return text
    lowered, shade, budget = text.lower(), None, Budget()
    kept = masks(text, mask_finder([*DEFAULT_NAMES, *own]))
    for pattern in redactor.patterns:
        if pattern.may_match(text, lowered):
            text, shade, kept = pattern.sub(text, shadow(text) if shade is None else shade, budget, kept)
    return text


# Text a mask changes the boundary of: a value cut at 200 characters leaves a card number, an address or a key
# after `]` instead of after a letter, which a later default then matches (the text is screened again).
BOUNDARIES = [
    "password=" + "a" * 200 + "4111111111111111 end",
    "token=" + "b" * 200 + "10.1.2.3 end",
    "pwd=" + "c" * 200 + "::1 x",
    "secret:" + "d" * 200 + "sk-" + "e" * 24,
    "ok [REDACTED:email]4111 1111 1111 1111 and [REDACTED:ipv4]10.0.0.1",
    "https://bot:xx-ghp_" + "A" * 36 + "@github.com/acme and x[REDACTED:email] and x",
]
# Characters a shadow stands for, and pieces of every default, mixed at random (a fixed seed).
PIECES = ["4111", "1111 ", "5500-0000-", "0004", " ", "-", ".", ":", "::", "@", "://", "password=", "token: ",
          "api_key='", "ghp_", "glpat-", "xoxb-", "sk-", "AKIA", "AIza", "eyJ", "Bearer ", "x", "Ab9", "10.0.",
          "fe80", "[REDACTED:email]", "[REDACTED:", "ſ", "İ", "\u3000", "\u00a0", "４", "é", "\n", "\x0b", "_",
          "-----BEGIN RSA PRIVATE KEY-----", "user", "example.com", "/", "#", "%", "=", '"', "'"]  # fmt: skip


def _mixed(count: int) -> list[str]:
    rng = random.Random(24)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 40))) for _ in range(count)]


def _public() -> list[str]:
    """Every string of the public post-mortems, and each record whole as JSON (when the data is beside us)."""
    if not PUBLIC_FILE.is_file():
        return []
    lines = PUBLIC_FILE.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [*lines, *(value for record in records for value in record.values() if isinstance(value, str))]


def _synthetic() -> list[str]:
    rng = random.Random(7)
    entries = [synthetic_entry(rng, number) for number in range(300)]
    return [text for entry in entries for text in (entry.title, entry.body, *entry.tags)]


def _adversarial() -> list[str]:
    return [piece for text in ADVERSARIAL.values() for piece in (text[:20_000], text[-20_001:])]


CORPUS = [TEXT, *SECRETS, *BOUNDARIES, *_mixed(3000), *_public(), *_synthetic(), *_adversarial()]
OWN = {"digits": "[0-9]+", "tail": "ED:[a-z]+\\]x", "ticket": "TKT-[0-9]{6}"}


@pytest.mark.parametrize(
    ("own", "disabled"),
    [({}, ()), ({}, ("secret_value", "url_password")), (OWN, ()), ({}, DEFAULT_NAMES[::2])],
    ids=["defaults", "some-off", "own-patterns", "every-other"],
)
def test_the_screen_masks_every_text_as_the_straightforward_masking_does(own, disabled, monkeypatch):
    # The same output is asked, not the CPU bound of an org's own patterns: `tail` searched some adversarial texts
    # for close to the 0.5 s a value may take, and past it once on a loaded CI machine (PatternTooSlowError).
    monkeypatch.setattr(masking, "OWN_PATTERN_SECONDS", 60.0)
    redactor = Redactor(own, disabled)
    differ = [text for text in CORPUS if redactor.text(text) != straightforward(redactor, own, text)]
    assert not differ, f"{len(differ)} texts masked otherwise, the first: {differ[0][:300]!r}"


def test_a_mask_that_opens_a_later_match_is_followed_by_that_match():
    assert Redactor().text(BOUNDARIES[0]) == "password=[REDACTED:secret_value][REDACTED:card_number] end"
    assert Redactor().text(BOUNDARIES[1]) == "token=[REDACTED:secret_value][REDACTED:ipv4] end"


def test_the_screen_names_every_default_that_matches_a_text():
    """A sign (what the screen searches for a default) holds in every text the default matches: a default the
    screen leaves out would leave its secrets in the text."""
    screen = Screen(DEFAULT_PATTERNS)
    for text in CORPUS:
        shade = shadow(text)
        found = screen.matching(shade)
        assert found is not None
        data = shade.encode("ascii")
        missed = [p.name for n, p in enumerate(DEFAULT_PATTERNS) if n not in found and p.regex.search(data)]
        assert not missed, (missed, text[:300])


def test_a_screen_names_its_end_on_every_pass_that_read_the_whole_text():
    """RE2 reports no match at all when a set's DFA runs out of memory: the screen's end (`\\z`, its last index)
    tells such a pass (None: every pattern searched) from a text that matches nothing."""
    screen = Screen([Pattern("blowup", compiled("a[ab]{20}c"))])
    assert screen.matching("") == screen.matching("b" * 1000) == frozenset({1})
    assert screen.matching("a" + "ab" * 10 + "c") == frozenset({0, 1})


@pytest.mark.parametrize("space", sorted(_ASCII_SPACES))
def test_an_ascii_text_with_a_space_only_python_reads_as_one_is_shadowed(space):
    """The shadow of an ASCII text is the text itself unless it holds a space RE2's `\\s` lacks (`\\x0b`, `\\x1c`
    to `\\x1f`), found by a scan of its own for each: one left out would leave `password\\x0b= x` unmasked."""
    assert shadow(f"a{space}b") == "a\fb"
    assert Redactor().text(f"password{space}= hunter2secret") == f"password{space}= [REDACTED:secret_value]"
