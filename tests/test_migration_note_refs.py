"""Migration 25 on a store whose learned notes have their category alone as their ref (as every release before it
wrote them): each note's ref becomes its status and category, on both backends, so that the notes in force are
read by their ref. (One test per module: the module's Postgres database keeps its schema, and this test takes
migration 25 back out of it as the owner role.)"""

from grandbo import Grandbo
from tests.conftest import undo_migration
from tests.test_learning_notes_by_status import learned


def test_migration_24_puts_each_notes_status_in_its_ref(settings, raw):
    with Grandbo.init(settings, embedding="deterministic") as before:
        learned(before.org("acme", create=True), ["archived", "pending", "active", "rejected", "edited"], legacy=True)
        learned(before.org("globex", create=True), ["active"], legacy=True)
        before.org("globex").remember({"title": "kept", "body": "an entry's ref is not a note's"})
    upgrade = undo_migration(settings, 25)

    with Grandbo.open(upgrade) as upgraded:
        assert 25 in upgraded.schema_versions()
        refs = {
            (org, doc_id): ref
            for org in ("acme", "globex")
            for doc_id, ref in raw(
                "SELECT doc_id, ref FROM documents WHERE org_id = %s AND collection = 'learned_note'", (org,), org=org
            )
        }
        assert refs == {
            ("acme", "note-00000"): "archived/tone",
            ("acme", "note-00001"): "pending/style",
            ("acme", "note-00002"): "active/vocabulary",
            ("acme", "note-00003"): "rejected/length",
            ("acme", "note-00004"): "edited/structure",
            ("globex", "note-00000"): "active/tone",
        }
        learning = upgraded.org("acme").learning
        assert [n.id for n in learning.notes()] == ["note-00002", "note-00004"]
        assert [n.id for n in learning.pending()] == ["note-00001"]
