"""An organization at GRANDBO_NOTES_PER_ORG makes room itself: an admin deletes its rejected and archived notes (the
text they hold), and a rejected rule stays unlearned all the same, kept as its fingerprint's digest, which counts
as no note (until an erasure of a word of the rule forgets it). Before, every note was kept and counted forever: at the limit every edit was refused and only the
operator could help."""

from __future__ import annotations

import json

import pytest

from grandbo.errors import NoteLimitError
from grandbo.service import Grandbo
from grandbo.tiers.edit_rules import Category
from grandbo.tiers.learning_model import NOTES, REFUSED, rule_digest
from tests.serving import serving
from tests.test_learning import EDITS
from tests.test_storage_limit import logged_bytes

STATUS_UPDATE = {"content_type": "status-update", "author": "alice"}


def _teach(memory, category, swap=("customers", "customers")):  # type: ignore[no-untyped-def]
    """The three edits of `category` (with `swap`, customers edited to another word): the note they folded."""
    note = None
    for draft, edited in EDITS[category]:
        edited = edited.replace(swap[0], swap[1]).replace(swap[0].title(), swap[1].title())
        _, note = memory.learning.record_edit(draft, edited, **STATUS_UPDATE)
    return note


def test_an_org_at_its_note_limit_prunes_and_learns_again_and_a_rejected_rule_stays_unlearned(settings):
    with Grandbo.init(settings.model_copy(update={"notes_per_org": 3}), embedding="deterministic") as grandbo:
        memory, other = grandbo.org("acme", create=True), grandbo.org("other", create=True)
        bulleted = _teach(memory, Category.STRUCTURE)
        memory.learning.reject_note(bulleted.id)
        shorter = _teach(memory, Category.LENGTH)  # left pending
        calmer = memory.learning.approve_note(_teach(memory, Category.TONE).id)
        with pytest.raises(NoteLimitError) as refused:  # three notes: the limit
            memory.learning.record_edit(*EDITS[Category.VOCABULARY][0], **STATUS_UPDATE)
        assert "grandbo notes prune" in refused.value.message and "POST /v1/notes/prune" in refused.value.message

        assert memory.learning.prune_notes(actor="alice").to_dict() == {"deleted": 1, "rejected": 1, "archived": 0}
        held = memory.learning.notes(include_inactive=True)
        assert sorted(n.id for n in held) == sorted([shorter.id, calmer.id])  # pending and in force stay
        assert memory._documents.get(NOTES, bulleted.id) is None  # its text is gone with it

        assert _teach(memory, Category.STRUCTURE) is None  # the rejected rule, taught again: not learned
        assert len(memory.learning.notes(include_inactive=True)) == 2
        learned = _teach(memory, Category.VOCABULARY)  # room made: a new rule is learned
        assert learned is not None and learned.status == "pending"
        assert len(memory.learning.notes(include_inactive=True)) == 3  # and the limit holds again
        with pytest.raises(NoteLimitError):
            memory.learning.record_edit(*EDITS[Category.VOCABULARY][0], **STATUS_UPDATE)

        again = _teach(other, Category.STRUCTURE)  # another org's refusals are its own
        assert again is not None and again.text == bulleted.text
        assert other.learning.prune_notes().to_dict()["deleted"] == 0


def _stored(memory, tmp_path) -> str:  # type: ignore[no-untyped-def]
    """Everything the org keeps of its documents, as its export writes them (every document and history event)."""
    memory.export_log(tmp_path / "export.jsonl")
    return (tmp_path / "export.jsonl").read_text()


