"""The database walls every table and function by organization, for the runtime role.

An org-scoped transaction (grandbo.org_id set) reads and changes only its own organization's rows; the
store-wide tables (store_meta, schema_migrations) it reads and never changes; every SQL function the runtime
role may call either cannot reach another organization or refuses to run inside an org's transaction.

`test_every_table_and_function_of_the_schema_is_walled` reads the schema's tables, sequences and functions
from the catalog, as the runtime role, and runs each one's case: a table or function without a case fails,
as `tests/test_api_isolation.py` fails on a route without one. `test_every_key_of_a_tenant_table_includes_org_id`
reads the keys from the catalog too: every tenant table can be distributed by `org_id` (Citus) as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import psycopg
import pytest

from grandbo.config import Settings
from grandbo.model import EventType, utcnow
from grandbo.ports import NewEvent, NewWork, StoredIndex
from grandbo.service import Grandbo
from tests.conftest import reset_postgres

pytestmark = pytest.mark.postgres

REFUSED = (psycopg.errors.InsufficientPrivilege, psycopg.errors.RaiseException)

# Tables that belong to no organization, with the reason: an org's transaction reads them and changes
# nothing in them; on Citus they are reference tables (docs/architecture.md, "Running on Citus").
REFERENCE_TABLES = {
    "schema_migrations": "the applied migration numbers: the store's, read by every process at start",
    "store_meta": "the recorded embedding space: one per store, read by every org's vector writes and searches",
}
# Tables whose rows are organizations' but that a store-wide transaction reads whole, with the reason.
REGISTRY_TABLES = {"orgs": "organization ids, epochs and languages, no memory: workers visit every org"}
# Sequences hand out numbers, not rows: the runtime role may take the next number and never set one.
SEQUENCES = {
    "grandbo_epoch": "an org's epoch (a new one when it is created, rebuilt, or its vectors dropped)",
    "embed_outbox_job_id_seq": "embed job ids (the outbox's identity column)",
    "document_events_seq_seq": "document history numbers (document_events' identity column)",
    "pending_work_work_id_seq": "write-behind ids (pending_work's identity column)",
}
# Extensions whose functions live in the schema: none of them is SECURITY DEFINER (checked), so each runs with
# the caller's rights and row-level security holds inside it as outside.
EXTENSIONS = {"vector": "pgvector's types, operators and distance functions over values"}


@pytest.fixture
def url(pg_database):
    reset_postgres(pg_database)
    return pg_database


@pytest.fixture
def grandbo(url, tmp_path):
    with Grandbo.init(Settings(home=tmp_path, database_url=url), embedding="deterministic") as opened:
        yield opened


@pytest.fixture
def superuser(pg_server, url):
    """A connection that sees every row (row-level security does not hold a superuser): what really happened."""
    with psycopg.connect(pg_server.url(urlsplit(url).path.lstrip("/")), autocommit=True) as conn:
        yield conn


def scoped(url: str, org: str) -> psycopg.Connection:
    """The runtime role in one org's transaction, as the store opens each (`PostgresStore._tx`)."""
    conn = psycopg.connect(url)
    conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
    return conn


def _fill(grandbo: Grandbo, org: str) -> None:
    """Rows of `org` in every table: entries and their log, vectors, a pending embed job, documents and
    their history, an idempotency key, an index image, a write-behind."""
    memory = grandbo.org(org, create=True)
    memory.remember({"title": f"{org} redis eviction storm on auth-service"}, idempotency_key=f"{org}-key")
    memory.incidents.open(f"{org} auth-service outage", incident_id=f"INC-{org}")
    payload = {"title": "pending", "body": "b", "kind": "fact", "source": "admin", "occurred_at": utcnow().isoformat()}
    grandbo._store.append(org, [NewEvent(f"{org}-PENDING", EventType.REMEMBERED, payload, "test", utcnow())])
    grandbo._store.save_index(org, StoredIndex(grandbo._store.marks(org), f"{org}'s index image".encode()))
    grandbo._store.put_documents(org, [], "test", [NewWork("incident.sync", f"INC-{org}", after=3600)])


