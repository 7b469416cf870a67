"""An organization holds at most GRANDBO_NOTES_PER_ORG learned notes: every one is kept (a rejected note keeps its
rule from being learned again), and each fold looks among them for its rule's fingerprint, a scan of every note (at
50,000 rejected notes, 0.5-0.6 s a fold on the embedded store; the storage limit let millions be). At the limit an
edit is refused before it is stored, 409 note_limit; folds of edits sent at once just under it write one note past
the count at most, none, the org's note tally being written with each note, expecting the version read before the
count."""

from __future__ import annotations

import threading

import pytest

from grandbo.errors import NoteLimitError
from grandbo.service import Grandbo
from grandbo.tiers.edit_rules import Category
from tests.serving import interleaved, serving
from tests.test_learning import EDITS


def _edit(body: tuple[str, str]) -> dict[str, str]:
    return {"draft": body[0], "edited": body[1], "content_type": "status-update", "author": "alice"}


def test_an_org_at_its_note_limit_is_refused_an_edit_before_it_is_stored(settings):
    with Grandbo.init(settings.model_copy(update={"notes_per_org": 2}), embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        other = grandbo.org("other", create=True)
        with serving(grandbo) as served, served.client(memory.keys.create("write")[1]) as client:
            for category in (Category.STRUCTURE, Category.LENGTH):  # two notes: the limit
                answers = [client.post("/v1/signals", json=_edit(edit)) for edit in EDITS[category]]
                assert [a.status_code for a in answers] == [201] * 3 and answers[-1].json()["note"] is not None
            refused = client.post("/v1/signals", json=_edit(EDITS[Category.VOCABULARY][0]))
            assert refused.status_code == 409, refused.text
            error = refused.json()["error"]
            assert error["type"] == "note_limit" and "GRANDBO_NOTES_PER_ORG" in error["message"]
            assert "raise GRANDBO_NOTES_PER_ORG" in error["remedy"] and error["detail"]["limit"] == 2
        assert len(memory.learning.signals()) == 6  # the refused edit was not stored
        assert len(memory.learning.notes(include_inactive=True)) == 2
        with pytest.raises(NoteLimitError):  # the library (and `grandbo edit`, the MCP tool) alike
            memory.learning.record_edit(*EDITS[Category.VOCABULARY][0], content_type="status-update", author="bob")
        for draft, edited in EDITS[Category.VOCABULARY]:  # another org's notes are its own count
            _, note = other.learning.record_edit(draft, edited, content_type="status-update", author="alice")
        assert note is not None


def test_folds_at_once_just_under_the_note_limit_write_no_note_past_it(settings):
    """Two categories each two edits from a note, on an org one note short of its limit: their third edits at once
    fold one note: the other edit is refused, or stored with its group left for later (its cursor unmoved)."""
    capped = settings.model_copy(update={"notes_per_org": 1})
    with Grandbo.init(capped, embedding="deterministic") as grandbo:
        for round_ in range(4):
            memory = grandbo.org(f"org{round_}", create=True)
            pair = (Category.STRUCTURE, Category.LENGTH)
            for category in pair:
                for draft, edited in EDITS[category][:2]:
                    memory.learning.record_edit(draft, edited, content_type="status-update", author="alice")
            go, failures = threading.Barrier(2), []

            def third(category: Category, org: str = memory.org) -> None:
                learning = grandbo.org(org).learning
                go.wait()
                try:
                    learning.record_edit(*EDITS[category][2], content_type="status-update", author="alice")
                except BaseException as error:  # reported below
                    failures.append(error)

            threads = [threading.Thread(target=third, args=(category,)) for category in pair]
            interleaved(threads)  # their counts and writes interleave
            # An edit that came after the note was written is refused before it is stored; one that came before
            # is stored, and its fold finds the limit reached.
            assert all(isinstance(error, NoteLimitError) for error in failures) and len(failures) <= 1
            assert len(memory.learning.notes(include_inactive=True)) == 1
            assert len(memory.learning.signals()) == 6 - len(failures)
