"""Every statement the store sends to a tenant table names one organization, inside that organization's
transaction: what lets Citus route it to one shard group (docs/architecture.md, "Running on Citus").

The test records every SQL statement psycopg sends (cursors, server-side cursors, executemany, COPY) while two
organizations run a broad workload: each walks every API route on its own data and on the other's
(`tests/test_api_isolation.py`'s cases, so a new route is walked here too), then remembers in bulk, recalls
by every arm, corrects, retires, purges, erases, imports, exports, embeds, indexes, re-drives write-behinds,
and is opened cold from its index image; a third org is deleted. A statement that names a tenant table (read
from the catalog: the tables with `org_id`) or calls a function of the schema must be sent while its
transaction is scoped to an org (`grandbo.org_id`; the embed and write-behind claims scope one transaction to
each org they visit in turn), be bound to that org (its id among the values sent: a statement that sends none
is listed in UNBOUND, with why it is still that org's alone), and tie every reference to a tenant table it reads
or writes, each under its alias, to one org (`org_id = %s` in its own query, a join on `org_id` with one that
is, or rows written with their `org_id`: `tests/sql_routing.py`). The few that act for the whole store are
listed in STORE_WIDE, each with why. A new statement without `org_id` fails the test, named with the line of
the store that sent it and the lines that asked for it.
"""

from __future__ import annotations

import json
import random
import re
import sys
import weakref
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from grandbo.config import Settings
from grandbo.eval.bench import synthetic_entry
from grandbo.history.importer import import_history
from grandbo.history.registry import reader
from grandbo.model import Arm
from grandbo.ports import NewWork
from grandbo.service import Grandbo
from tests import sql_routing
from tests.conftest import reset_postgres
from tests.serving import serving
from tests.test_api_isolation import CASES, FAKE, fill_bravo
from tests.test_history_import import MAP, ROW, write_jsonl

pytestmark = pytest.mark.postgres

SRC = str(Path(__file__).parent.parent / "src" / "grandbo")

# Statements that act for the whole store, as full-match patterns, with why: on Citus each fans out to every
# shard (docs/architecture.md, "Running on Citus"), or reaches none.
STORE_WIDE = {
    r"SELECT org_id FROM orgs ORDER BY org_id": "the orgs listed: workers and the CLI visit every org",
    r"SELECT org_id FROM orgs WHERE vector_index_wanted_at IS NOT NULL ORDER BY vector_index_wanted_at": (
        "the orgs whose HNSW index is owed: the maintenance thread builds each in that org's transaction"
    ),
    r"SELECT \(SELECT max\(version\) FROM schema_migrations\), waiting, failed FROM grandbo_outbox_counts\(%s\)": (
        "/readyz: every org's embed jobs counted (waiting, failed) in one statement, whatever the number of orgs"
    ),
    r"SELECT (\*|coalesce\(sum\(waiting\), 0\), coalesce\(sum\(failed\), 0\)) FROM grandbo_pending_work\(%s\)": (
        "the write-behinds' fair claim (which orgs have work ready), and /readyz's counts"
    ),
    r"SELECT org_id, claimed_by FROM grandbo_pending_holders\(\)": (
        "the re-driver's look for leases whose holder is gone: every org's holders in one statement, no work"
    ),
    r"SELECT org_id, claimed_by FROM grandbo_outbox_holders\(\)": (
        "the embed worker's look for leases whose holder is gone: every org's holders in one statement, no job"
    ),
    r"CREATE TEMP TABLE stage_\w+ ON COMMIT DROP AS SELECT [\w, ]+ FROM \w+ WITH NO DATA": (
        "a large append's staging table, shaped like the tenant table's columns: WITH NO DATA plans the SELECT "
        "and never runs it, so no shard is read"
    ),
    r"SELECT grandbo_embedding_column\(%s, (true|false)\)": (
        "the vector column made for the store's embedding space (`init`) or replaced (`switch_space`): "
        "the table's DDL, once per store"
    ),
    r"VACUUM [\w, ]+": "the VACUUM an erasure owes (store/postgres/upkeep.py): maintenance of whole tables, not rows",
}

