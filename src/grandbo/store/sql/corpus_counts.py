"""Migration 34, written once for both backends, and the read it serves: an org's corpus counts (`corpus_stats`:
`/v1/stats`, `grandbo stats`) kept by the database as the rows change, not counted again on every read.

`corpus_stats` joined every active entry of the org with its vector, reading both rows whole: 1.45 s of SQLite at
100,000 entries (0.28 s of its CPU), 0.85 s of Postgres, on every read of a dashboard or an agent that polls. The
counts it reads now are kept in the transaction of every write that changes them, by triggers of the two tables
they count (no writer can forget them, an older release's process on Postgres included):

- `orgs.active_entries`: the org's active entries (`total`);
- `vector_counts`, one row per org and embedding space of its vectors: `vectors`, its active entries with a
  vector of that space, and `readable`, those whose vector was computed from the entry's current text (its
  content hash). `readable` is the current space's; `stale` the sum of the other spaces' `vectors`. A space's
  row is kept apart by its provider, model and dimension, so a switch of the store's space (`switch_space`) moves
  nothing: the org's vectors of the old one are counted as stale until they are deleted, whenever that is. A row
  counted down to no vectors is deleted (a dropped org leaves none).

On Postgres the triggers are per statement (a batch of 5,000 rows changes each count once) and count the other
table's rows after taking the org's writer lock (its `orgs` row, which its writers take first): a write of the
entries and one of their vectors in two transactions are counted one after the other, the second seeing the
first's rows. On SQLite, per row (the one writer holds the whole database); an `INSERT OR REPLACE` of an entry
replaces its row without the DELETE trigger, so the row it replaces is taken off before the insert.

The embed jobs are still counted from their rows (an index of the org's jobs by attempts): how many have used
their attempts depends on the setting a process reads them with.
"""

from __future__ import annotations

from collections.abc import Callable

from grandbo.model import EmbeddingSpace
from grandbo.store.sql.dialect import for_each_org

DESCRIPTION = "an org's corpus counts kept by every write that changes them, not counted again by every read"

_TABLE = {
    "sqlite": """CREATE TABLE vector_counts (
                org_id    TEXT NOT NULL,
                provider  TEXT NOT NULL,
                model     TEXT NOT NULL,
                dimension INTEGER NOT NULL,
                vectors   INTEGER NOT NULL,
                readable  INTEGER NOT NULL,
                PRIMARY KEY (org_id, provider, model, dimension)
            ) WITHOUT ROWID""",
    "postgres": """CREATE TABLE vector_counts (
                org_id    text NOT NULL,
                provider  text NOT NULL,
                model     text NOT NULL,
                dimension integer NOT NULL,
                vectors   bigint NOT NULL,
                readable  bigint NOT NULL,
                PRIMARY KEY (org_id, provider, model, dimension)
            )""",
}
_ADD = (
    "ON CONFLICT (org_id, provider, model, dimension) DO UPDATE SET "
    "vectors = vector_counts.vectors + excluded.vectors, readable = vector_counts.readable + excluded.readable"
)
_COLUMNS = "vector_counts (org_id, provider, model, dimension, vectors, readable)"
_COUNT_ACTIVE = "(SELECT count(*) FROM memory_entries e WHERE e.org_id = orgs.org_id AND e.status = 'active')"
_COUNT_VECTORS = (
    f"INSERT INTO {_COLUMNS} SELECT v.org_id, v.provider, v.model, v.dimension, count(*), "
    "count(*) FILTER (WHERE v.content_hash = e.content_hash) "
    "FROM memory_entries e JOIN entry_vectors v USING (org_id, entry_id) WHERE e.status = 'active'{org} "
    "GROUP BY v.org_id, v.provider, v.model, v.dimension"
)
OUTBOX_INDEX = "CREATE INDEX embed_outbox_by_attempts ON embed_outbox (org_id, attempts)"


def _sqlite_entry(row: str, sign: str) -> list[str]:
    """What entry row `row` (NEW or OLD) counts, added (`+`) or taken off (`-`), in a trigger's body."""
    return [
        f"UPDATE orgs SET active_entries = active_entries {sign} 1 WHERE org_id = {row}.org_id "
        f"AND {row}.status = 'active'",
        f"INSERT INTO {_COLUMNS} SELECT org_id, provider, model, dimension, {sign}1, "
        f"{sign}(content_hash = {row}.content_hash) FROM entry_vectors "
        f"WHERE org_id = {row}.org_id AND entry_id = {row}.entry_id AND {row}.status = 'active' {_ADD}",
    ]


def _sqlite_vector(row: str, sign: str) -> list[str]:
    """What vector row `row` (NEW or OLD) counts, added (`+`) or taken off (`-`), in a trigger's body."""
    return [
        f"INSERT INTO {_COLUMNS} SELECT {row}.org_id, {row}.provider, {row}.model, {row}.dimension, {sign}1, "
        f"{sign}({row}.content_hash = e.content_hash) FROM memory_entries e "
        f"WHERE e.org_id = {row}.org_id AND e.entry_id = {row}.entry_id AND e.status = 'active' {_ADD}"
    ]


