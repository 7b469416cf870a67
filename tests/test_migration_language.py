"""Migration 8 on a store written before it (no `orgs.language`): every organization reads `auto`, no stored term
changes, and a language can be declared afterwards, on both backends. (One test per module: the module's Postgres
database keeps its schema, and this test takes migration 8 back out of it as the owner role.)"""

import sqlite3

import psycopg

from grandbo import Grandbo
from tests.conftest import owner_url, undo_migration
from tests.test_declared_language import POOL, SCHEMA, TERSE, TOPIC


def test_an_existing_store_gains_the_language_column_as_auto_and_keeps_its_terms(settings, raw):
    with Grandbo.init(settings, embedding="deterministic") as before:
        before.org("acme", create=True).remember_many([POOL, SCHEMA, TERSE])
    terms = dict(raw("SELECT entry_id, terms FROM memory_entries", org="acme"))
    upgrade = undo_migration(settings, 8, "ALTER TABLE orgs DROP COLUMN language")
    assert not any(column == "language" for column in _org_columns(settings))

    with Grandbo.open(upgrade) as upgraded:
        assert 8 in upgraded.schema_versions()
        memory = upgraded.org("acme")
        assert memory.org_settings.language() == "auto"
        assert dict(raw("SELECT entry_id, terms FROM memory_entries", org="acme")) == terms
        assert memory.rebuild().identical
        assert memory.org_settings.set_language("german")["rederived"] == 1
        assert memory.recall(TOPIC, arm="lexical").hits[0].entry.id == "DE-POOL"
    with Grandbo.open(settings) as again:  # re-opening applies nothing twice
        assert again.org("acme").org_settings.language() == "german"


def _org_columns(settings):
    if settings.database_url:
        with psycopg.connect(owner_url(settings.database_url)) as conn:
            rows = conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'orgs'")
            return [row[0] for row in rows]
    with sqlite3.connect(settings.home / "grandbo.db") as conn:
        return [row[1] for row in conn.execute("PRAGMA table_info(orgs)")]