# Statements to tenant tables that send no value, in an org's transaction, as full-match patterns, with why they are
# still that org's alone (they are checked for everything else).
UNBOUND = {
    r"INSERT INTO (memory_events|memory_entries|entry_vectors|embed_outbox) \([\w, ]+\) SELECT [\w, ]+ "
    r"FROM stage_\1\b.*": (
        "a large write's rows moved from the transaction's staging table, COPYed there from the org's own write "
        "(store/postgres/steps.py): each row carries its org_id, which row-level security checks against the "
        "transaction's org (a filter here would drop a misfiled row silently instead of refusing the write)"
    ),
}


@dataclass(frozen=True)
class Sent:
    sql: str
    params: list[Any]  # every row's values, flattened (executemany's too)
    org: str  # grandbo.org_id of the connection's transaction when it was sent ("" outside one, or unscoped)
    line: str  # the line of the store that sent it
    caller: str  # the first line of Grandbo above the store that asked for it


class Recorder:
    """The statements psycopg sends, with the org of the transaction each was sent in."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self._orgs: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # a connection's org

    def record(self, cursor: Any, query: Any, rows: list[Any]) -> None:
        sql = query.as_string(cursor) if isinstance(query, psycopg.sql.Composable) else str(query)
        if not sql:
            return  # the pool's liveness check
        params = [value for row in rows for value in _values(row)]
        if cursor.connection.pgconn.transaction_status == pq.TransactionStatus.IDLE:
            self.unscope(cursor.connection)  # no transaction open: this statement starts one (or is one, autocommit)
        org = _org_set(sql, params)
        if org is not None:
            self._orgs[cursor.connection] = org
        self.sent.append(Sent(sql, params, self._orgs.get(cursor.connection, ""), *_origin()))

    def unscope(self, connection: Any) -> None:
        """A new transaction on `connection`: the org set for its last one (transaction-local) is gone."""
        self._orgs.pop(connection, None)


def _values(row: Any) -> list[Any]:
    if row is None:
        return []
    return list(row.values()) if isinstance(row, dict) else list(row)


def _org_set(sql: str, params: list[Any]) -> str | None:
    """The org a `set_config('grandbo.org_id', ...)` statement scopes its transaction to, else None."""
    if "set_config" not in sql:
        return None
    if "grandbo.org_id" in params:  # `_tx`: set_config(%s, %s, true) for each setting
        return str(params[params.index("grandbo.org_id") + 1])
    literal = re.search(r"set_config\('grandbo\.org_id', (?:'([^']*)'|%s)", sql)
    if literal is None:
        return None
    return literal.group(1) if literal.group(1) is not None else str(params[0])


def _origin() -> tuple[str, str]:
    """The line of the store that sent the statement, and the first line of Grandbo above the store that asked."""
    frame, lines = sys._getframe(2), []
    while frame is not None and len(lines) < 2:
        name = frame.f_code.co_filename
        if name.startswith(SRC) and (not lines or f"{SRC}/store/" not in name):
            lines.append(f"{name[len(SRC) + 1 :]}:{frame.f_lineno}")
        frame = frame.f_back
    return (lines[0] if lines else "?"), (lines[1] if len(lines) > 1 else "the store itself")


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    seen = Recorder()
    execute, executemany, copy = psycopg.Cursor.execute, psycopg.Cursor.executemany, psycopg.Cursor.copy
    stream, declare = psycopg.Cursor.stream, psycopg.ServerCursor.execute
    enter = psycopg.Transaction.__enter__

    def on_execute(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.record(self, query, [params])
        return execute(self, query, params, **kwargs)

    def on_executemany(self, query, params_seq, **kwargs):  # type: ignore[no-untyped-def]
        params_seq = list(params_seq)
        if params_seq:  # no rows: nothing is sent
            seen.record(self, query, params_seq)
        return executemany(self, query, params_seq, **kwargs)

    def on_copy(self, statement, params=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.record(self, statement, [params])
        return copy(self, statement, params, **kwargs)

    def on_stream(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.record(self, query, [params])
        return stream(self, query, params, **kwargs)

    def on_declare(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.record(self, query, [params])
        return declare(self, query, params, **kwargs)

    def on_begin(self):  # type: ignore[no-untyped-def]
        began = enter(self)
        if self._outer_transaction:  # BEGIN sent (not a savepoint): a transaction of no org until one is set
            seen.unscope(self._conn)
        return began

    monkeypatch.setattr(psycopg.Transaction, "__enter__", on_begin)
    monkeypatch.setattr(psycopg.Cursor, "execute", on_execute)
    monkeypatch.setattr(psycopg.Cursor, "executemany", on_executemany)
    monkeypatch.setattr(psycopg.Cursor, "copy", on_copy)
    monkeypatch.setattr(psycopg.Cursor, "stream", on_stream)
    monkeypatch.setattr(psycopg.ServerCursor, "execute", on_declare)
    return seen


@pytest.fixture
def settings(pg_database: str, tmp_path: Path) -> Settings:
    reset_postgres(pg_database)
    return Settings(
        home=tmp_path / "home", database_url=pg_database, write_behind_grace_seconds=0, write_behind_retry_seconds=0
    )


def _walk(grandbo: Grandbo, key: str, ids: dict[str, Any]) -> None:
    """Every route of the API, with `key`, naming the ids of `ids` (an org's own, or another's)."""
    with serving(grandbo) as served, served.client(key) as client:
        for (method, _), (path, body) in sorted(CASES.items()):
            text = json.dumps(body)
            for name, value in ids.items():
                if isinstance(value, str):
                    path, text = path.replace("{" + name + "}", value), text.replace("{" + name + "}", value)
            payload = json.loads(text)
            response = client.request(method, path, **({} if payload is None else {"json": payload}))
            assert response.status_code < 500, (method, path, response.text)


def _work(grandbo: Grandbo, org: str, tmp_path: Path) -> None:
    """What the routes do not reach: bulk writes (COPYed), every recall arm, erasure, imports and exports, the
    embed worker, the vector index, write-behinds re-driven."""
    memory = grandbo.org(org)
    rng = random.Random(org)
    entries = memory.remember_many([synthetic_entry(rng, n) for n in range(250)], actor="test")
    memory.remember({"title": f"{org} redis eviction storm on auth-service"}, idempotency_key=f"{org}-key")
    memory.remember({"title": f"{org} redis eviction storm on auth-service"}, idempotency_key=f"{org}-key")
    grandbo.worker().drain(org)
    for arm in (Arm.LEXICAL, Arm.VECTOR, Arm.HYBRID, Arm.RERANKED):
        memory.recall("redis eviction storm on the auth service", 5, arm=arm)
    first, second, third = entries[:3]
    memory.get(first.id), memory.history(first.id), memory.get_many([first.id, second.id])
    memory.correct(first.id, {"body": "keys evicted under maxmemory"}, reason="test", actor="test")
    memory.retire(second.id, reason="test", actor="test")
    memory.purge(third.id, reason="test", actor="test")
    memory.erasure.purge_text("keys evicted under maxmemory", reason="test", actor="test")
    import_history(memory, reader("jsonl"), write_jsonl(tmp_path / f"{org}-history.jsonl", [ROW]), mapping=MAP)
    memory.export_file(tmp_path / f"{org}-entries.jsonl")
    memory.export_log(tmp_path / f"{org}-log.jsonl")
    memory.import_file(tmp_path / f"{org}-entries.jsonl")
    memory.incidents.find(), memory.alerts.recent(), memory.alert_groups.page(5), memory.changes.find(limit=5)
    memory.stats(), memory.rebuild(), memory.changed_since(0)
    grandbo.build_vector_index(org)
    grandbo.worker().maintain()
    memory.incidents.open(f"{org} auth-service outage", incident_id=f"INC-{org}")
    grandbo._store.put_documents(org, [], "test", [NewWork("incident.sync", f"INC-{org}", after=0)])
    grandbo.redriver.drain()
    grandbo.readiness()


def test_every_statement_to_a_tenant_table_names_one_org(settings, recorder, tmp_path):
    tables, functions = _tenant(settings.database_url)
    assert {"orgs", "memory_entries", "documents", "pending_work"} <= tables and "store_meta" not in tables
    recorder.sent.clear()
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        alpha, bravo = grandbo.org("alpha", create=True), fill_bravo(grandbo)
        _, alpha_key = alpha.keys.create("admin")
        _, bravo_key = bravo["memory"].keys.create("admin")
        _walk(grandbo, alpha_key, bravo)  # another org's ids
        _walk(grandbo, alpha_key, FAKE)  # ids nobody has
        _walk(grandbo, bravo_key, bravo)  # its own
        for org in ("alpha", "bravo"):
            _work(grandbo, org, tmp_path)
        gone = grandbo.org("gamma", create=True)
        gone.remember({"title": "gamma is deleted"})
        grandbo.drop_org("gamma")
    with Grandbo.open(settings) as cold:  # the index images saved on closing, loaded
        for org in ("alpha", "bravo"):
            cold.org(org).recall("redis eviction storm on the auth service", 5, arm=Arm.HYBRID)
    named = re.compile(r"\b(?:" + "|".join(sorted(tables | functions)) + r")\b")
    checked, wide, unbound, bad = 0, set(), set(), defaultdict(set)
    for sent in recorder.sent:
        sql = " ".join(sent.sql.split())
        if not named.search(sql):
            continue
        checked += 1
        allowed = [pattern for pattern in STORE_WIDE if re.fullmatch(pattern, sql)]
        wide.update(allowed)
        unbound.update(pattern for pattern in UNBOUND if not sent.params and re.fullmatch(pattern, sql))
        why = "" if allowed else _unrouted(sql, sent, tables, functions)
        if why:
            bad[(sent.line, why, sql)].add(sent.caller)
    assert checked > 1000, checked  # the workload reached the store
    assert wide == set(STORE_WIDE), f"store-wide statements no longer sent: {set(STORE_WIDE) - wide}"
    assert unbound == set(UNBOUND), f"statements sending no value no longer sent: {set(UNBOUND) - unbound}"
    unrouted = [
        f"{line} (asked from {_few(callers)}): {why}\n    {sql[:300]}"
        for (line, why, sql), callers in sorted(bad.items())
    ]
    assert not unrouted, f"{len(unrouted)} statements to tenant tables not routed to one org:\n" + "\n".join(unrouted)


def _few(callers: set[str]) -> str:
    """The first three callers by name, and how many more."""
    shown = sorted(callers)
    return ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")


def _unrouted(sql: str, sent: Sent, tables: set[str], functions: set[str]) -> str:
    """Why `sql` would not go to one org's shard group, or "" when it would."""
    if not sent.org:
        return "sent outside an org's transaction"
    if not sent.params and not any(re.fullmatch(pattern, sql) for pattern in UNBOUND):
        return "sends no value, so is bound to no org (bind the org, or list it in UNBOUND with why)"
    if sent.params and not any(isinstance(value, str) and value == sent.org for value in sent.params):
        return "not bound to the org of its transaction"
    references = re.findall(r"\b(?:FROM|JOIN|UPDATE|INTO|USING)\s+(" + "|".join(sorted(tables)) + r")\b", sql)
    if not references and not any(re.search(rf"\b{name}\(", sql) for name in functions):
        return "names a tenant table outside FROM, JOIN, UPDATE, INTO or USING"
    if loose := sql_routing.unrouted(sql, tables):
        return f"ties {', '.join(loose)} to no org (no org_id condition of its own, nor a join on org_id)"
    return ""


