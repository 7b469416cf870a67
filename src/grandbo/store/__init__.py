"""Stores: where memory lives. `open_store` picks the backend from the URL."""

from __future__ import annotations

from pathlib import Path

from grandbo.errors import ConfigError
from grandbo.store.base import Store


def open_store(url: str) -> Store:
    """Open (and migrate) the store at `url`: sqlite:///path/to.db or postgresql://..."""
    if url.startswith("sqlite:///"):
        from grandbo.store.sqlite.store import SQLiteStore

        return SQLiteStore(Path(url.removeprefix("sqlite:///")).expanduser())
    if url.startswith(("postgresql://", "postgres://")):
        from grandbo.store.postgres.store import PostgresStore

        return PostgresStore(url)
    raise ConfigError(
        f"Unsupported store URL {url.split('@')[-1]!r}: use sqlite:///path/to/grandbo.db or "
        "postgresql://user:password@host/db in GRANDBO_DATABASE_URL.",
        detail={"url_scheme": url.split(":", 1)[0]},
    )


__all__ = ["Store", "open_store"]
