"""Shared fixtures: a real store per test (parametrized over backends), the prepared local model."""

from __future__ import annotations

import fcntl
import functools
import os
import re
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from grandbo.config import Settings
from grandbo.devtools.postgres import LocalPostgres
from grandbo.embeddings.cache import CachedProvider
from grandbo.embeddings.local import LocalProvider
from grandbo.embeddings.prepare import is_prepared
from grandbo.logs import configure as configure_logs
from grandbo.memory import OrgMemory
from grandbo.retrieval.text import index_terms
from grandbo.service import Grandbo
from grandbo.store import Store
from grandbo.store.postgres.store import PostgresStore
from grandbo.store.sqlite.store import SQLiteStore

BACKENDS = ["sqlite", "postgres"]
APP_ROLE, APP_PASSWORD = "grandbo_app", "app-password"
OWNER_ROLE, OWNER_PASSWORD = "grandbo_owner", "owner-password"


def _model_dir() -> Path:
    configured = os.environ.get("GRANDBO_LOCAL_MODEL_DIR")
    if configured:
        return Path(configured).expanduser()
    home = Path(os.environ.get("GRANDBO_HOME", "~/.grandbo")).expanduser()
    return home / "models" / "all-MiniLM-L6-v2"


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The prepared local model (`make setup` prepares it); tests that need it fail loudly without it."""
    path = _model_dir()
    if not is_prepared(path):
        pytest.fail(f"the local model is not prepared in {path}: run `make setup` (grandbo models prepare)")
    return path


@pytest.fixture(scope="session")
def embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for `embeddings.db`, the evaluations' document-embedding cache, shared by the session's workers:
    a text the real model embedded once is not embedded again by another module (the shipped set's 93 memories
    took 10-25 s of the two cores in each of four modules). Query embeddings are never cached."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "embedding-cache"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def local_model(model_dir: Path, embedding_cache: Path) -> Iterator[CachedProvider]:
    """The real local model, loaded once a worker, its document vectors kept in `embedding_cache` (the provider
    to hand `Grandbo.init`, which leaves it open)."""
    provider = CachedProvider(LocalProvider(model_dir), embedding_cache / "embeddings.db")
    yield provider
    provider.close()


@pytest.fixture(scope="session")
def shipped_vectors(
    local_model: CachedProvider, model_dir: Path, embedding_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The shipped set's documents embedded by the real model into `embedding_cache`, once a session: two workers
    that came to the set at once (test_local_model and test_verdict) each embedded it, 12 s of CPU each; the
    second now waits for the first's vectors, and reads them."""
    from grandbo.eval import beir
    from grandbo.eval.runner import load_corpus, shipped_set

    with (embedding_cache / "shipped.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until the file is closed
        if (embedding_cache / "shipped.done").exists():
            return
        settings = Settings(home=tmp_path_factory.mktemp("shipped-vectors"), local_model_dir=model_dir)
        with Grandbo.init(settings, provider=local_model) as grandbo:
            load_corpus(grandbo.org("shipped", create=True), beir.load(shipped_set(), "dev+test"), lambda _: None)
        (embedding_cache / "shipped.done").touch()


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No test reads the developer's GRANDBO_* settings or writes to their home."""
    for key in list(os.environ):
        if key.startswith("GRANDBO_") and key != "GRANDBO_LOCAL_MODEL_DIR":
            monkeypatch.delenv(key)
    monkeypatch.setenv("GRANDBO_HOME", str(tmp_path / "home"))
    # Tests need no durability across a power loss: the embedded store syncs at checkpoints only, as the test
    # Postgres skips its flushes (a write synced at every commit took 10-12 ms here, against 0.5: benchmarks/
    # sqlite_sync.py). Production's default is FULL; test_durability.py checks it.
    monkeypatch.setenv("GRANDBO_SQLITE_SYNCHRONOUS", "NORMAL")
    yield
    configure_logs()  # a CLI run inside a test reconfigures logging for the whole process: back to the default


@pytest.fixture(scope="session", autouse=True)
def _cli_built_once() -> Iterator[None]:
    """typer's CliRunner builds the click command tree of `grandbo` from its commands' signatures at every
    invoke (0.1 s of CPU, most of a short command's run); `grandbo` itself builds it once a process, and so do
    the tests now. The tree is the one `grandbo` runs: only when it is built changes."""
    import typer.testing

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.testing, "_get_command", functools.cache(typer.testing._get_command))
        yield