def _tenant(url: str) -> tuple[set[str], set[str]]:
    """The tables that hold organizations' rows (an `org_id` column) and the schema's own functions."""
    with psycopg.connect(url) as conn:
        tables = {t for (t,) in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND column_name = 'org_id'")}  # fmt: skip
        functions = {f for (f,) in conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = "
            "current_schema() AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass "
            "AND d.objid = p.oid AND d.deptype = 'e')")}  # fmt: skip
    return tables, functions


def test_the_recorder_scopes_a_statement_to_its_own_transaction_only(settings, recorder):
    """An org set for one transaction (`set_config(..., true)`) does not carry over to the connection's next one, nor
    to a statement sent in autocommit: the check above would otherwise pass a statement that filters by org but runs
    unscoped (row-level security off for it), once the connection had served the org before."""
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("alpha", create=True)
    lookup = "SELECT doc_id FROM documents WHERE org_id = %s"
    with psycopg.connect(settings.database_url) as conn:
        with conn.transaction():
            conn.execute("SELECT set_config('grandbo.org_id', %s, true)", ("alpha",))
            conn.execute(lookup, ("alpha",))
        with conn.transaction():
            conn.execute(lookup, ("alpha",))
        conn.rollback()
        conn.autocommit = True
        conn.execute(lookup, ("alpha",))
    scoped, *unscoped = [sent for sent in recorder.sent if sent.sql == lookup]
    assert scoped.org == "alpha" and _unrouted(lookup, scoped, {"documents"}, set()) == ""
    assert [sent.org for sent in unscoped] == ["", ""]
    assert {_unrouted(lookup, sent, {"documents"}, set()) for sent in unscoped} == {"sent outside an org's transaction"}


