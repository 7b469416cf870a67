"""One learned note deleted, whatever its status (`grandbo notes delete`, `DELETE /v1/notes/{id}`, the console): its
text goes, it no longer counts toward GRANDBO_NOTES_PER_ORG, and its rule is never learned again (as a rejection keeps
it); an unknown id, or another organization's, is a 404 that changes nothing. Before, a pending note or one in force
could not be deleted at all (`DELETE /v1/notes/{id}` rejected it, and the rejected note still counted), and an org at
its limit because of pending notes was told to prune, which deleted none of them.
"""

from __future__ import annotations

import json

import pytest

from grandbo.errors import NoteLimitError, NotFoundError
from grandbo.service import Grandbo
from grandbo.tiers.edit_rules import Category
from grandbo.tiers.learning_model import NOTES, REFUSED, rule_digest
from tests.serving import serving
from tests.test_learning import EDITS
from tests.test_note_prune import STATUS_UPDATE, _teach, learned_from_the_command_line


def test_an_admin_deletes_a_pending_note_over_rest_and_its_rule_is_not_learned_again(settings):
    with Grandbo.init(settings.model_copy(update={"notes_per_org": 2}), embedding="deterministic") as grandbo:
        memory, other = grandbo.org("acme", create=True), grandbo.org("other", create=True)
        bulleted, shorter = _teach(memory, Category.STRUCTURE), _teach(memory, Category.LENGTH)  # pending: the limit
        theirs = _teach(other, Category.STRUCTURE)
        with serving(grandbo) as served:
            with served.client(memory.keys.create("write")[1]) as writer:
                assert writer.delete(f"/v1/notes/{bulleted.id}").status_code == 403  # an admin's
            with served.client(memory.keys.create("admin")[1]) as admin:
                unknown = admin.delete("/v1/notes/note-none")
                assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found"
                assert "note-none" in unknown.json()["error"]["message"]
                assert admin.delete(f"/v1/notes/{theirs.id}").status_code == 404  # another org's: not found
                deleted = admin.delete(f"/v1/notes/{bulleted.id}")
                assert deleted.status_code == 200, deleted.text
                assert deleted.json() == {"id": bulleted.id, "deleted": True, "status": "pending"}
                assert admin.delete(f"/v1/notes/{bulleted.id}").status_code == 404  # gone
                listed = admin.get("/v1/notes", params={"include_inactive": True}).json()["items"]
                assert [n["id"] for n in listed] == [shorter.id]
        assert other.learning.pending()[0].id == theirs.id  # another org's note stays
        assert memory._documents.get(NOTES, bulleted.id) is None
        assert memory._documents.get(REFUSED, rule_digest(bulleted.fingerprint)) is not None
        assert _teach(memory, Category.STRUCTURE) is None  # room made, and the deleted rule is not learned again
        assert _teach(memory, Category.VOCABULARY) is not None  # another rule is


@pytest.mark.parametrize("status", ["active", "rejected", "archived"])
def test_a_note_of_any_status_is_deleted_and_its_rule_refused_once(memory, status):
    note = _teach(memory, Category.STRUCTURE)
    if status == "active":
        memory.learning.approve_note(note.id)
    elif status == "rejected":
        memory.learning.reject_note(note.id)  # its refusal written with the rejection
    else:
        memory._documents.put([memory.learning._write(note.model_copy(update={"status": "archived"}), "note.archived",
                                                      note.version)], "test")  # fmt: skip
    assert memory.learning.delete_note(note.id) == status
    assert memory.learning.notes(include_inactive=True) == []
    assert len(memory._documents.history(REFUSED, rule_digest(note.fingerprint))) == 1  # written once
    with pytest.raises(NotFoundError):
        memory.learning.delete_note(note.id)


def test_at_the_limit_the_error_counts_the_notes_by_status_and_names_the_delete(settings):
    with Grandbo.init(settings.model_copy(update={"notes_per_org": 2}), embedding="deterministic") as grandbo:
        capped = grandbo.org("capped", create=True)
        _teach(capped, Category.STRUCTURE)
        capped.learning.reject_note(_teach(capped, Category.LENGTH).id)
        with pytest.raises(NoteLimitError) as refused:
            capped.learning.record_edit(*EDITS[Category.VOCABULARY][0], **STATUS_UPDATE)
    message = refused.value.message
    assert "1 pending, 0 in force, 1 rejected or archived" in message, message
    assert "grandbo notes prune" in message and "grandbo notes delete ID" in message
    assert "approving one makes no room" in message
    assert refused.value.detail["by_status"] == {"pending": 1, "in force": 0, "rejected or archived": 1}


def test_an_admin_deletes_a_note_from_the_command_line(cli, tmp_path):
    note_id = learned_from_the_command_line(cli, tmp_path)
    assert f"deleted {note_id} (it was pending" in cli("notes", "delete", note_id).stdout
    assert json.loads(cli("notes", "list", "--all", "--json").stdout) == []
    assert "No learned note" in cli("notes", "delete", note_id, code=2).stderr
