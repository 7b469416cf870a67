"""The documents' SQL is written once (`store/sql/documents.py`) and spelled by each backend's dialect: here, that
each dialect spells exactly the statements its backend ran when each wrote its own."""

from datetime import UTC, datetime

from grandbo.store.postgres.dialect import DOCUMENTS as POSTGRES
from grandbo.store.sql.documents import DocumentSQL
from grandbo.store.sql.erasing import DocumentRewrite
from grandbo.store.sqlite.dialect import DOCUMENTS as SQLITE

AT, AFTER = datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)


def test_sqlite_spells_the_statements_it_ran_before_they_were_shared():
    sql = DocumentSQL(SQLITE)
    assert sql.versions.format("doc_id IN (?, ?)") == (
        "SELECT doc_id, version FROM documents WHERE org_id = ? AND collection = ? AND doc_id IN (?, ?)"
    )
    assert sql.insert_event_now == (
        "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    assert sql.insert_first_now == (
        "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
        "VALUES (?, ?, ?, ?, ?, 1, ?) ON CONFLICT (org_id, collection, doc_id) DO UPDATE SET ref = excluded.ref, "
        "data = excluded.data, version = documents.version + 1, updated_at = excluded.updated_at"
    )
    assert sql.keyed(["a", "b"]) == (
        "CASE WHEN json_type(data) = 'object' THEN json_object(?, data -> ?, ?, data -> ?) ELSE data END",
        ("a", '$."a"', "b", '$."b"'),
    )
    assert sql.oldest(AT, 5, (AFTER, "d1")) == (
        "AND julianday(updated_at) < julianday(?) AND julianday(updated_at) >= julianday(?) "
        "AND (julianday(updated_at) > julianday(?) OR doc_id > ?)",
        (AT.isoformat(), AFTER.isoformat(), AFTER.isoformat(), "d1"),
        "julianday(updated_at), doc_id LIMIT 5",
    )
    assert SQLITE.any_of("ref", ["x", "y"]) == ("ref IN (?, ?)", ("x", "y"))


def test_postgres_spells_the_statements_its_store_runs():
    sql = DocumentSQL(POSTGRES)
    assert sql.versions.format("doc_id = ANY(%s)") == (
        "SELECT doc_id, version FROM documents WHERE org_id = %s AND collection = %s AND doc_id = ANY(%s) FOR UPDATE"
    )
    assert sql.insert_event_now == (
        "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
        "VALUES (%s, %s, %s, %s, %s, %s, now())"
    )
    assert sql.upsert == (
        "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (org_id, collection, doc_id) DO UPDATE SET "
        "ref = excluded.ref, data = excluded.data, version = excluded.version, updated_at = excluded.updated_at"
    )
    assert sql.insert_first_now == (
        "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
        "VALUES (%s, %s, %s, %s, %s, 1, now()) ON CONFLICT (org_id, collection, doc_id) DO UPDATE SET "
        "ref = excluded.ref, data = excluded.data, version = documents.version + 1, updated_at = excluded.updated_at"
    )
    assert sql.keyed(["a"]) == (
        "CASE WHEN jsonb_typeof(data) = 'object' THEN jsonb_build_object(%s::text, data -> %s::text) ELSE data END",
        ("a", "a"),
    )
    assert sql.oldest(AT, 5, (AFTER, "d1")) == (
        "AND updated_at < %s AND (updated_at, doc_id) > (%s, %s)",
        (AT, AFTER, "d1"),
        "updated_at, doc_id LIMIT 5",
    )
    assert sql.stamp("acme", ["c"]) == (
        "SELECT (SELECT epoch FROM orgs WHERE org_id = %s), "
        "(SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = %s AND collection = %s)",
        ["acme", "acme", "c"],
    )
    assert POSTGRES.any_of("ref", ["x", "y"]) == ("ref = ANY(%s)", (["x", "y"],))
    rewrite = DocumentRewrite(POSTGRES, "acme", lambda data, _: data, decode=lambda d: d, encode=lambda d: d)
    assert rewrite.update("documents", "collection, doc_id") == (
        "UPDATE documents SET data = %s, version = version + 1 WHERE org_id = %s AND collection = %s AND doc_id = %s"
    )  # a rewritten document moves to its next version: a write over a read from before the erasure is stale


def test_postgres_reads_of_documents_are_its_store_s_statements():
    sql = DocumentSQL(POSTGRES)
    assert (sql.one, sql.delete) == (
        "AND doc_id = %s",
        "DELETE FROM documents WHERE org_id = %s AND collection = %s AND doc_id = %s",
    )
    assert sql.newest == "SELECT coalesce(max(seq), 0) FROM document_events WHERE org_id = %s"
    assert sql.changed == (
        "SELECT doc_id FROM document_events WHERE org_id = %s AND collection = %s AND seq > %s ORDER BY seq"
    )
    assert sql.history == (
        "SELECT seq, type, data, actor, at FROM document_events "
        "WHERE org_id = %s AND collection = %s AND doc_id = %s ORDER BY seq"
    )
    assert sql.log_events == (
        "SELECT collection, doc_id, type, data, actor, at FROM document_events WHERE org_id = %s ORDER BY seq"
    )
    assert sql.log_documents == (
        "SELECT collection, doc_id, ref, data, version, updated_at FROM documents WHERE org_id = %s "
        "ORDER BY collection, doc_id"
    )
    assert sql.any_held == (
        "SELECT 1 FROM document_events WHERE org_id = %s UNION ALL SELECT 1 FROM documents WHERE org_id = %s"
    )
    assert (sql.insert_event, sql.insert_document) == (
        "INSERT INTO document_events (org_id, collection, doc_id, type, data, actor, at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        "INSERT INTO documents (org_id, collection, doc_id, ref, data, version, updated_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
    )
    # The one change its store takes on: the listing names its data column, as SQLite's always did.
    assert sql.select("data", "", "doc_id") == (
        "SELECT doc_id, ref, data AS data, version, updated_at FROM documents AS d "
        "WHERE org_id = %s AND collection = %s  ORDER BY doc_id"
    )