@pytest.fixture
def two_orgs(grandbo):
    for org in ("acme", "beta"):
        _fill(grandbo, org)
    return grandbo


def _counts(conn: psycopg.Connection, org: str) -> dict[str, int]:
    tables = [t for (t,) in conn.execute("SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                         "WHERE n.nspname = 'public' AND c.relkind = 'r' AND EXISTS (SELECT 1 FROM "
                                         "pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org_id')")]  # fmt: skip
    return {t: conn.execute(f"SELECT count(*) FROM {t} WHERE org_id = %s", (org,)).fetchone()[0] for t in tables}


# ------------------------------------------------------------------ the statements the issue ran (fail on 10)


def test_an_orgs_transaction_cannot_change_or_delete_another_orgs_registry_row(two_orgs, url, superuser):
    with scoped(url, "acme") as conn:
        assert conn.execute("UPDATE orgs SET language = 'german' WHERE org_id = 'beta'").rowcount == 0
        assert conn.execute("DELETE FROM orgs WHERE org_id = 'beta'").rowcount == 0
        assert conn.execute("SELECT org_id FROM orgs ORDER BY org_id").fetchall() == [("acme",)]
        assert conn.execute("UPDATE orgs SET language = 'german' WHERE org_id = 'acme'").rowcount == 1  # its own
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("INSERT INTO orgs (org_id) VALUES ('gamma')")  # an org is created by its own transaction
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("UPDATE orgs SET org_id = 'beta2' WHERE org_id = 'acme'")  # nor renamed out of its scope
    assert superuser.execute("SELECT org_id, language FROM orgs ORDER BY org_id").fetchall() == [
        ("acme", "german"),
        ("beta", None),
    ]
    assert two_orgs.orgs() == ["acme", "beta"]  # a store-wide transaction still lists every org


def test_an_orgs_transaction_cannot_change_the_store_meta(two_orgs, url, superuser):
    before = superuser.execute("SELECT key, value FROM store_meta ORDER BY key").fetchall()
    with scoped(url, "acme") as conn:
        assert conn.execute("UPDATE store_meta SET value = '999' WHERE key = 'dimension'").rowcount == 0
        assert conn.execute("DELETE FROM store_meta").rowcount == 0
        assert dict(conn.execute("SELECT key, value FROM store_meta").fetchall())["dimension"] == "384"  # it reads
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("INSERT INTO store_meta VALUES ('provider2', 'x')")
    assert superuser.execute("SELECT key, value FROM store_meta ORDER BY key").fetchall() == before
    assert two_orgs.space.dimension == 384


def test_an_orgs_transaction_cannot_replace_the_vector_column(two_orgs, url, superuser):
    assert _counts(superuser, "beta")["entry_vectors"] == 1
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege, match="every organization"):
        conn.execute("SELECT grandbo_embedding_column(384, true)")
    assert _counts(superuser, "beta")["entry_vectors"] == 1
    assert superuser.execute("SELECT count(embedding) FROM entry_vectors WHERE org_id = 'beta'").fetchone() == (1,)


def test_an_orgs_transaction_cannot_drop_or_build_another_orgs_vector_index(two_orgs, url, superuser):
    assert two_orgs.build_vector_index("beta")  # through the function, in beta's own transaction
    index = superuser.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'entry_vectors_hnsw_%'").fetchall()
    assert len(index) == 1
    for org in ("acme", ""):  # another org's transaction, and a store-wide one
        with scoped(url, org) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege, match="own transaction"):
            conn.execute("SELECT grandbo_vector_index('beta', false, 0, 0, '')")
        with scoped(url, org) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege, match="own transaction"):
            conn.execute("SELECT grandbo_vector_index('beta', true, 16, 64, '64MB')")
    assert (
        superuser.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'entry_vectors_hnsw_%'").fetchall()
        == index
    )


