"""The notes an org reads most (those in force, for every context block; those pending, for the review queue) are
read by their ref, which holds the status: every note the org ever learned was read and validated for each (20,000
notes: 2.3-3.3 s of the shared process a context block). Counted in documents read, never in time."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx

from grandbo.model import utcnow
from grandbo.ports import DocumentWrite
from grandbo.store.scoped import ScopedDocuments
from grandbo.tiers.context import build
from grandbo.tiers.edit_rules import Category
from grandbo.tiers.learning import Learning
from grandbo.tiers.learning_model import NOTES, REVIEWED_SHOWN, Note
from tests.serving import serving
from tests.test_console_http import signed_in

CATEGORIES = [Category.TONE, Category.STYLE, Category.VOCABULARY, Category.LENGTH, Category.STRUCTURE]


def note(n: int, status: str) -> Note:
    category = CATEGORIES[n % len(CATEGORIES)]
    return Note(id=f"note-{n:05d}", category=category, part="tone_style", text=f"Rule {n}: say it plainly.",
                status=status, fingerprint=f"print-{n}", created_at=utcnow() + timedelta(seconds=n))  # fmt: skip


def learned(memory, statuses: list[str], *, legacy: bool = False) -> list[Note]:  # type: ignore[no-untyped-def]
    """Notes of `statuses` stored as the learning tier writes them (or, `legacy`, with their category alone as
    their ref, as a release before migration 25 did)."""
    notes = [note(n, status) for n, status in enumerate(statuses)]
    writes = [Learning._write(one, "note.learned", 0) for one in notes]
    if legacy:
        writes = [DocumentWrite(NOTES, w.doc_id, w.data, w.event, ref=w.data["category"], expected_version=0)
                  for w in writes]  # fmt: skip
    for start in range(0, len(writes), 200):
        memory.learning.documents.put(writes[start : start + 200], "test")
    return notes


def counting(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    read: list[int] = []
    find, newest = ScopedDocuments.find, ScopedDocuments.newest

    def found(self, collection, *args, **kwargs):  # type: ignore[no-untyped-def]
        docs = find(self, collection, *args, **kwargs)
        read.extend([len(docs)] if collection == NOTES else [])
        return docs

    def newer(self, collection, *args, **kwargs):  # type: ignore[no-untyped-def]
        docs = newest(self, collection, *args, **kwargs)
        read.extend([len(docs)] if collection == NOTES else [])
        return docs

    monkeypatch.setattr(ScopedDocuments, "find", found)
    monkeypatch.setattr(ScopedDocuments, "newest", newer)
    return read


def test_a_context_block_reads_the_notes_in_force_not_every_note_learned(memory, monkeypatch):
    statuses = ["archived"] * 300 + ["rejected"] * 100 + ["pending"] * 60 + ["active"] * 4 + ["edited"]
    learned(memory, statuses)
    read = counting(monkeypatch)
    block = build(memory)
    assert sum(read) == 5, read  # every note was read: 465
    assert "Rule 460: say it plainly." in block.profile and "Rule 0:" not in block.profile
    read.clear()
    assert [n.id for n in memory.learning.pending()] == [f"note-{n:05d}" for n in range(400, 460)]
    assert sum(read) == 60, read
    read.clear()
    assert len(memory.learning.notes(include_inactive=True)) == len(statuses)  # all of them, when asked


def test_a_status_change_moves_the_note_to_its_new_ref(memory):
    learned(memory, ["pending", "pending", "active"])
    learning = memory.learning
    learning.approve_note("note-00000")
    learning.reject_note("note-00001")
    assert [n.id for n in learning.notes()] == ["note-00000", "note-00002"]
    assert learning.pending() == []
    assert [n.id for n in learning.reviewed(10)] == ["note-00001"]
    refs = {doc.doc_id: doc.ref for doc in learning.documents.find(NOTES)}
    assert refs == {"note-00000": "active/tone", "note-00001": "rejected/style", "note-00002": "active/vocabulary"}


def test_notes_stored_with_their_category_alone_are_still_read_by_status(memory):
    """A note a release before migration 25 stored (or an older export loaded) has its category alone as its ref."""
    learned(memory, ["archived", "pending", "active", "rejected", "edited", "pending"], legacy=True)
    learning = memory.learning
    assert [n.id for n in learning.notes()] == ["note-00002", "note-00004"]
    assert [n.id for n in learning.pending()] == ["note-00001", "note-00005"]
    assert [n.id for n in learning.reviewed(10)] == ["note-00003", "note-00000"]  # the most recently written first


def test_the_console_lists_the_most_recent_rejected_and_archived_notes_only(grandbo):
    memory = grandbo.org("alpha", create=True)
    learned(memory, ["archived"] * (REVIEWED_SHOWN + 20) + ["pending", "active"])
    key = memory.keys.create("admin", name="admin")[1]
    with serving(grandbo) as served:
        client: httpx.Client = signed_in(served, key)
        page = client.get("/ui/profile").text
    shown = set(re.findall(r'id="note-(note-\d+)"', page))
    assert len(shown) == REVIEWED_SHOWN + 2
    assert {f"note-{n:05d}" for n in (REVIEWED_SHOWN + 20, REVIEWED_SHOWN + 21)} <= shown  # pending and active
    assert "note-00000" not in shown and "note-00019" not in shown and "note-00020" in shown  # the oldest left out
    assert "grandbo notes list --all" in page
