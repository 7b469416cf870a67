"""Stores: where memory lives. `open_store` picks the backend from the URL."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from grandbo.errors import ConfigError
from grandbo.store.base import Store, TermsOf
from grandbo.urls import mask_url

if TYPE_CHECKING:
    from grandbo.config import Settings


def open_store(url: str, terms_of: TermsOf, settings: Settings | None = None) -> Store:
    """Open (and migrate) the store at `url`, with `settings`' limit on what an org stores (`_open`)."""
    store = _open(url, terms_of, settings)
    store.storage_limit_mb = settings.org_storage_limit_mb if settings is not None else 0
    store.disk_reserve_mb = settings.disk_reserve_mb if settings is not None else 0
    if settings is not None:
        store.lease_beat_seconds = settings.write_behind_heartbeat_seconds
    return store


def _open(url: str, terms_of: TermsOf, settings: Settings | None) -> Store:
    """Open (and migrate) the store at `url`: sqlite:///path/to.db or postgresql://...

    `terms_of` derives the terms the lexical arm indexes for an entry; the store keeps them with the
    entry's row but leaves their making to retrieval.
    """
    if url.startswith("sqlite:///"):
        from grandbo.store.sqlite.store import SQLiteStore

        path = Path(url.removeprefix("sqlite:///")).expanduser()
        if settings is not None and settings.migrate_database_url:  # `grandbo migrate` made and migrated this file
            raise ConfigError(
                "GRANDBO_MIGRATE_DATABASE_URL is set, which only a Postgres store uses, but GRANDBO_DATABASE_URL "
                f"names none: this would open the embedded store {path}. Set GRANDBO_DATABASE_URL to the runtime "
                "role's postgresql://... URL (README, 'Postgres'), or unset GRANDBO_MIGRATE_DATABASE_URL.",
                detail={"url": url},
            )
        return SQLiteStore(path, terms_of, synchronous=settings.sqlite_synchronous if settings else "FULL")
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from grandbo.store.postgres.store import PostgresStore
        except ImportError as error:
            raise ConfigError(
                f"The Postgres store needs psycopg and pgvector: pip install 'grandbo[postgres]' ({error}).",
                detail={"missing": error.name},
            ) from error
        if settings is None:
            return PostgresStore(url, terms_of)
        return PostgresStore(
            url,
            terms_of,
            pool_size=settings.pg_pool_size,
            hnsw_threshold=settings.hnsw_threshold,
            ef_search=settings.hnsw_ef_search,
            hnsw_build_memory=settings.hnsw_build_memory,
            hnsw_m=settings.hnsw_m,
            hnsw_ef_construction=settings.hnsw_ef_construction,
            migrate_url=settings.migrate_database_url,
            backup_url=settings.backup_database_url,
            pg_bin_dir=settings.pg_bin_dir,
            connect_timeout=settings.store_timeout_seconds,
        )
    raise ConfigError(
        f"Unsupported store URL {mask_url(url).split('@')[-1]!r}: use sqlite:///path/to/grandbo.db or "
        "postgresql://user:password@host/db in GRANDBO_DATABASE_URL.",
        detail={"url_scheme": url.split(":", 1)[0]},
    )


__all__ = ["Store", "TermsOf", "open_store"]