def test_the_outbox_counts_policy_follows_the_owner_when_the_schema_changes_hands(two_orgs, url, superuser):
    from grandbo.retrieval.text import index_terms
    from grandbo.store.postgres.store import PostgresStore
    from tests.conftest import APP_ROLE, owner_url

    # What a single-role store moved to two roles leaves: the policy names the role that ran migration 11,
    # now the runtime role (REASSIGN OWNED hands over the objects, not the roles a policy names).
    superuser.execute(f"ALTER POLICY embed_outbox_depth ON embed_outbox TO {APP_ROLE}")
    with scoped(url, "acme") as conn:
        conn.execute("SELECT set_config('grandbo.outbox_depth', 'counting', true)")
        assert conn.execute("SELECT count(*) FROM embed_outbox WHERE org_id = 'beta'").fetchone() == (1,)
    PostgresStore(url, index_terms, migrate_url=owner_url(url)).close()  # `grandbo migrate`, as the docs say
    with scoped(url, "acme") as conn:
        conn.execute("SELECT set_config('grandbo.outbox_depth', 'counting', true)")
        assert conn.execute("SELECT count(*) FROM embed_outbox WHERE org_id = 'beta'").fetchone() == (0,)
    superuser.execute("DROP POLICY embed_outbox_depth ON embed_outbox")  # DROP OWNED BY the old owner
    PostgresStore(url, index_terms, migrate_url=owner_url(url)).close()
    assert two_orgs.readiness()[1] == 2


# ------------------------------------------------------------------ the walk


def _tenant_case(url: str, superuser: psycopg.Connection, table: str) -> None:
    """Org acme's transaction: none of beta's rows is read, changed, deleted, or made."""
    columns = [c for (c,) in superuser.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s "
        "AND is_identity = 'NO' AND is_generated = 'NEVER' ORDER BY ordinal_position", (table,))]  # fmt: skip
    assert "org_id" in columns, f"{table}: a tenant table without org_id"
    others = ", ".join(c for c in columns if c != "org_id")
    with scoped(url, "acme") as conn:
        assert conn.execute(f"SELECT count(*) FROM {table} WHERE org_id = 'acme'").fetchone()[0] > 0, table
        assert conn.execute(f"SELECT count(*) FROM {table} WHERE org_id = 'beta'").fetchone() == (0,), table
        assert conn.execute(f"SELECT count(*) FROM {table} WHERE org_id <> 'acme'").fetchone() == (0,), table
        assert conn.execute(f"UPDATE {table} SET org_id = org_id WHERE org_id = 'beta'").rowcount == 0, table
        assert conn.execute(f"DELETE FROM {table} WHERE org_id = 'beta'").rowcount == 0, table
    for statement in (
        f"UPDATE {table} SET org_id = 'beta' WHERE org_id = 'acme'",  # moving its own rows into beta
        f"INSERT INTO {table} (org_id, {others}) SELECT 'beta', {others} FROM {table} WHERE org_id = 'acme' LIMIT 1",
    ):
        with scoped(url, "acme") as conn, pytest.raises(REFUSED):
            conn.execute(statement)


def _registry_case(url: str, superuser: psycopg.Connection, table: str) -> None:
    assert table == "orgs"
    with scoped(url, "acme") as conn:
        assert conn.execute("SELECT org_id FROM orgs").fetchall() == [("acme",)]
        assert conn.execute("UPDATE orgs SET epoch = epoch WHERE org_id = 'beta'").rowcount == 0
        assert conn.execute("DELETE FROM orgs WHERE org_id = 'beta'").rowcount == 0
    for statement in (
        "INSERT INTO orgs (org_id) VALUES ('gamma')",
        "UPDATE orgs SET org_id = 'beta' WHERE org_id = 'acme'",
    ):
        with scoped(url, "acme") as conn, pytest.raises(REFUSED):
            conn.execute(statement)
    with scoped(url, "") as conn:  # store-wide: every org listed, none created nor deleted from here
        assert {r[0] for r in conn.execute("SELECT org_id FROM orgs")} == {"acme", "beta"}
        assert conn.execute("DELETE FROM orgs WHERE org_id = 'beta'").rowcount == 0
    with scoped(url, "") as conn, pytest.raises(REFUSED):
        conn.execute("INSERT INTO orgs (org_id) VALUES ('gamma')")