TABLES = {"orgs", "documents", "document_events", "memory_entries", "entry_vectors", "embed_outbox", "memory_events"}


@pytest.mark.parametrize(
    ("sql", "params", "loose"),
    [
        # Two conditions on one table, none on the other: the statement's conditions counted against its tables
        # passed both.
        ("SELECT 1 FROM memory_entries e JOIN entry_vectors v ON v.entry_id = e.entry_id "
         "WHERE e.org_id = %s AND e.org_id = %s", ["alpha", "alpha"], "entry_vectors (as v)"),
        ("SELECT 1 FROM documents d WHERE org_id = %s AND org_id = %s AND EXISTS "
         "(SELECT 1 FROM document_events e WHERE e.doc_id = d.doc_id)", ["alpha", "alpha"], "document_events (as e)"),
        ("SELECT (SELECT 1 FROM orgs WHERE org_id = %s AND org_id = %s), (SELECT 1 FROM documents WHERE ref = %s)",
         ["alpha", "alpha", "x"], "documents"),
        ("SELECT 1 FROM documents WHERE data = 'org_id = %s' AND org_id <> %s", ["alpha"], "documents"),
        # Tied each: by a join on org_id, a correlated condition, a condition in parentheses of its own query.
        ("SELECT 1 FROM memory_entries e JOIN entry_vectors v USING (org_id, entry_id) WHERE e.org_id = %s",
         ["alpha"], ""),
        ("SELECT 1 FROM documents AS d WHERE (org_id = %s OR false) AND EXISTS "
         "(SELECT 1 FROM document_events e WHERE e.org_id = d.org_id)", ["alpha"], ""),
    ],
)  # fmt: skip
def test_each_table_reference_is_tied_to_the_org_on_its_own(sql, params, loose):
    """Review 20: a statement's org_id conditions were counted against the tables it names, so two conditions on
    one table passed a statement that read another table of every org."""
    why = _unrouted(sql, Sent(sql, params, "alpha", "here", "there"), TABLES, set())
    assert why == (f"ties {loose} to no org (no org_id condition of its own, nor a join on org_id)" if loose else "")


def test_a_statement_that_sends_no_value_is_bound_to_no_org_unless_listed():
    """Review 20: a statement with no parameter skipped the check that it is bound to its transaction's org."""
    moved = "INSERT INTO memory_events (org_id, seq) SELECT org_id, seq FROM stage_memory_events"
    unlisted = "INSERT INTO memory_events (org_id, seq) SELECT org_id, seq FROM memory_events_copy"
    assert _unrouted(moved, Sent(moved, [], "alpha", "here", "there"), TABLES, set()) == ""
    why = _unrouted(unlisted, Sent(unlisted, [], "alpha", "here", "there"), TABLES, set())
    assert why.startswith("sends no value, so is bound to no org")
