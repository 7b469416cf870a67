"""Edit signals fold in the order the store committed them, not by the clock of the process that wrote them."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from grandbo.model import utcnow
from grandbo.ports import DocumentWrite
from grandbo.tiers.edit_rules import Category
from grandbo.tiers.learning import Signal, classify


def _edit(memory, old: str, new: str, n: int):  # type: ignore[no-untyped-def]
    return memory.learning.record_edit(f"Please {old} step {n}.", f"Please {new} step {n}.",
                                       content_type="status-update", author="dana")  # fmt: skip


def test_a_signal_stored_with_a_skewed_clock_is_folded_once_and_no_signal_twice(memory):
    """Folding ordered signals by (at, id): one stored after a fold with an hour-behind clock sorted before the
    folded group, so the next fold took two signals already used and the skewed one was never folded."""
    firsts = [_edit(memory, "utilize", "use", n) for n in range(3)]
    assert firsts[2][1] is not None  # the first group of three folded
    # A second process, its clock an hour behind, stores the fourth edit (as `record_edit` stores one).
    draft, edited = "Please commence step 3.", "Please start step 3."
    category, summary, details = classify(draft, edited)
    early = Signal(id="sig-skewed", content_type="status-update", author="dana", category=category, summary=summary,
                   details=details, classified_by="rules", draft=draft, edited=edited,
                   at=utcnow() - timedelta(hours=1))  # fmt: skip
    memory._documents.put([DocumentWrite("edit_signal", early.id, early.model_dump(mode="json"),
                                         "edit.vocabulary", ref="vocabulary")], "other-process")  # fmt: skip
    later = [_edit(memory, "commence", "start", n) for n in (4, 5)]
    assert later[1][1] is not None  # the second group folded
    notes = memory.learning.notes(include_inactive=True)
    folded = Counter(signal for note in notes for signal in note.signals)
    stored = [s.id for s in memory.learning.signals(Category.VOCABULARY)]
    assert len(stored) == 6 and sorted(folded) == sorted(stored) and set(folded.values()) == {1}
    assert [n.signals for n in notes][1] == ["sig-skewed", later[0][0].id, later[1][0].id]


def test_documents_list_in_the_order_the_store_wrote_them(memory):
    documents = memory._documents
    for doc_id in ("b", "a", "c"):
        documents.put([DocumentWrite("thing", doc_id, {"n": doc_id}, "thing.put", ref="r")], "test")
    documents.put([DocumentWrite("thing", "b", {"n": "b again"}, "thing.put", ref="r")], "test")
    assert [d.doc_id for d in documents.find("thing")] == ["a", "b", "c"]
    assert [d.doc_id for d in documents.find("thing", by_write=True)] == ["a", "c", "b"]
    assert [d.doc_id for d in documents.find("thing", ["r"], by_write=True)] == ["a", "c", "b"]
