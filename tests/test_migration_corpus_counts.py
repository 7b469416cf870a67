"""Migration 34 on a store written before the corpus counts were kept: each org's counts are counted once from its
rows, and `stats` answers as it did. (One test per module: the module's Postgres database keeps its schema, and
this test takes migration 34 back out of it as the owner role.)"""

from grandbo import Grandbo
from grandbo.model import EmbeddingSpace
from tests.conftest import undo_migration


def test_migration_34_counts_what_an_older_store_holds(settings):
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        entries = memory.remember_many([{"title": f"disk full on host {n}"} for n in range(5)])
        memory.retire(entries[0].id, reason="wrong")
        grandbo.org("beta", create=True).remember({"title": "beta's own"})
        grandbo._store.switch_space(EmbeddingSpace(provider="another", model="model-b", dimension=384))
        before = memory.stats()
    undone = [
        *(f"DROP TRIGGER {table}_counted_{op}" + (" ON " + table if settings.database_url else "")
          for table in ("memory_entries", "entry_vectors") for op in ("insert", "update", "delete")),
        *(["DROP TRIGGER memory_entries_counted_replaced"] if not settings.database_url else []),
        "DROP TABLE vector_counts",
        "ALTER TABLE orgs DROP COLUMN active_entries",
        "DROP INDEX embed_outbox_by_attempts",
        *(["DROP FUNCTION grandbo_count_memory_entries()", "DROP FUNCTION grandbo_count_entry_vectors()"]
          if settings.database_url else []),
    ]  # fmt: skip
    with Grandbo.open(undo_migration(settings, 34, *undone)) as grandbo:
        after = grandbo.org("acme").stats()
    assert (after.total, after.readable, after.pending, after.stale) == (4, 0, 4, 4)
    assert after == before