def _reference_case(url: str, superuser: psycopg.Connection, table: str) -> None:
    """An org's transaction reads a reference table and changes nothing in it."""
    columns = [c for (c,) in superuser.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s "
        "ORDER BY ordinal_position", (table,))]  # fmt: skip
    with scoped(url, "acme") as conn:
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
    for statement, may_filter in (
        (f"UPDATE {table} SET {columns[0]} = {columns[0]}", True),
        (f"DELETE FROM {table}", True),
        (f"INSERT INTO {table} SELECT * FROM {table} LIMIT 1", False),
    ):
        with scoped(url, "acme") as conn:
            try:
                changed = conn.execute(statement).rowcount
            except REFUSED:
                continue
            assert may_filter and changed == 0, (table, statement)


def _sequence_case(url: str, superuser: psycopg.Connection, sequence: str) -> None:
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT setval(%s, 1)", (sequence,))
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(f"ALTER SEQUENCE {sequence} RESTART")


def _embedding_column_case(url: str, superuser: psycopg.Connection, grandbo: Grandbo) -> None:
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT grandbo_embedding_column(384, true)")
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT grandbo_embedding_column(768, false)")
    assert superuser.execute("SELECT count(embedding) FROM entry_vectors WHERE org_id = 'beta'").fetchone() == (1,)


def _vector_index_case(url: str, superuser: psycopg.Connection, grandbo: Grandbo) -> None:
    grandbo.build_vector_index("beta")
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT grandbo_vector_index('beta', false, 0, 0, '')")
    assert superuser.execute(
        "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'entry_vectors_hnsw_%'"
    ).fetchone() == (1,)
    with scoped(url, "beta") as conn:  # its own org's transaction may
        conn.execute("SELECT grandbo_vector_index('beta', false, 0, 0, '')")
    assert superuser.execute(
        "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'entry_vectors_hnsw_%'"
    ).fetchone() == (0,)


def _outbox_depth_case(url: str, superuser: psycopg.Connection, grandbo: Grandbo) -> None:
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT grandbo_outbox_depth()")
    with scoped(url, "") as conn:  # store-wide: a number, every org's jobs counted, and no row of them
        assert conn.execute("SELECT grandbo_outbox_depth()").fetchone() == (2,)
    for org in ("", "acme"):  # the setting the function raises opens nothing to the runtime role
        with scoped(url, org) as conn:
            conn.execute("SELECT set_config('grandbo.outbox_depth', 'counting', true)")
            assert conn.execute("SELECT count(*) FROM embed_outbox WHERE org_id = 'beta'").fetchone() == (0,)


def _pending_work_case(url: str, superuser: psycopg.Connection, grandbo: Grandbo) -> None:
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT * FROM grandbo_pending_work(8)")
    with scoped(url, "") as conn:  # store-wide: counts per org (none ready: each waits an hour), no row of them
        counted = conn.execute("SELECT * FROM grandbo_pending_work(8) ORDER BY org_id").fetchall()
        assert counted == [("acme", 0, 1, 0), ("beta", 0, 1, 0)]
    for org in ("", "acme"):  # the setting the function raises opens nothing to the runtime role
        with scoped(url, org) as conn:
            conn.execute("SELECT set_config('grandbo.pending_count', 'counting', true)")
            assert conn.execute("SELECT count(*) FROM pending_work WHERE org_id = 'beta'").fetchone() == (0,)


def _pending_holders_case(url: str, superuser: psycopg.Connection, grandbo: Grandbo) -> None:
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT * FROM grandbo_pending_holders()")
    with scoped(url, "") as conn:  # store-wide: the holders of leases not run out (none is leased), no row of work
        assert conn.execute("SELECT * FROM grandbo_pending_holders()").fetchall() == []


