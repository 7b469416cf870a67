"""A transaction begun in one round trip: BEGIN and its first statement sent together.

psycopg begins a transaction with a BEGIN of its own, a round trip before the transaction's first statement (its
settings and the schema fence, `setting`). A first recall of an org loaded from its image makes two read
transactions on its thread (the org's image and facts, then its entries and runbooks' counts) and one on a helper
(the vector search, `OrgSearch.ahead`): 3 of its 19 round trips (15 on its thread) were BEGINs, each a wait for the
server's process to be scheduled on a busy machine. Here the connection, idle as the pool lent it, is put in
autocommit mode meanwhile, so that psycopg sends no BEGIN, and the BEGIN goes in the same simple query as the first
statement (its parameters bound by psycopg on the client, as literals: `ClientCursor`); COMMIT or ROLLBACK end it as
before. Used by the reads together of an org (`PostgresConnection._begun`) and the lent vector search; writes begin
as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from grandbo.store import fence


def setting(settings: dict[str, str]) -> tuple[str, list[str]]:
    """A transaction's first statement: its settings (transaction-local), and the store's newest migration in the same
    round trip (`fence`); with its parameters."""
    calls = ", ".join("set_config(%s, %s, true)" for _ in settings)
    return f"SELECT {calls}, {fence.NEWEST}", [part for pair in settings.items() for part in pair]


@contextmanager
def begun(
    conn: psycopg.Connection[Any], settings: dict[str, str], known: int | None
) -> Iterator[psycopg.Connection[Any]]:
    """A transaction on `conn` (idle, as lent by the pool) begun with its first statement (`setting`) in one round
    trip, the schema fence held (`known`: this release's newest migration). Committed when the block ends, rolled back
    when it raises; `conn` is left as it was lent (not in autocommit mode), or closed where it cannot be (a lost
    connection: the pool drops it)."""
    conn.autocommit = True  # a flag of psycopg's: no round trip
    try:
        first, params = setting(settings)
        with psycopg.ClientCursor(conn) as cursor:
            cursor.execute(f"BEGIN; {first}", params)
            cursor.nextset()  # BEGIN's result first, then the statement's
            row = cursor.fetchone()
        assert row is not None  # a SELECT of values: one row
        fence.hold(row[-1], known)
        yield conn
    except BaseException:
        with contextlib.suppress(psycopg.Error):  # the caller's error is the one to tell
            conn.rollback()
        _lent_back(conn)
        raise
    try:
        conn.commit()
    finally:
        _lent_back(conn)


def _lent_back(conn: psycopg.Connection[Any]) -> None:
    """`conn` out of autocommit mode, for the pool's next borrower; closed where it cannot be (not idle)."""
    try:
        conn.autocommit = False
    except psycopg.Error:
        conn.close()