def test_an_erasure_of_a_word_of_a_pruned_rejected_rule_leaves_nothing_it_is_found_again_from(memory, raw, tmp_path):
    """The pruned rule's refusal kept the SHA-256 of its fingerprint, a few words in a template: after `purge-text
    patrons`, hashing guesses at the word found it (review 24). The erasure deletes the refusal with its history, so
    the rule is forgotten: taught again, it is a new note pending review. Another rejected rule stays refused."""
    note = _teach(memory, Category.VOCABULARY, ("customers", "patrons"))
    bulleted = _teach(memory, Category.STRUCTURE)
    assert "patrons" in note.fingerprint and "patrons" not in bulleted.fingerprint
    memory.learning.reject_note(note.id)
    memory.learning.reject_note(bulleted.id)
    assert memory.learning.prune_notes().rejected == 2
    digest, kept = rule_digest(note.fingerprint), rule_digest(bulleted.fingerprint)
    assert {d.doc_id for d in memory._documents.find(REFUSED)} == {digest, kept}
    assert "patrons" not in json.dumps(memory._documents.get(REFUSED, digest).data)

    report = memory.erasure.purge_text("patrons", reason="a client's word", actor="alice")
    assert report.found and memory._documents.get(REFUSED, digest) is None
    assert memory._documents.history(REFUSED, digest) == []
    stored = _stored(memory, tmp_path)
    assert digest not in stored and "patrons" not in stored.lower()  # nothing to hash guesses against
    rows = [
        str(row)
        for table in ("documents", "document_events")
        for row in raw(f"SELECT collection, doc_id, data FROM {table} WHERE org_id = %s", ("acme",), org="acme")
    ]
    assert rows and not [row for row in rows if digest in row or "patrons" in row.lower()]  # nor in the database
    assert memory.stats().stored_bytes == logged_bytes(raw, "acme")  # the refusal's history taken off the count
    assert kept in stored and memory._documents.get(REFUSED, kept) is not None  # the other rule: refused still
    assert _teach(memory, Category.STRUCTURE) is None

    again = _teach(memory, Category.VOCABULARY, ("customers", "patrons"))  # forgotten, neither learned nor refused
    assert again is not None and again.status == "pending" and again.text == note.text
    assert [n.id for n in memory.learning.notes(include_inactive=True)] == [again.id]


def test_an_erasure_of_a_word_of_a_rejected_rule_forgets_the_rule_its_note_kept(memory, tmp_path):
    """The rejected note kept (not pruned): its fingerprint reads "[purged]" after the erasure, and its refusal is
    gone with the word; taught again, the rule is a new note pending review."""
    note = _teach(memory, Category.VOCABULARY, ("customers", "patrons"))
    memory.learning.reject_note(note.id)
    assert memory.erasure.purge_text("patrons", reason="a client's word", actor="alice").documents
    assert memory._documents.find(REFUSED) == [] and rule_digest(note.fingerprint) not in _stored(memory, tmp_path)
    again = _teach(memory, Category.VOCABULARY, ("customers", "patrons"))
    assert again is not None and again.status == "pending"
    statuses = {n.id: n.status for n in memory.learning.notes(include_inactive=True)}
    assert statuses == {note.id: "rejected", again.id: "pending"}


def test_a_prune_deletes_archived_notes_whose_rules_may_be_learned_again(memory):
    memory.org_settings.set_auto_apply_learned(True)
    words = ["clients", "buyers", "shoppers", "merchants", "patrons", "members"]
    for word in words:  # six notes of a category: the oldest archived
        _teach(memory, Category.VOCABULARY, ("customers", word))
    memory.org_settings.set_auto_apply_learned(False)
    pending = _teach(memory, Category.STRUCTURE)
    (archived,) = [n for n in memory.learning.notes(include_inactive=True) if n.status == "archived"]
    assert "clients" in archived.text
    assert memory.learning.prune_notes().to_dict() == {"deleted": 1, "rejected": 0, "archived": 1}
    statuses = sorted(n.status for n in memory.learning.notes(include_inactive=True))
    assert statuses == ["active"] * 5 + ["pending"] and pending.id in {n.id for n in memory.learning.pending()}
    assert memory._documents.find(REFUSED) == []  # an archived rule was never refused
    relearned = _teach(memory, Category.VOCABULARY, ("customers", "clients"))
    assert relearned is not None and relearned.text == archived.text


