"""Migration 27 on a store written before organizations counted their erasures: each org starts at 0 and its
erasures count from then on (`grandbo.unerased`). (One test per module: the module's Postgres database keeps its
schema, and this test takes migration 27 back out of it as the owner role.)"""

from grandbo import Grandbo
from tests.conftest import undo_migration


def test_migration_27_counts_each_orgs_erasures_from_zero(settings, raw):
    with Grandbo.init(settings, embedding="deterministic") as before:
        before.org("acme", create=True).remember({"id": "L", "title": "token pasted", "body": "Zorbax-quell-7731"})
        before.org("globex", create=True)
    upgrade = undo_migration(settings, 27, "ALTER TABLE orgs DROP COLUMN erasures")

    with Grandbo.open(upgrade) as upgraded:
        assert 27 in upgraded.schema_versions()
        assert raw("SELECT org_id, erasures FROM orgs ORDER BY org_id") == [("acme", 0), ("globex", 0)]
        acme = upgraded.org("acme")
        assert acme.erasure.purge_text("Zorbax-quell-7731", reason="leak", actor="alice").entries == ["L"]
        acme.erasure.purge_text("nowhere-at-all", reason="leak", actor="alice")  # found nowhere: nothing counted
        # The entry's purge and the erasure of the documents (its audit record) each counted; globex untouched.
        assert raw("SELECT org_id, erasures FROM orgs ORDER BY org_id") == [("acme", 2), ("globex", 0)]