def _outbox_holders_case(url: str, superuser: psycopg.Connection, grandbo: Grandbo) -> None:
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT * FROM grandbo_outbox_holders()")
    grandbo._store.claim_jobs(10, 5)  # both orgs' jobs leased here
    with scoped(url, "") as conn:  # store-wide: (org, holder) of the leases, no row of the jobs
        assert sorted(org for org, _ in conn.execute("SELECT * FROM grandbo_outbox_holders()")) == ["acme", "beta"]


def _outbox_counts_case(url: str, superuser: psycopg.Connection, grandbo: Grandbo) -> None:
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT * FROM grandbo_outbox_counts(5)")
    with scoped(url, "") as conn:  # store-wide: two numbers, every org's jobs counted (waiting, failed)
        assert conn.execute("SELECT * FROM grandbo_outbox_counts(5)").fetchall() == [(2, 0)]
        assert conn.execute("SELECT * FROM grandbo_outbox_counts(0)").fetchall() == [(0, 2)]


def _trigger_case(url: str, superuser: psycopg.Connection, grandbo: Grandbo) -> None:
    with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.FeatureNotSupported, match="only be called"):
        conn.execute("SELECT grandbo_refuse_update()")
    with scoped(url, "acme") as conn:  # the erasure it allows is its own org's: beta's rows are not reached
        conn.execute("SELECT set_config('grandbo.erasing', 'beta', true)")
        assert conn.execute("DELETE FROM memory_events WHERE org_id = 'beta'").rowcount == 0


def _count_trigger_case(url: str, superuser: psycopg.Connection, grandbo: Grandbo) -> None:
    """Migration 34's triggers: called only as triggers, with the caller's rights, so an org's write counts its own
    rows only (the walk's last check: none of beta's counts changed)."""
    for function in ("grandbo_count_memory_entries", "grandbo_count_entry_vectors"):
        with scoped(url, "acme") as conn, pytest.raises(psycopg.errors.FeatureNotSupported, match="only be called"):
            conn.execute(f"SELECT {function}()")
    with scoped(url, "acme") as conn:  # acme's entries retired and its vectors deleted: its counts go to nothing
        conn.execute("UPDATE memory_entries SET status = 'retired' WHERE org_id IN ('acme', 'beta')")
        conn.execute("DELETE FROM entry_vectors WHERE org_id IN ('acme', 'beta')")
        assert conn.execute("SELECT active_entries FROM orgs").fetchall() == [(0,)]
        assert conn.execute("SELECT count(*) FROM vector_counts").fetchone() == (0,)
        conn.rollback()


TABLE_CASES: dict[str, Callable[[str, psycopg.Connection, str], None]] = {
    **dict.fromkeys(REFERENCE_TABLES, _reference_case),
    **dict.fromkeys(REGISTRY_TABLES, _registry_case),
    **dict.fromkeys(SEQUENCES, _sequence_case),
    **dict.fromkeys(
        (
            "memory_events",
            "memory_entries",
            "entry_vectors",
            "embed_outbox",
            "documents",
            "document_events",
            "idempotency_keys",
            "index_images",
            "pending_work",
            "vector_counts",
        ),
        _tenant_case,
    ),
}
FUNCTION_CASES: dict[str, Callable[[str, psycopg.Connection, Grandbo], None]] = {
    "grandbo_embedding_column": _embedding_column_case,
    "grandbo_vector_index": _vector_index_case,
    "grandbo_outbox_depth": _outbox_depth_case,
    "grandbo_pending_work": _pending_work_case,
    "grandbo_pending_holders": _pending_holders_case,
    "grandbo_outbox_holders": _outbox_holders_case,
    "grandbo_outbox_counts": _outbox_counts_case,
    "grandbo_refuse_update": _trigger_case,
    "grandbo_count_memory_entries": _count_trigger_case,
    "grandbo_count_entry_vectors": _count_trigger_case,
}


