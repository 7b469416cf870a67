"""Triage's alike test (`triage.evidence`: the recurrence and outlier labels) compares the marks alert grouping keeps
(`ingest.alert.summary_marks`: at most WORD_MARKS, a longer summary's lowest), not every word: the same answers as
the words for summaries of WORD_MARKS words or fewer, a bounded cost for longer ones."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta

import pytest

from grandbo.ingest.alert import (
    WORD_MARKS,
    Alert,
    marked_words,
    may_be_alike,
    summary_marks,
    summary_words,
    word_mark,
    words_alike,
)
from grandbo.memory import OrgMemory
from grandbo.model import utcnow
from grandbo.tiers import grouping
from grandbo.triage import evidence, run
from grandbo.triage.evidence import Seen, outlier, recurrence

T = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
_REGEX_WORD = re.compile(r"[a-z0-9]+")  # how summary_words found the words before


def _regex_words(summary: str) -> frozenset[str]:
    return frozenset(_REGEX_WORD.findall(summary.lower()))


def _summary(rng: random.Random, vocabulary: list[str], most: int) -> str:
    words = rng.choices(vocabulary, k=rng.randint(1, most))
    return (
        rng.choice(["", "ALERT: ", "[FIRING:1] "])
        + rng.choice([" ", ", ", " - "]).join(words)
        + rng.choice(["", ".", " (5%)"])
    )


def test_a_summary_s_words_are_the_runs_of_ascii_letters_and_digits_of_its_lowercased_text() -> None:
    """The words are split from the UTF-8 bytes, not found by a regex: the same runs, whatever the text holds."""
    rng = random.Random(7)
    alphabet = "abcXYZ019 -_.:/%é日\u212a\u0130\ud800\t\n"  # a Kelvin sign lowers to k; a lone surrogate splits
    for _ in range(2_000):
        text = "".join(rng.choices(alphabet, k=rng.randint(1, 40)))
        assert {word.decode() for word in summary_words(text)} == _regex_words(text)


def test_marks_are_the_same_in_every_process_and_grouping_keeps_them_in_hex() -> None:
    """Groups keep the marks: a mark is a CRC of the word (never Python's salted `hash`), fixed here."""
    assert word_mark(b"checkout") == 0xAF382D4EB745 and word_mark(b"5xx") == 0x64D9F499503A
    summary = "Checkout 5xx rate above 5% on checkout-api"
    assert grouping.word_marks(summary) == sorted(f"{mark:012x}" for mark in summary_marks(summary))


def test_recurrence_and_outlier_are_what_the_words_gave_for_summaries_of_word_marks_words_or_fewer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Random summaries of up to WORD_MARKS distinct words (a small vocabulary: many alike, many near half): each
    alert's labels by its marks are those its words gave (the comparison before, whole word sets)."""
    rng = random.Random(64)
    vocabulary = [f"w{n}" for n in range(24)] + ["5xx", "p99", "latency", "pool", "disk", "Checkout-API"]
    wide = [f"x{n}" for n in range(WORD_MARKS)]
    summaries = [_summary(rng, vocabulary, 12) for _ in range(300)]
    summaries += [" ".join(rng.sample(wide, rng.randint(40, WORD_MARKS))) for _ in range(60)]  # up to the bound
    received = [T - timedelta(hours=rng.uniform(0, 24 * 40)) for _ in summaries]
    said = [(f"fp{rng.randrange(600)}", rng.choice(["checkout", "search", None])) for _ in summaries]
    marked = [Seen(f"a{n}", fingerprint, service, summary_marks(summary), at, at)
              for n, (summary, at, (fingerprint, service)) in enumerate(zip(summaries, received, said))]  # fmt: skip
    by_words = [seen._replace(words=_regex_words(summary)) for seen, summary in zip(marked, summaries)]
    alerts = [Alert(source="manual", event_id=f"e{n}", fingerprint=fingerprint, service=service, summary=summary,
                    received_at=T) for n, (summary, (fingerprint, service)) in enumerate(zip(summaries, said))]  # fmt: skip
    ours = [(recurrence(alert, marked, T), outlier(alert, marked, T)) for alert in alerts]
    monkeypatch.setattr(evidence, "summary_marks", _regex_words)  # the words, as compared before
    theirs = [(recurrence(alert, by_words, T), outlier(alert, by_words, T)) for alert in alerts]
    assert ours == theirs
    assert {label for (label, _), _ in ours} == {"first", "rare", "frequent"}
    assert {label for _, (label, _, _) in ours} == {"rare", "anomalous", None}  # none 20% alike of 120 a service


def _long(rng: random.Random, n: int) -> list[str]:
    return [f"t{rng.randrange(10**4)}" for _ in range(n)]  # at most 6 characters a word with its space


def test_a_long_summary_is_compared_by_its_sample_of_word_marks_words() -> None:
    """Of 300 words, the WORD_MARKS of the lowest marks are compared: the same words in another order are alike;
    one that says those 64 again among 236 others of higher marks is alike it too (its words, 12% in common, were
    not), and one of the same length sharing half its words but none of the 64 is not (its words were)."""
    rng = random.Random(3)
    words = _long(rng, 300)
    marks = summary_marks(" ".join(words))
    assert len(marks) == WORD_MARKS and marks == summary_marks(" ".join(reversed(words)))
    sampled = set(marked_words({w.encode() for w in words}).values())
    highest = max(marks)
    higher = [w for w in _long(rng, 3_000) if word_mark(w.encode()) > highest][:236]
    sample_again = [w.decode() for w in sampled] + higher
    assert words_alike(marks, summary_marks(" ".join(sample_again)))
    assert not words_alike(_regex_words(" ".join(words)), _regex_words(" ".join(sample_again)))
    unsampled = [w for w in words if w.encode() not in sampled]
    half = unsampled[:200] + _long(rng, 100)
    assert words_alike(_regex_words(" ".join(words)), _regex_words(" ".join(half)))
    assert not words_alike(marks, summary_marks(" ".join(half)))


def test_a_summary_that_may_not_be_alike_by_its_words_is_not_alike_by_its_marks() -> None:
    """`may_be_alike` (the store's reads tell a storm's summaries by it) never says no where the marks say alike."""
    rng = random.Random(11)
    for trial in range(3_000):
        vocabulary = [f"v{n}" for n in range(rng.choice([20, 80, 200, 1_000]))]
        ours = " ".join(rng.choices(vocabulary, k=rng.randint(1, 300)))
        theirs = " ".join(rng.choices(vocabulary, k=rng.randint(1, 300)))
        sampled = set(marked_words(summary_words(ours)).values())
        if words_alike(summary_marks(ours), summary_marks(theirs)):
            assert may_be_alike(sampled, summary_words(theirs)), trial


def _storm(memory: OrgMemory, now: datetime) -> Alert:
    """An org's alerts on one service with summaries of 300 words, each a share of the triaged one's (and others')."""
    rng = random.Random(5)
    words = _long(rng, 300)
    alerts = []
    for n in range(120):
        kept = rng.sample(words, rng.randint(0, 300))
        text = " ".join(kept + _long(rng, 300 - len(kept)))
        at = now - timedelta(minutes=n + 1)
        alerts.append(Alert(source="alertmanager", event_id=f"s{n}", fingerprint=f"f{n}", service="checkout-api",
                            summary=text, started_at=at, received_at=at))  # fmt: skip
    memory.alerts.receive(alerts)
    return Alert(source="alertmanager", event_id="new", fingerprint="new", service="checkout-api",
                 summary=" ".join(words), received_at=now)  # fmt: skip


def test_a_storm_of_long_summaries_read_from_the_store_gets_the_labels_the_kept_alerts_give(
    grandbo, memory: OrgMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past KEPT_ALERTS a triage marks only the stored summaries that may be alike (`may_be_alike`): the same
    recurrence and outlier labels as the kept alerts, each marked whole."""
    now = utcnow().replace(microsecond=0)
    this = _storm(memory, now)
    kept = memory.triage(this, narrate=False, now=now)
    monkeypatch.setattr(run, "KEPT_ALERTS", 3)
    grandbo._snapshots.forget("acme")
    stored = memory.triage(this, narrate=False, now=now)
    keys = {"recurrence", "similar_alerts", "outlier", "outlier_share"}
    assert stored.model_dump(include=keys) == kept.model_dump(include=keys)
    assert 3 < kept.similar_alerts < 100