def _emptied(org: str) -> str:
    return f"DELETE FROM vector_counts WHERE org_id = {org} AND vectors = 0"


def _sqlite_trigger(name: str, event: str, body: list[str], when: str = "") -> str:
    statements = "".join(f"\n                {statement};" for statement in body)
    condition = f" WHEN {when}" if when else ""
    return f"CREATE TRIGGER {name} {event} FOR EACH ROW{condition} BEGIN{statements}\n            END"


_ENTRY_CHANGED = (
    "OLD.status IS NOT NEW.status OR OLD.content_hash IS NOT NEW.content_hash "
    "OR OLD.org_id IS NOT NEW.org_id OR OLD.entry_id IS NOT NEW.entry_id"
)
_VECTOR_CHANGED = (
    "OLD.provider IS NOT NEW.provider OR OLD.model IS NOT NEW.model OR OLD.dimension IS NOT NEW.dimension "
    "OR OLD.content_hash IS NOT NEW.content_hash OR OLD.org_id IS NOT NEW.org_id OR OLD.entry_id IS NOT NEW.entry_id"
)

SQLITE = (
    34,
    DESCRIPTION,
    [
        "ALTER TABLE orgs ADD COLUMN active_entries INTEGER NOT NULL DEFAULT 0",
        f"UPDATE orgs SET active_entries = {_COUNT_ACTIVE}",
        _TABLE["sqlite"],
        _COUNT_VECTORS.format(org=""),
        # An INSERT OR REPLACE (the write path's) deletes the row it replaces without a DELETE trigger.
        _sqlite_trigger(
            "memory_entries_counted_replaced",
            "BEFORE INSERT ON memory_entries",
            [
                "UPDATE orgs SET active_entries = active_entries - 1 WHERE org_id = NEW.org_id AND EXISTS ("
                "SELECT 1 FROM memory_entries WHERE org_id = NEW.org_id AND entry_id = NEW.entry_id "
                "AND status = 'active')",
                f"INSERT INTO {_COLUMNS} SELECT v.org_id, v.provider, v.model, v.dimension, -1, "
                "-(v.content_hash = e.content_hash) FROM memory_entries e JOIN entry_vectors v USING "
                "(org_id, entry_id) WHERE e.org_id = NEW.org_id AND e.entry_id = NEW.entry_id "
                f"AND e.status = 'active' {_ADD}",
                _emptied("NEW.org_id"),
            ],
        ),
        _sqlite_trigger("memory_entries_counted_insert", "AFTER INSERT ON memory_entries", _sqlite_entry("NEW", "+")),
        _sqlite_trigger(
            "memory_entries_counted_delete",
            "AFTER DELETE ON memory_entries",
            [*_sqlite_entry("OLD", "-"), _emptied("OLD.org_id")],
        ),
        _sqlite_trigger(
            "memory_entries_counted_update",
            "AFTER UPDATE OF status, content_hash, org_id, entry_id ON memory_entries",
            [*_sqlite_entry("OLD", "-"), *_sqlite_entry("NEW", "+"), _emptied("OLD.org_id")],
            _ENTRY_CHANGED,
        ),
        _sqlite_trigger("entry_vectors_counted_insert", "AFTER INSERT ON entry_vectors", _sqlite_vector("NEW", "+")),
        _sqlite_trigger(
            "entry_vectors_counted_delete",
            "AFTER DELETE ON entry_vectors",
            [*_sqlite_vector("OLD", "-"), _emptied("OLD.org_id")],
        ),
        _sqlite_trigger(
            "entry_vectors_counted_update",
            "AFTER UPDATE OF provider, model, dimension, content_hash, org_id, entry_id ON entry_vectors",
            [*_sqlite_vector("OLD", "-"), *_sqlite_vector("NEW", "+"), _emptied("OLD.org_id")],
            _VECTOR_CHANGED,
        ),
        OUTBOX_INDEX,
    ],
)
"""Migration 34 as SQLite's list holds it."""


def _changes(columns: str, active: str, op: str) -> str:
    """The rows a statement's transition tables (`old_rows`, `new_rows`) took off (-1) and added (+1), less those
    it left as they were (an UPDATE of other columns): `columns` of each, of rows matching `active`."""
    before, after = (f"SELECT {columns} FROM {table} WHERE {active}" for table in ("old_rows", "new_rows"))
    gone = {"INSERT": "", "DELETE": before, "UPDATE": f"{before} EXCEPT ALL {after}"}[op]
    came = {"INSERT": after, "DELETE": "", "UPDATE": f"{after} EXCEPT ALL {before}"}[op]
    parts = [f"SELECT *, {sign} AS sign FROM ({rows}) r" for sign, rows in ((-1, gone), (1, came)) if rows]
    return f"({' UNION ALL '.join(parts)})"