def test_every_table_and_function_of_the_schema_is_walled(two_orgs, url, superuser):
    beta_before = _counts(superuser, "beta")
    with psycopg.connect(url) as conn:  # the runtime role reads the catalog
        assert conn.execute(
            "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone() == (False,)
        relations = conn.execute(
            "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') ORDER BY c.relname"
        ).fetchall()
        functions = conn.execute(
            "SELECT p.proname, p.prosecdef, e.extname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "LEFT JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' "
            "LEFT JOIN pg_extension e ON e.oid = d.refobjid WHERE n.nspname = current_schema() ORDER BY p.proname"
        ).fetchall()
    assert {"orgs", "store_meta", "memory_entries", "grandbo_epoch"} <= {name for name, _ in relations}
    missing = [name for name, _ in relations if name not in TABLE_CASES]
    assert not missing, f"tables without a case (a policy or grant, proven below): {missing}"
    for name, kind in relations:
        assert (kind == "S") == (name in SEQUENCES), (name, kind)
        TABLE_CASES[name](url, superuser, name)
    ours = sorted({name for name, _, extension in functions if extension is None})
    assert not [name for name in ours if name not in FUNCTION_CASES], f"functions without a case: {ours}"
    strangers = sorted({extension for _, _, extension in functions if extension not in (None, *EXTENSIONS)})
    assert not strangers, f"functions of extensions without a case: {strangers}"
    assert not [name for name, definer, extension in functions if extension is not None and definer]
    for name in ours:
        FUNCTION_CASES[name](url, superuser, two_orgs)
    after = _counts(superuser, "beta")
    assert after == beta_before, "beta's rows changed"  # nothing the walk ran as acme reached them


# ------------------------------------------------------------------ ready for Citus


def test_every_key_of_a_tenant_table_includes_org_id(grandbo, url):
    with psycopg.connect(url) as conn:
        tables = [t for (t,) in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')")]  # fmt: skip
        keys = conn.execute(
            "SELECT c.relname, i.indexrelid::regclass::text, i.indisprimary, "
            "  array(SELECT a.attname FROM unnest(i.indkey) k JOIN pg_attribute a "
            "        ON a.attrelid = c.oid AND a.attnum = k)::text[], i.indexprs IS NOT NULL "
            "FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND (i.indisunique OR i.indisexclusion)"
        ).fetchall()
        constraints = conn.execute(
            "SELECT c.relname, k.conname, k.contype, "
            "  array(SELECT a.attname FROM unnest(k.conkey) n JOIN pg_attribute a ON a.attrelid = c.oid "
            "        AND a.attnum = n)::text[], "
            "  array(SELECT a.attname FROM unnest(coalesce(k.confkey, '{}')) n JOIN pg_attribute a "
            "        ON a.attrelid = k.confrelid AND a.attnum = n)::text[] "
            "FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace s ON s.oid = c.relnamespace "
            "WHERE s.nspname = current_schema() AND k.contype IN ('p', 'u', 'x', 'f')"
        ).fetchall()
    assert {"orgs", "memory_entries", "documents", "store_meta"} <= set(tables)
    tenant = [t for t in tables if t not in REFERENCE_TABLES]
    with psycopg.connect(url) as conn:
        without = [t for t in tenant if not conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = %s "
            "AND column_name = 'org_id'", (t,)).fetchone()]  # fmt: skip
    assert not without, f"tenant tables without org_id, which cannot be distributed by it: {without}"
    primary = {table for table, _, is_primary, _, _ in keys if is_primary}
    assert set(tenant) <= primary, f"tenant tables without a primary key: {set(tenant) - primary}"
    bad = [(table, index, columns) for table, index, _, columns, expressions in keys
           if table not in REFERENCE_TABLES and ("org_id" not in columns or expressions)]  # fmt: skip
    assert not bad, f"unique indexes of tenant tables without org_id (Citus refuses them): {bad}"
    bad = [(table, name, columns, referenced) for table, name, kind, columns, referenced in constraints
           if table not in REFERENCE_TABLES and ("org_id" not in columns or (kind == "f" and "org_id" not in referenced))]  # fmt: skip
    assert not bad, f"keys of tenant tables without org_id: {bad}"
