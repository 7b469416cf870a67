"""Which failures to connect to Postgres are its configuration's, not an outage: waiting will not mend them.

`grandbo serve` and `grandbo worker` wait for a store that does not answer (`cli.waiting`): a server down,
starting up, shutting down or in recovery (SQLSTATE 57P03), too many connections (53300), a host that does not
resolve or refuses. A wrong password (28P01), a role that does not exist, may not log in or that pg_hba.conf
refuses (28000), a database that does not exist (3D000), a role without CONNECT on it (42501), no password given,
or a malformed GRANDBO_DATABASE_URL stay wrong however long they wait: they waited like an outage (for ever by
default), each try saying only "cannot reach". Such a refusal is a ConfigError at once, on one line saying
what is wrong and what to do.

libpq gives a connection's failure as text only (psycopg's `sqlstate` is None for it): the server's words are
matched here, as it says them in English (a server with another `lc_messages` is not recognized, and waits as
before). Anything not recognized is an outage: waiting for one is the safe side."""

from __future__ import annotations

from typing import Any

import psycopg

from grandbo.errors import ConfigError

# (words in the failure, all of them; its SQLSTATE; what is wrong; what to do). The first that matches says it.
_REFUSALS: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (("password authentication failed for user",), "28P01", "it refused the password",
     "Fix the password in {setting} (or set the role's: ALTER ROLE ... PASSWORD)"),
    (("no password supplied",), "", "it asks for a password and none was given",
     "Put the role's password in {setting}"),
    (("authentication failed for user",), "28000", "it refused the role's authentication",
     "Check the user in {setting} and the server's pg_hba.conf authentication method for it"),
    (('role "', '" does not exist'), "28000", "the role does not exist there",
     "Fix the user in {setting}, or create the role (README, 'Postgres: two roles')"),
    (("is not permitted to log in",), "28000", "the role may not log in",
     "ALTER ROLE ... LOGIN, or name a role that may in {setting}"),
    (("pg_hba.conf",), "28000", "its pg_hba.conf admits no such connection",
     "Add a pg_hba.conf entry for this host, role and database (then reload the server), or fix {setting}"),
    (('database "', '" does not exist'), "3D000", "the database does not exist there",
     "Fix the database name in {setting}, or create it (README, 'Postgres: two roles')"),
    (("permission denied for database",), "42501", "the role may not connect to the database",
     "GRANT CONNECT ON DATABASE ... TO the role, or fix {setting}"),
    (("server does not support SSL",), "08P01", "the URL requires SSL and the server has none",
     "Fix sslmode in {setting}, or turn SSL on at the server"),
    (("connection is bad: invalid",), "", "the URL holds an invalid option (libpq read none of it)",
     "Fix the option in {setting}"),
)  # fmt: skip


def connect(dsn: str, url: str, setting: str = "GRANDBO_DATABASE_URL", **options: Any) -> psycopg.Connection[Any]:
    """`psycopg.connect(dsn, **options)`; a `dsn` psycopg cannot read (an unknown parameter: a ProgrammingError,
    which went up as a traceback) is a ConfigError naming `setting`. `url`: the dsn without its credentials."""
    try:
        return psycopg.connect(dsn, **options)
    except psycopg.ProgrammingError as error:
        said = _shown(str(error).strip().splitlines()[0], url) if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"{setting} ({url}) cannot be used: {said}. This is configuration, not an outage: waiting will not mend "
            f"it. Fix {setting}, then start again.",
            detail={"url": url, "sqlstate": None},
        ) from error


def _shown(said: str, url: str) -> str:
    """libpq's words on a dsn it cannot read, each token it quotes kept only when `url` (the dsn without its
    credentials) shows it: it quotes the token it stopped at, which may be the password (`invalid percent-encoded
    token: "pa%zz..."`, a password with a `%` not encoded)."""
    pieces = said.split('"')
    return '"'.join(piece if at % 2 == 0 or piece in url else "***" for at, piece in enumerate(pieces))


def refusal(url: str, error: psycopg.Error, setting: str = "GRANDBO_DATABASE_URL") -> ConfigError | None:
    """The ConfigError of a connection to `url` (shown without credentials) that failed for its configuration, as
    `setting` gives it; None for an outage (the server down, starting, unreachable) or a failure not recognized."""
    said = str(error).strip()
    for line in said.splitlines():
        for words, sqlstate, what, fix in _REFUSALS:
            if all(word in line for word in words):
                return _refused(url, line.strip(), sqlstate, what, fix.format(setting=setting))
    return None


def _refused(url: str, line: str, sqlstate: str, what: str, fix: str) -> ConfigError:
    code = f", SQLSTATE {sqlstate}" if sqlstate else ""
    return ConfigError(
        f"Postgres at {url} refused the connection: {what} ({line}{code}). This is configuration, not an outage: "
        f"waiting will not mend it. {fix}, then start again.",
        detail={"url": url, "sqlstate": sqlstate or None},
    )
