"""Migration 5 on a store written before it: stored terms and the deterministic provider's vectors are
re-derived by the Unicode tokenizer, on both backends. (One test per module: the Postgres database of a
module keeps its schema, and this test needs one that has not seen migration 5. On Postgres the session
migrates each module's database as its owner role; the test takes migration 5 back out of the record as the
owner, and the new release applies it as the owner, as `grandbo migrate` does.)"""

import re

import psycopg
import pytest

import grandbo.embeddings.deterministic as deterministic
import grandbo.service as service
import grandbo.store.postgres.migrations as postgres_migrations
import grandbo.store.sqlite.schema as sqlite_store
from grandbo import Grandbo
from grandbo.model import entry_text
from grandbo.retrieval.text import index_terms, terms
from tests.conftest import owner_url

ENTRIES = [
    {"id": "DE-1", "title": "Störung der Zahlungsdatenbank", "body": "Die Verbindungen wurden abgebrochen."},
    {"id": "JA-1", "title": "決済サービスのタイムアウト", "body": "データベースへの接続がタイムアウトしました。"},
    {"id": "EN-1", "title": "Redis eviction storm", "body": "Keys evicted under allkeys-lru on redis-sessions."},
]


def _ascii_only(text: str) -> str:
    """What the tokenizer before migration 5 saw: every character outside ASCII was a separator."""
    return re.sub(r"[^\x00-\x7f]", " ", text)


def _old_index_terms(
    title: str, body: str, tags: list[str], services: list[str], language: str | None = None
) -> list[str]:
    return index_terms(_ascii_only(title), _ascii_only(body), tags, services, language)


def test_terms_and_deterministic_vectors_are_rederived_on_an_existing_store(settings, raw, monkeypatch):
    if settings.database_url:
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn:
            conn.execute("DELETE FROM schema_migrations WHERE version = 5")
        upgrade = settings.model_copy(update={"migrate_database_url": owner_url(settings.database_url)})
    else:
        upgrade = settings
    with monkeypatch.context() as old_release:
        for module in (sqlite_store, postgres_migrations):
            old_release.setattr(module, "MIGRATIONS", [m for m in module.MIGRATIONS if m[0] != 5])
        old_release.setattr(service, "index_terms", _old_index_terms)
        old_release.setattr(deterministic, "terms", lambda text: terms(_ascii_only(text)))
        with Grandbo.init(settings, embedding="deterministic") as old:
            memory = old.org("acme", create=True)
            memory.remember_many(ENTRIES)  # the Japanese entry had no terms, so no vector (a zero vector is refused)
            # "Störung" had no term of its own ("st", "rung"): only the compound word matched the German entry
            hits = memory.recall("Störung der Zahlungsdatenbank heute", arm="lexical").hits
            assert [set(hit.why.lexical.terms) for hit in hits] == [{"zahlungsdatenbank"}]
            assert 5 not in old._store.schema_versions()
        assert {row[0] for row in raw("SELECT entry_id FROM entry_vectors", org="acme")} == {"DE-1", "EN-1"}

    with Grandbo.open(upgrade) as upgraded:
        assert 5 in upgraded._store.schema_versions()
        stored = dict(raw("SELECT entry_id, terms FROM memory_entries", org="acme"))
        for entry in ENTRIES:
            assert stored[entry["id"]] == " ".join(index_terms(entry["title"], entry["body"]))
        # Only the entries whose terms changed lost their vector; they wait in the outbox, still found lexically.
        assert {row[0] for row in raw("SELECT entry_id FROM entry_vectors", org="acme")} == {"EN-1"}
        assert {row[0] for row in raw("SELECT entry_id FROM embed_outbox", org="acme")} == {"DE-1", "JA-1"}
        memory = upgraded.org("acme")
        top = memory.recall("Störung der Zahlungsdatenbank heute", arm="lexical").hits[0]
        assert top.entry.id == "DE-1" and len(top.why.lexical.terms) >= 2  # "Störung" is one word of its own now
        assert memory.recall("決済サービスがタイムアウトする", arm="lexical").hits[0].entry.id == "JA-1"
        upgraded.backfill()
        for entry in ENTRIES:  # each vector is now the provider's vector of the entry's own text
            top = memory.recall(entry_text(entry["title"], entry["body"]), arm="vector").hits[0]
            assert top.entry.id == entry["id"] and top.why.vector.similarity == pytest.approx(1.0, abs=1e-5)
    with Grandbo.open(settings) as again:  # re-opening applies nothing twice
        assert 5 in again._store.schema_versions()
        assert not raw("SELECT entry_id FROM embed_outbox", org="acme")
