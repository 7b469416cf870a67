"""Backup and restore of a Postgres store with the server's own tools, pg_dump and pg_restore.

A backup is one `pg_dump --format=custom` of the whole Grandbo database (schema, the vector extension, every
table's rows, owners and grants), taken from one snapshot. Row-level security is FORCEd on every org table and
pg_dump refuses to dump rows a policy would filter, so it runs as a role that bypasses it: a superuser, or a
BYPASSRLS role granted pg_read_all_data (GRANDBO_BACKUP_DATABASE_URL). A restore recreates the owner's objects
and loads their rows, so it runs as a superuser. The password travels in PGPASSWORD, never on a command line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
import structlog

from grandbo.errors import ConfigError, StoreError
from grandbo.store.files import other_backend_backup, private_file, refuse_newer_backup
from grandbo.store.postgres import migrations
from grandbo.store.postgres.connection import PostgresConnection

log = structlog.get_logger(__name__)

# What a Grandbo backup's table of contents holds, whatever else the database has.
_GRANDBO_ENTRIES = ("TABLE public schema_migrations", "TABLE DATA public memory_events", "TABLE DATA public documents")
TIMEOUT_S = 3600
_CREATE_TABLE = re.compile(r"\bCREATE TABLE (?:IF NOT EXISTS )?(\w+)")  # no migration drops or renames a table


def tool(name: str, bin_dir: Path | None) -> Path:
    """The client binary `name` (pg_dump, pg_restore): in `bin_dir` (GRANDBO_PG_BIN_DIR), else on PATH."""
    found = bin_dir / name if bin_dir is not None else (Path(p) if (p := shutil.which(name)) else None)
    if found is None or not found.is_file():
        where = f"in {bin_dir}" if bin_dir is not None else "on PATH"
        raise ConfigError(
            f"No {name} {where}. Install the PostgreSQL client tools of the server's major version or newer, or "
            "set GRANDBO_PG_BIN_DIR to the folder that holds them.",
            detail={"tool": name},
        )
    return found


def _split(url: str) -> tuple[str, dict[str, str]]:
    """The URL without its password (in the userinfo or a `password=` parameter), and the environment that
    carries the password instead."""
    parts = urlsplit(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    kept = [pair for pair in parts.query.split("&") if pair and pair.partition("=")[0].lower() != "password"]
    given = [pair.partition("=")[2] for pair in parts.query.split("&") if pair.partition("=")[0].lower() == "password"]
    password = parts.password if parts.password is not None else (given[-1] if given else None)
    if password is None:
        return url, env
    netloc = parts.netloc.replace(f":{parts.password}@", "@") if parts.password is not None else parts.netloc
    return urlunsplit(parts._replace(netloc=netloc, query="&".join(kept))), env | {"PGPASSWORD": unquote(password)}


def _run(args: list[str], url: str, what: str) -> subprocess.CompletedProcess[str]:
    dsn, env = _split(url)
    try:
        done = subprocess.run(  # noqa: S603 - our arguments, no shell
            [*args, "--dbname", dsn], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
            timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as error:
        raise StoreError(f"{what} did not finish within {TIMEOUT_S} s.", detail={}) from error
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        remedy = (
            f"{args[0]} is older than the server: set GRANDBO_PG_BIN_DIR to a folder holding pg_dump and pg_restore "
            "of the server's major version or newer"
            if "version mismatch" in done.stderr
            else "Check GRANDBO_BACKUP_DATABASE_URL (a role that bypasses row-level security; a superuser to "
            "restore) and that the client tools (GRANDBO_PG_BIN_DIR, else PATH) match the server"
        )
        raise StoreError(
            f"{what} failed: {' '.join(message[:3])[:600]}. {remedy}.", detail={"exit_code": done.returncode}
        )
    return done


def contents(path: Path, bin_dir: Path | None) -> list[str]:
    """The table of contents of a pg_dump archive; refuse a file that is not a Grandbo backup."""
    listed = subprocess.run(  # noqa: S603
        [str(tool("pg_restore", bin_dir)), "--list", str(path)], capture_output=True, text=True, check=False,
        stdin=subprocess.DEVNULL, timeout=TIMEOUT_S,
    )  # fmt: skip
    lines = listed.stdout.splitlines() if listed.returncode == 0 else []
    if not all(any(entry in line for line in lines) for entry in _GRANDBO_ENTRIES):
        reason = listed.stderr.strip().splitlines()[0] if listed.returncode else "it holds no Grandbo tables"
        raise StoreError(
            f"{path} is not a Grandbo backup of a Postgres store ({reason}). Name a file `grandbo backup` wrote.",
            detail={"path": str(path)},
        )
    return lines


def refuse_partial(path: Path, listed: list[str], versions: set[int]) -> None:
    """Refuse an archive that lacks a table the migrations it records made (a dump of some tables, `pg_dump -t`):
    `pg_restore --clean` replaces only what an archive holds, and would leave the rest of the old store."""
    made = [table for version, _, statements in migrations.MIGRATIONS if version in versions
            for statement in statements for table in _CREATE_TABLE.findall(statement)]  # fmt: skip
    tables = {line.split()[5] for line in listed if line.split()[3:5] == ["TABLE", "public"]}
    missing = [table for table in dict.fromkeys(made) if table not in tables]
    if versions and not missing:
        return
    why = f"it lacks table {missing[0]}" if versions else "its schema_migrations holds no rows"
    raise StoreError(
        f"{path} is not a Grandbo backup of a Postgres store ({why}): nothing was changed. Name a file "
        "`grandbo backup` wrote.",
        detail={"path": str(path)},
    )


def schema_versions(path: Path, bin_dir: Path | None) -> set[int]:
    """The schema versions recorded in a Grandbo backup (the rows of its schema_migrations)."""
    listed = subprocess.run(  # noqa: S603
        [str(tool("pg_restore", bin_dir)), "--data-only", "--table=schema_migrations", "--file=-", str(path)],
        capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, timeout=TIMEOUT_S,
    )  # fmt: skip
    versions: set[int] = set()
    rows = False
    for line in listed.stdout.splitlines():
        if line.startswith("COPY ") and "schema_migrations" in line:
            rows = True
        elif rows and line == "\\.":
            break
        elif rows and line.split("\t", 1)[0].isdigit():
            versions.add(int(line.split("\t", 1)[0]))
    return versions


def dump_to(url: str, destination: Path, bin_dir: Path | None) -> None:
    """Write a pg_dump archive of the whole database at `url` to `destination`, checked before it is called done
    (its table of contents must list Grandbo's tables); a failed dump leaves no file behind."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    private_file(partial)  # pg_dump writes into it, keeping its mode
    try:
        _run([str(tool("pg_dump", bin_dir)), "--format=custom", "--no-password", "--file", str(partial)], url,
             "pg_dump")  # fmt: skip
        contents(partial, bin_dir)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(destination)


def restore_from(url: str, source: Path, bin_dir: Path | None) -> None:
    """Replace Grandbo's objects in the database at `url` with the backup's, in one transaction: a restore that
    fails changes nothing."""
    contents(source, bin_dir)
    _run(
        [str(tool("pg_restore", bin_dir)), "--clean", "--if-exists", "--single-transaction", "--exit-on-error",
         "--no-password", str(source)],
        url,
        "pg_restore",
    )  # fmt: skip


class BackupMixin(PostgresConnection):
    """`backup` and `restore` of `PostgresStore`, through the functions above, as the backup role."""

    def _backup_url(self) -> str:
        if self._backup_dsn is None:
            raise ConfigError(
                f"Backing up or restoring the Postgres store at {self.url} runs pg_dump / pg_restore as a role that "
                "bypasses row-level security: set GRANDBO_BACKUP_DATABASE_URL to a superuser's URL of this database "
                "(for backups alone, a BYPASSRLS role granted pg_read_all_data will do). README, 'Backup and "
                "restore'.",
                detail={"url": self.url},
            )
        role = "a role that bypasses row-level security"
        self._connect_as(self._backup_dsn, "the backup role", "GRANDBO_BACKUP_DATABASE_URL", role).close()
        return self._backup_dsn

    def backup(self, destination: Path) -> None:
        """A pg_dump archive of the whole database, from one snapshot (`dump_to`)."""
        dump_to(self._backup_url(), destination, self._pg_bin_dir)

    def restore(self, source: Path) -> None:  # no copy of the replaced database is kept: pg_dump one first
        """Replace the database's Grandbo objects with a backup's, in one transaction. The pool is opened
        again afterwards: its connections knew the vector type the restore recreated."""
        if (wrong := other_backend_backup(source, "a Postgres store (pg_dump)")) is not None:
            raise StoreError(wrong, detail={"path": str(source)})
        url = self._backup_url()
        listed = contents(source, self._pg_bin_dir)  # refuse a wrong file before touching the pool
        versions = schema_versions(source, self._pg_bin_dir)
        refuse_newer_backup(source, versions, migrations.MIGRATIONS)
        refuse_partial(source, listed, versions)
        self._pool.close()
        try:
            restore_from(url, source, self._pg_bin_dir)
        finally:
            self._pool = self._open_pool()
        with psycopg.connect(self._dsn) as conn:
            self._check_schema(conn)
        # Leases the backup holds are of workers and runners that held them when it was taken: none holds them
        # after the restore, and they would keep their jobs from every worker until they ran out (five minutes), a
        # write-behind's then counted as an attempt lost with its runner (`store.sql.holders.LAPSED`).
        released = freed = 0
        for org in self.orgs():
            with self._writing(org) as conn:
                released += conn.execute(
                    "UPDATE embed_outbox SET claimed_until = NULL, claimed_by = NULL "
                    "WHERE org_id = %s AND claimed_until IS NOT NULL",
                    (org,),
                ).rowcount
                freed += conn.execute(
                    "UPDATE pending_work SET claimed_until = NULL, claimed_by = NULL "
                    "WHERE org_id = %s AND claimed_until IS NOT NULL",
                    (org,),
                ).rowcount
        if released or freed:
            log.info("store.restore_released_leases", jobs=released, write_behinds=freed)