def test_an_admin_prunes_notes_over_rest(settings):
    with Grandbo.init(settings.model_copy(update={"notes_per_org": 1}), embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.learning.reject_note(_teach(memory, Category.STRUCTURE).id)
        with serving(grandbo) as served:
            with served.client(memory.keys.create("write")[1]) as writer:
                refused = writer.post("/v1/signals", json={"draft": "a b", "edited": "a c", **STATUS_UPDATE})
                assert refused.status_code == 409 and "grandbo notes prune" in refused.json()["error"]["remedy"]
                assert writer.post("/v1/notes/prune").status_code == 403  # an admin's
            with served.client(memory.keys.create("admin")[1]) as admin:
                pruned = admin.post("/v1/notes/prune")
                assert pruned.status_code == 200 and pruned.json() == {"deleted": 1, "rejected": 1, "archived": 0}
                assert admin.post("/v1/notes/prune").json()["deleted"] == 0
                assert admin.get("/v1/notes", params={"include_inactive": True}).json()["items"] == []


def learned_from_the_command_line(cli, tmp_path) -> str:  # type: ignore[no-untyped-def]
    """The id of the pending note `grandbo edit` learns from one category's edits by one author."""
    for n, (draft, edited) in enumerate(EDITS[Category.STRUCTURE]):
        (tmp_path / f"d{n}").write_text(draft)
        (tmp_path / f"e{n}").write_text(edited)
        cli("edit", "--draft", str(tmp_path / f"d{n}"), "--edited", str(tmp_path / f"e{n}"), "--type", "status-update",
            "--author", "alice")  # fmt: skip
    return str(json.loads(cli("notes", "list", "--json").stdout)[0]["id"])


def test_an_admin_prunes_notes_from_the_command_line(cli, tmp_path):
    note_id = learned_from_the_command_line(cli, tmp_path)
    cli("notes", "reject", note_id)
    assert "deleted 1 rejected and 0 archived notes" in cli("notes", "prune").stdout
    assert json.loads(cli("notes", "list", "--all", "--json").stdout) == []
    assert json.loads(cli("notes", "prune", "--json").stdout) == {"deleted": 0, "rejected": 0, "archived": 0}


def test_a_pruned_rejected_rule_stays_unlearned_in_an_org_its_log_is_moved_to(grandbo, memory, tmp_path):
    memory.learning.reject_note(_teach(memory, Category.STRUCTURE).id)
    memory.learning.prune_notes()
    memory.export_log(tmp_path / "acme.jsonl")
    moved = grandbo.org("moved", create=True)
    moved.import_log(tmp_path / "acme.jsonl")
    assert _teach(moved, Category.STRUCTURE) is None and moved.learning.notes(include_inactive=True) == []


def test_a_prune_deletes_a_note_rewritten_and_moved_while_it_ran(memory, raw, monkeypatch):
    """A stale page was read again from the place the prune had reached, so a note the stale write's rival moved to
    the newest place was left, uncounted. None of this release's writes moves a rejected note (an erasure keeps its
    write time), so the test moves it itself, as such a write would, while the prune writes its second page."""
    from grandbo.model import utcnow
    from grandbo.store.scoped import ScopedDocuments
    from grandbo.tiers import learning_model

    notes = [_teach(memory, Category.VOCABULARY, ("customers", word)) for word in ("clients", "buyers", "patrons")]
    notes += [_teach(memory, Category.STRUCTURE), _teach(memory, Category.LENGTH)]
    for note in notes:
        memory.learning.reject_note(note.id)
    oldest_but_one = memory._documents.newest(NOTES, 5)[3].doc_id  # on the second page of two notes
    monkeypatch.setattr(learning_model, "NOTES_PAGE", 2)
    put, writes = ScopedDocuments.put, []

    def moving(self, batch, actor, *args, **kwargs):  # type: ignore[no-untyped-def]
        if any(w.collection == NOTES and w.data is None for w in batch) and len(writes) == 1:
            raw("UPDATE documents SET version = version + 1, updated_at = %s WHERE org_id = %s AND doc_id = %s",
                (utcnow().isoformat(), "acme", oldest_but_one), org="acme")  # fmt: skip
        writes.append(batch)
        return put(self, batch, actor, *args, **kwargs)

    monkeypatch.setattr(ScopedDocuments, "put", moving)
    assert memory.learning.prune_notes().to_dict() == {"deleted": 5, "rejected": 5, "archived": 0}
    assert memory.learning.notes(include_inactive=True) == []