@pytest.fixture
def cli():  # type: ignore[no-untyped-def]
    """Run `grandbo ARGS` in process on a fresh embedded store (deterministic embeddings); asserts the exit code."""
    from typer.testing import CliRunner

    from grandbo.cli import app

    runner = CliRunner()

    def run(*args: str, code: int = 0):  # type: ignore[no-untyped-def]
        result = runner.invoke(app, list(args))
        assert result.exit_code == code, (result.stdout, result.stderr)
        return result

    run("init", "--embedding", "deterministic")
    return run


@pytest.fixture(scope="session")
def pg_server() -> Iterator[LocalPostgres]:
    """One real Postgres 18 + pgvector for the session."""
    with LocalPostgres() as server:
        yield server


@pytest.fixture(scope="session")
def _pg_migrated(pg_server: LocalPostgres) -> str:
    """The name of a database migrated once for the session, the template `pg_database` copies (a copy takes
    about a third of a migration's time)."""
    name = "t_migrated_" + secrets.token_hex(3)
    url = pg_server.create_app_database(name, APP_ROLE, APP_PASSWORD, OWNER_ROLE, OWNER_PASSWORD)
    PostgresStore(url, index_terms, migrate_url=owner_url(url)).close()  # closed: a template may have no session
    return name


@pytest.fixture(scope="module")
def pg_database(pg_server: LocalPostgres, _pg_migrated: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database per test module, migrated by its owner role (a copy of `_pg_migrated`); yields the URL
    of the runtime role, which owns nothing and cannot bypass RLS (`owner_url` gives the owner's)."""
    name = "t_" + re.sub(r"[^a-z0-9]+", "_", request.module.__name__.lower())[-40:] + "_" + secrets.token_hex(3)
    url = pg_server.create_app_database(name, APP_ROLE, APP_PASSWORD, OWNER_ROLE, OWNER_PASSWORD, template=_pg_migrated)
    PostgresStore(url, index_terms, migrate_url=owner_url(url)).close()  # finds every migration applied
    _SUPERUSER_URLS[url] = pg_server.url(name)
    yield url
    del _SUPERUSER_URLS[url]
    pg_server.drop_database(name)


def owner_url(url: str) -> str:
    """The owner role's URL of the database at runtime URL `url` (made by `pg_database`)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{OWNER_ROLE}:{OWNER_PASSWORD}@{parts.hostname}:{parts.port}"))


def undo_migration(settings: Settings, version: int, *statements: str) -> Settings:
    """The store of `settings` as the release before migration `version` left it: `statements` undo what the
    migration made (as the owner role on Postgres) and its number is taken out; the settings that open it again
    (migrated by the owner role)."""
    if settings.database_url:
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
            conn.execute("DELETE FROM schema_migrations WHERE version = %s", (version,))
        return settings.model_copy(update={"migrate_database_url": owner_url(settings.database_url)})
    with sqlite3.connect(settings.home / "grandbo.db") as conn:
        for statement in statements:
            conn.execute(statement)
        conn.execute("DELETE FROM schema_migrations WHERE version = ?", (version,))
    return settings


def reads_after_the_search(monkeypatch: pytest.MonkeyPatch, waits: Callable[[str], bool]) -> list[bool]:
    """psycopg's statements on this thread that `waits` names wait (10 s at most) for the vector search's answer
    (`<=>`, on any thread) before they are sent: the list, filled as they run, says whether it came for each (a
    first recall's search begun before its reads)."""
    answered, waited, execute, thread = threading.Event(), [], psycopg.Cursor.execute, threading.get_ident()

    def executed(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        if threading.get_ident() == thread and waits(str(query)):
            waited.append(answered.wait(10))
        cursor = execute(self, query, params, **kwargs)
        if "<=>" in str(query):
            answered.set()
        return cursor

    monkeypatch.setattr(psycopg.Cursor, "execute", executed)
    return waited


# A superuser's URL of each module database (`pg_database`), by its runtime URL: `reset_postgres` empties it.
_SUPERUSER_URLS: dict[str, str] = {}
_BIG_TABLE_BYTES = 1 << 20
# One statement, run as the superuser (row-level security does not filter it) with triggers off for its
# transaction (the event logs' append-only guards, the foreign keys): a table whose file holds pages has its rows
# deleted or, past _BIG_TABLE_BYTES, is truncated; then the vector column and the per-org HNSW indexes go.
# TRUNCATE alone gave each table it named (its indexes, its TOAST table) new files: after a test that wrote a few
# entries (6 tables) a reset took 100-150 ms, against 26-34 ms now (this 2-core machine under load, 50 resets
# each; a reset of an untouched database ~30 ms either way), before each of the ~870 Postgres tests of the suite.
# The big tables are truncated still, so that the dead rows a module's tests leave behind stay few.
_RESET = f"""
DO $$
DECLARE
    name text;
    written regclass;
BEGIN
    SET LOCAL session_replication_role = replica;
    FOR written IN
        SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'schema_migrations'
            AND pg_relation_size(c.oid) > 0
    LOOP
        IF pg_relation_size(written) > {_BIG_TABLE_BYTES} THEN
            EXECUTE format('TRUNCATE %s CASCADE', written);
        ELSE
            EXECUTE format('DELETE FROM %s', written);
        END IF;
    END LOOP;
    FOR name IN SELECT indexname FROM pg_indexes WHERE indexname LIKE 'entry_vectors_hnsw_%' LOOP
        EXECUTE format('DROP INDEX IF EXISTS %I', name);
    END LOOP;
    ALTER TABLE entry_vectors DROP COLUMN IF EXISTS embedding;
END
$$
"""


def reset_postgres(url: str) -> None:
    """Empty every Grandbo table of the module's database (runtime URL `url`, made by `pg_database`) between
    tests, and drop what the runtime role's DDL added (the vector column, the per-org HNSW indexes): see _RESET."""
    with psycopg.connect(_SUPERUSER_URLS[url], autocommit=True) as conn:
        conn.execute(_RESET)  # type: ignore[arg-type]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test of a module marked `embedded_default` (surfaces whose Postgres behaviour the store's own tests, the
    parity and isolation walks cover) runs on Postgres in the slow suite only: the default suite stays near ten
    minutes on two cores."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if (
            callspec is not None
            and callspec.params.get("backend") == "postgres"
            and item.get_closest_marker("embedded_default")
        ):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """None for the embedded store (GRANDBO_HOME's SQLite file), or a clean Postgres database."""
    if backend == "sqlite":
        return None
    url = str(request.getfixturevalue("pg_database"))
    reset_postgres(url)
    return url


@pytest.fixture
def settings(
    tmp_path: Path, database_url: str | None, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    if request.node.get_closest_marker("brief_lock_waits"):  # before any store of the test is opened
        monkeypatch.setattr(SQLiteStore, "busy_timeout_ms", 1000)
    # An org made again right after its drop waits out every process's key cache (2.25 s; test_org_lifecycle):
    # a test of something else marked `org_made_again_at_once` trusts no key, and waits 0.25 s.
    keys = {"key_cache_seconds": 0} if request.node.get_closest_marker("org_made_again_at_once") else {}
    return Settings(home=tmp_path / "home", local_model_dir=_model_dir(), database_url=database_url, **keys)


@pytest.fixture
def grandbo(settings: Settings) -> Iterator[Grandbo]:
    with Grandbo.init(settings, embedding="deterministic") as opened:
        yield opened


@pytest.fixture
def memory(grandbo: Grandbo) -> OrgMemory:
    return grandbo.org("acme", create=True)


@pytest.fixture
def background(settings: Settings) -> Iterator[Grandbo]:
    """A long-running process's Grandbo: embedding and write-behinds run on background threads."""
    with Grandbo.open(settings, background=True) as opened:
        yield opened


@pytest.fixture
def store(grandbo: Grandbo) -> Store:
    """The store under `grandbo`, for tests of the store itself (nothing in the package reaches it but the
    service factory)."""
    return grandbo._store


RAW_ERRORS = (sqlite3.DatabaseError, psycopg.Error)


@pytest.fixture
def raw(settings: Settings, backend: str):  # type: ignore[no-untyped-def]
    """Run SQL straight against the store's database; on Postgres as the application role, so that
    row-level security applies (`org` sets grandbo.org_id for the transaction). Use %s placeholders."""

    def run(statement: str, params: tuple[object, ...] = (), org: str | None = None) -> list[tuple[object, ...]]:
        if backend == "sqlite":
            with sqlite3.connect(settings.home / "grandbo.db") as conn:
                return conn.execute(statement.replace("%s", "?"), params).fetchall()
        assert settings.database_url is not None
        with psycopg.connect(settings.database_url) as conn:
            if org is not None:
                conn.execute("SELECT set_config('grandbo.org_id', %s, true)", (org,))
            cursor = conn.execute(statement, params)  # type: ignore[arg-type]
            return cursor.fetchall() if cursor.description else []

    return run


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright, one a test module (the console's browser tests)."""
    from tests.console_browser import ARGS, CHROMIUM

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()
