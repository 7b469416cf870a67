"""Migration 21 on a store written before organizations' storage was counted: each org's count is made from what
its logs hold, on both backends, and every write counts on from there. (One test per module: the module's
Postgres database keeps its schema, and this test takes migration 21 back out of it as the owner role.)"""

from grandbo import Grandbo
from tests.conftest import undo_migration
from tests.test_storage_limit import entries, logged_bytes


def test_migration_21_counts_what_each_org_stored_before_it(settings, raw, backend):
    with Grandbo.init(settings, embedding="deterministic") as before:
        for org, count in (("acme", 30), ("globex", 3)):
            memory = before.org(org, create=True)
            memory.remember_many(entries(count, size=4))
            memory.incidents.open("orders lag ü", services=["orders-db"], incident_id="inc-1")
        before.org("empty", create=True)
    held = {org: logged_bytes(raw, org) for org in ("acme", "globex", "empty")}
    upgrade = undo_migration(settings, 21, "ALTER TABLE orgs DROP COLUMN stored_bytes")

    with Grandbo.open(upgrade) as upgraded:
        assert 21 in upgraded.schema_versions()
        counted = {org: upgraded.org(org).stats().stored_bytes for org in held}
        if backend == "sqlite":  # the JSON text the store wrote, counted byte for byte
            assert counted == held
        else:  # jsonb as Postgres prints it: a space after each colon and comma, no less than the JSON written
            assert all(held[org] <= counted[org] <= held[org] * 1.2 for org in held), (counted, held)
        assert counted["empty"] == 0 and counted["globex"] < counted["acme"]
        upgraded.org("globex").remember_many(entries(2, start=100))
        assert (
            upgraded.org("globex").stats().stored_bytes - counted["globex"]
            == logged_bytes(raw, "globex") - held["globex"]
        )  # every write counts on from the count the migration made
