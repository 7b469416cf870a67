"""An edit reads what its fold needs: the signals of its category written after the fold cursor's, without their
drafts and edits, and the notes of the new rule's fingerprint only. Every edit read every settled signal of its
category whole (probe 19 F6: ~400 of 160 KB took a small edit 202 ms, linear in the signals kept), and every fold
every note of the org. Counted in documents and bytes read, never in time."""

from __future__ import annotations

import json

from grandbo.ports import DocumentWrite
from grandbo.store.scoped import ScopedDocuments
from grandbo.tiers.learning_model import FOLD_EVERY, FOLDS, NOTES, SIGNALS, FoldCursor

WORDS = "the checkout service was degraded for users while we rolled back the deploy and restored traffic".split()


def _long(n: int, size: int) -> str:
    return " ".join(WORDS[(n + i) % len(WORDS)] for i in range(size // 6))[:size]


def _cut(learning, n: int, size: int = 20_000):  # type: ignore[no-untyped-def]
    draft = _long(n, size)
    return learning.record_edit(draft, draft[: len(draft) * 6 // 10], content_type="status-update", author="eve")


def _counting(monkeypatch) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    """Each read of the documents of SIGNALS and NOTES (and each history of a signal), by the bytes it brought."""
    read: dict[str, list[int]] = {"signals": [], "notes": [], "history": []}
    find, newest, history = ScopedDocuments.find, ScopedDocuments.newest, ScopedDocuments.history

    def sized(docs) -> int:  # type: ignore[no-untyped-def]
        return sum(len(json.dumps(doc.data)) for doc in docs)

    def found(self, collection, *args, **kwargs):  # type: ignore[no-untyped-def]
        docs = find(self, collection, *args, **kwargs)
        if collection in (SIGNALS, NOTES):
            read["signals" if collection == SIGNALS else "notes"].append(sized(docs))
        return docs

    def newer(self, collection, *args, **kwargs):  # type: ignore[no-untyped-def]
        docs = newest(self, collection, *args, **kwargs)
        if collection == NOTES:
            read["notes"].append(sized(docs))
        return docs

    def told(self, collection, doc_id):  # type: ignore[no-untyped-def]
        events = history(self, collection, doc_id)
        if collection == SIGNALS:
            read["history"].append(len(json.dumps(events, default=str)))
        return events

    monkeypatch.setattr(ScopedDocuments, "find", found)
    monkeypatch.setattr(ScopedDocuments, "newest", newer)
    monkeypatch.setattr(ScopedDocuments, "history", told)
    return read


def test_an_edit_reads_the_signals_after_the_cursor_without_their_text_whatever_the_category_holds(memory, monkeypatch):
    learning = memory.learning_with(None)
    notes = [_cut(learning, n)[1] for n in range(30)]  # 30 settled length signals of 20 KB each: 10 folds
    assert [n is not None for n in notes].count(True) == 1  # the same rule each time: learned once
    read = _counting(monkeypatch)
    for n in range(30, 30 + FOLD_EVERY):  # the next group, folded by its third edit
        _cut(learning, n)
    # The old edits read all 31-33 signals whole (about 1 MB each); now the ones after the cursor's, their small keys
    # (and the signals awaiting an LLM: none).
    assert len(read["signals"]) == 2 * FOLD_EVERY and max(read["signals"]) < 1_000, read
    assert read["notes"] and max(read["notes"]) < 200, read  # that fingerprint's statuses, not every note whole
    assert len(read["history"]) == 1  # the cursor's signal's sequence number, once a fold
    cursor = FoldCursor.model_validate(memory.learning.documents.get(FOLDS, "length").data)
    assert cursor.folded == 33 and cursor.seq is not None and cursor.epoch is not None


def test_a_cursor_of_an_older_release_is_found_by_its_signal_and_folds_go_on_as_before(memory):
    learning = memory.learning_with(None)
    for n in range(4):
        _cut(learning, n, 2_000)
    documents = memory.learning.documents
    held = documents.get(FOLDS, "length")
    older = {"through": held.data["through"], "folded": held.data["folded"]}  # as an older release wrote it
    documents.put([DocumentWrite(FOLDS, "length", older, "learning.folded", ref="length",
                                 expected_version=held.version)], "test")  # fmt: skip
    _cut(learning, 4, 2_000)
    signal, _ = _cut(learning, 5, 2_000)
    cursor = FoldCursor.model_validate(documents.get(FOLDS, "length").data)
    assert cursor.through == signal.id and cursor.folded == 6 and cursor.seq is not None
    assert [s.id for s in memory.learning.signals()].index(signal.id) == 5
