"""An erasure of a name finds it in the form an edit's comparison writes it, and a fold cannot write it back.

The edit rules compare a draft and its edit word by word (`tiers.edit_rules`: ASCII letters, digits and
apostrophes, lowercased), and an edit signal's summary and details, the note folded from three of them and that
note's fingerprint hold a changed name in that form: `Zorbax-quell-7731` as `zorbax quell 7731`. `purge-text
Zorbax-quell-7731` matched the text as typed (in any case) and left that form in every signal and note. And a fold
that read its signals before an erasure wrote its note after it, worded from the copies it read. Both backends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from grandbo.memory import OrgMemory
from grandbo.ports import Document
from grandbo.tiers.learning_model import SIGNALS
from tests.test_erasure_stale_writes import stored_texts

SECRET = "Zorbax-quell-7731"  # a name typed where it should not have been
WORDS = "zorbax quell 7731"  # the same name as the edit rules keep it


def _edit(memory: OrgMemory, n: int, name: str = SECRET) -> None:
    """An edit that swaps the name for another: classified `vocabulary`, its swap held in the words' form."""
    memory.learning.record_edit(
        f"Please page {name} about the database outage in the eu region, number {n}, today.",
        f"Please page Marlow about the database outage in the eu region, number {n}, today.",
        content_type="notice", author="alice",
    )  # fmt: skip


def _holding(raw: Callable[..., list[tuple[Any, ...]]], text: str) -> list[str]:
    return [held for held in stored_texts(raw, "acme") if text in held.lower()]


def test_an_erasure_finds_a_name_in_the_words_an_edit_kept_of_it(memory, raw):
    for n in range(3):
        _edit(memory, n)
    (note,) = memory.learning.notes(include_inactive=True)
    assert WORDS in note.text and _holding(raw, WORDS)  # the signals and the note hold the name as words

    report = memory.erasure.purge_text(SECRET, reason="a person's name", actor="alice")

    assert report.found and not _holding(raw, WORDS) and not _holding(raw, SECRET.lower())
    (note,) = memory.learning.notes(include_inactive=True)
    assert note.text == "In notice drafts, write 'marlow' instead of '[purged]'."
    assert all("[purged]" in s.summary and WORDS not in s.draft.lower() for s in memory.learning.signals())


def test_a_name_s_words_are_found_however_they_were_separated_and_exact_finds_only_the_text(memory):
    memory.remember({"id": "M-1", "title": "paged jane roe at night", "body": "she restarted the pool"})
    memory.remember({"id": "M-2", "title": "jane.roe was on call", "body": "and JANE_ROE the week after"})
    memory.remember({"id": "M-3", "title": "janeroe is one word", "body": "and jane\nroe spans two lines"})

    assert not memory.erasure.purge_text("Jane-Roe", reason="a person's name", actor="alice", exact=True).found
    report = memory.erasure.purge_text("Jane-Roe", reason="a person's name", actor="alice")

    assert sorted(report.entries) == ["M-1", "M-2"]  # not one word, nor across a line (JSON escapes the break)
    assert memory.get("M-3") is not None


def test_a_name_of_letters_the_edit_rules_do_not_keep_is_found_in_their_form_too(memory, raw):
    for n in range(3):
        _edit(memory, n, name="José Müller")
    assert _holding(raw, "jos m ller")

    memory.erasure.purge_text("José Müller", reason="a person's name", actor="alice")

    assert not _holding(raw, "jos m ller") and not _holding(raw, "josé müller")


def test_a_fold_that_read_its_signals_before_an_erasure_writes_no_note_with_the_erased_name(memory, raw, monkeypatch):
    for n in range(2):
        _edit(memory, n)
    erase = lambda: memory.erasure.purge_text(SECRET, reason="a person's name", actor="alice")  # noqa: E731
    documents = memory._documents
    find = documents.find
    read: list[list[Document]] = []

    def found(collection: str, *args: Any, **kwargs: Any) -> list[Document]:
        docs = find(collection, *args, **kwargs)
        if collection == SIGNALS and kwargs.get("keys") and not read:  # the fold's read of its group
            read.append(docs)
            erase()  # lands between the fold's read and its note's write
        return docs

    monkeypatch.setattr(documents, "find", found)
    _edit(memory, 2)

    assert read and WORDS in json.dumps([doc.data for doc in read[0]])  # it did read the name before the erasure
    (note,) = memory.learning.notes(include_inactive=True)  # folded all the same, from the signals erased
    assert note.text == "In notice drafts, write 'marlow' instead of '[purged]'."
    assert not _holding(raw, WORDS)


@pytest.mark.parametrize("text", ["a.b.c", "'''"])
def test_a_text_whose_words_are_too_short_is_matched_as_typed_only(memory, text):
    memory.remember({"id": "M-1", "title": "a b c d were the steps", "body": "nothing else"})
    report = memory.erasure.purge_text(text + "!", reason="a typo", actor="alice")
    assert not report.found and memory.get("M-1") is not None


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("André", "android phones and Sandra's laptop"),  # its words' form is one word, `andr`
        ("Chloé", "chlorine in the chloride tank"),
        ("Renée", "the children eat; the siren, even louder"),  # `ren e` across two words of others
    ],
)
def test_a_name_s_words_form_is_erased_only_as_whole_words_never_inside_other_words(memory, name, kept):
    memory.remember({"id": "M-1", "title": "unrelated notes", "body": kept})
    memory.remember({"id": "M-2", "title": f"paged {name} at night", "body": f"{name} restarted the pool"})

    report = memory.erasure.purge_text(name, reason="a person's name", actor="alice")

    assert report.entries == ["M-2"]  # the record holding the name, and no other
    assert memory.get("M-1").body == kept


def test_a_name_s_words_form_after_an_escaped_line_break_is_found_in_the_stored_json_as_in_its_value():
    from grandbo.erased import erasure_pattern

    value = "on call:\njane roe, then marlow"
    pattern = erasure_pattern("Jane-Roe")
    assert pattern.search(value) and pattern.search(json.dumps(value))  # the sieve reads the JSON: it must agree