def _postgres_entries(op: str) -> str:
    changes = _changes("org_id, entry_id, content_hash", "status = 'active'", op)
    return f"""
                -- The org's writer lock first (its row), then its vectors read in a statement of their own.
                UPDATE orgs SET active_entries = active_entries + d.delta
                    FROM (SELECT org_id, sum(sign) AS delta FROM {changes} c GROUP BY org_id) d
                    WHERE orgs.org_id = d.org_id;
                INSERT INTO {_COLUMNS}
                    SELECT c.org_id, v.provider, v.model, v.dimension, sum(c.sign),
                        coalesce(sum(c.sign) FILTER (WHERE v.content_hash = c.content_hash), 0)
                    FROM {changes} c CROSS JOIN LATERAL (SELECT provider, model, dimension, content_hash
                        FROM entry_vectors WHERE org_id = c.org_id AND entry_id = c.entry_id LIMIT 1) v
                    GROUP BY c.org_id, v.provider, v.model, v.dimension {_ADD};"""


def _postgres_vectors(op: str) -> str:
    changes = _changes("org_id, entry_id, provider, model, dimension, content_hash", "true", op)
    return f"""
                PERFORM 1 FROM orgs WHERE org_id IN (SELECT org_id FROM {changes} c) FOR NO KEY UPDATE;
                INSERT INTO {_COLUMNS}
                    SELECT c.org_id, c.provider, c.model, c.dimension, sum(c.sign),
                        coalesce(sum(c.sign) FILTER (WHERE c.content_hash = e.content_hash), 0)
                    FROM {changes} c CROSS JOIN LATERAL (SELECT content_hash FROM memory_entries
                        WHERE org_id = c.org_id AND entry_id = c.entry_id AND status = 'active' LIMIT 1) e
                    GROUP BY c.org_id, c.provider, c.model, c.dimension {_ADD};"""


# Each changed row's other half is looked up by its key (LATERAL ... LIMIT 1 is not flattened into a join, and no
# sequential scan is planned): the tables' statistics say nothing of the rows this transaction wrote, and a fresh
# store's first import (5,000 entries) took 9.4 s where the planner scanned the transition table once per row.
def _postgres_function(table: str, body: Callable[[str], str]) -> str:
    branches = "".join(
        f"\n                {'IF' if n == 0 else 'ELSIF'} TG_OP = '{op}' THEN{body(op)}"
        for n, op in enumerate(("INSERT", "UPDATE", "DELETE"))
    )
    return f"""CREATE FUNCTION grandbo_count_{table}() RETURNS trigger LANGUAGE plpgsql SET enable_seqscan = off AS $$
            BEGIN{branches}
                END IF;
                DELETE FROM vector_counts WHERE org_id = current_setting('grandbo.org_id', true) AND vectors = 0;
                RETURN NULL;
            END $$"""


def _postgres_triggers(table: str) -> list[str]:
    tables = {"INSERT": "NEW TABLE AS new_rows", "UPDATE": "OLD TABLE AS old_rows NEW TABLE AS new_rows",
              "DELETE": "OLD TABLE AS old_rows"}  # fmt: skip
    return [
        f"CREATE TRIGGER {table}_counted_{op.lower()} AFTER {op} ON {table} REFERENCING {transition} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION grandbo_count_{table}()"
        for op, transition in tables.items()
    ]


_OWN = "org_id = current_setting('grandbo.org_id', true)"

POSTGRES = (
    34,
    DESCRIPTION,
    [
        "ALTER TABLE orgs ADD COLUMN active_entries bigint NOT NULL DEFAULT 0",
        for_each_org(f"UPDATE orgs SET active_entries = {_COUNT_ACTIVE} WHERE org_id = org"),
        _TABLE["postgres"],
        "ALTER TABLE vector_counts ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE vector_counts FORCE ROW LEVEL SECURITY",
        f"CREATE POLICY vector_counts_by_org ON vector_counts USING ({_OWN}) WITH CHECK ({_OWN})",
        for_each_org(_COUNT_VECTORS.format(org=" AND e.org_id = org")),
        _postgres_function("memory_entries", _postgres_entries),
        _postgres_function("entry_vectors", _postgres_vectors),
        *_postgres_triggers("memory_entries"),
        *_postgres_triggers("entry_vectors"),
        OUTBOX_INDEX,
    ],
)
"""Migration 34 as Postgres's list holds it (row-level security holds the migrator too: each org counted in a
transaction set to it, `for_each_org`)."""

READ = "SELECT active_entries FROM orgs WHERE org_id = {p}"
"""The org's active entries (parameter: the org); no row for no org."""

READ_VECTORS = "SELECT provider, model, dimension, vectors, readable FROM vector_counts WHERE org_id = {p}"
"""The org's counts of each space it has vectors of (parameter: the org)."""


def readable_and_stale(rows: list[tuple[str, str, int, int, int]], space: EmbeddingSpace | None) -> tuple[int, int]:
    """`corpus_stats`' readable and stale from the org's `READ_VECTORS` rows: the vectors of `space` computed from
    their entry's current text, and every other space's vectors (none of either without a space)."""
    if space is None:
        return 0, 0
    current = (space.provider, space.model, space.dimension)
    readable = sum(int(row[4]) for row in rows if tuple(row[:3]) == current)
    return readable, sum(int(row[3]) for row in rows if tuple(row[:3]) != current)
