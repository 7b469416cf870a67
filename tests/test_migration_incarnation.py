"""Migration 26 on a store written before organizations had an incarnation: each org gets its epoch's number, its
handles write on, and an org created again under its name after a drop gets another one, so a handle of the old
org is refused. (One test per module: the module's Postgres database keeps its schema, and this test takes
migration 26 back out of it as the owner role.)"""

import pytest

from grandbo import Grandbo
from grandbo.errors import OrgDroppedError
from tests.conftest import undo_migration


def test_migration_25_gives_each_org_its_epoch_and_a_successor_another_incarnation(settings, raw):
    with Grandbo.init(settings, embedding="deterministic") as before:
        before.org("acme", create=True).remember({"title": "written before migration 26"})
        before.org("globex", create=True)
    upgrade = undo_migration(settings, 26, "ALTER TABLE orgs DROP COLUMN incarnation")

    with Grandbo.open(upgrade.model_copy(update={"key_cache_seconds": 0})) as upgraded:
        assert 26 in upgraded.schema_versions()
        rows = raw("SELECT org_id, incarnation, epoch FROM orgs ORDER BY org_id")
        assert [(org, incarnation == epoch) for org, incarnation, epoch in rows] == [("acme", True), ("globex", True)]
        old = upgraded.org("acme")
        old.remember({"title": "written after migration 26"})  # the org's own handles write on
        upgraded.drop_org("acme")
        upgraded.create_org("acme")
        with pytest.raises(OrgDroppedError):
            old.remember({"title": "a late write of the dropped org"})
        (successor,) = raw("SELECT incarnation FROM orgs WHERE org_id = %s", ("acme",))
        assert successor[0] > max(incarnation for _, incarnation, _ in rows)
        assert upgraded.org("acme").stats().total == 0
