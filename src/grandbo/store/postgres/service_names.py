"""Migration 30's step on Postgres (`store/sql/service_names.py`): every stored service name normalized, org by org
under row-level security (it holds the migrator too), in this transaction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import structlog

from grandbo.model import EmbeddingSpace
from grandbo.store.base import TermsOf
from grandbo.store.postgres.dialect import NEW_EPOCH, PARAM, SET_ORG, jsonb
from grandbo.store.postgres.unembeddable import requeue_entries
from grandbo.store.sql.service_names import (
    EntryUpdate,
    normalize_documents,
    normalize_entries,
    read_documents,
    read_entries,
    rename_service,
)

log = structlog.get_logger(__name__)

_WHERE = "WHERE org_id = %s AND collection = %s AND doc_id = %s"
_ENTRIES_UPDATE = (
    "UPDATE memory_entries e SET services = u.services, terms = u.terms, content_hash = u.content_hash "
    "FROM unnest(%s::text[], %s::jsonb[], %s::text[], %s::text[]) AS u(entry_id, services, terms, content_hash) "
    "WHERE e.org_id = %s AND e.entry_id = u.entry_id"
)


def normalize_service_names(
    conn: psycopg.Connection[Any],
    terms_of: TermsOf,
    enqueue_missing: Callable[[psycopg.Connection[Any], str, EmbeddingSpace], int],
) -> None:
    """Migration step NORMALIZE_SERVICE_NAMES: each org's entries (their vectors dropped and queued again) and
    documents; then every org a new epoch (what processes built from the old rows is built again)."""
    meta = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
    space = (
        EmbeddingSpace(provider=meta["provider"], model=meta["model"], dimension=int(meta["dimension"]))
        if "provider" in meta
        else None
    )
    entries = documents = queued = 0
    for org_id, language in conn.execute("SELECT org_id, language FROM orgs ORDER BY org_id").fetchall():
        conn.execute(SET_ORG, (org_id,))
        changed = _entries(conn, org_id, terms_of, language)
        if changed:  # the text their vectors embedded changed: embedded again
            conn.execute("DELETE FROM entry_vectors WHERE org_id = %s AND entry_id = ANY(%s)", (org_id, changed))
            requeue_entries(conn, org_id, changed)
            queued += enqueue_missing(conn, org_id, space) if space is not None else 0
        entries += len(changed)
        documents += _documents(conn, org_id)
    conn.execute("SELECT set_config('grandbo.org_id', '', true)")
    conn.execute(NEW_EPOCH)
    log.info("store.service_names_normalized", entries=entries, documents=documents, embed_jobs=queued)


def _entries(conn: psycopg.Connection[Any], org_id: str, terms_of: TermsOf, language: str | None) -> list[str]:
    def write(due: Sequence[EntryUpdate]) -> None:
        ids, names, terms, digests = zip(*due, strict=True)  # one statement a batch (`normalize_entries`: not empty)
        conn.execute(_ENTRIES_UPDATE, (list(ids), [jsonb(n) for n in names], list(terms), list(digests), org_id))

    return normalize_entries(
        lambda after: conn.execute(read_entries(PARAM), (org_id, after)).fetchall(),
        write,
        lambda title, body, tags, names: " ".join(terms_of(title, body, tags, names, language)),
        lambda value: value,  # jsonb comes parsed
    )


def _documents(conn: psycopg.Connection[Any], org_id: str) -> int:
    return normalize_documents(
        lambda collection, after: conn.execute(read_documents(PARAM), (org_id, collection, after)).fetchall(),
        lambda collection, due: conn.cursor().executemany(
            f"UPDATE documents SET data = %s {_WHERE}",
            [(jsonb(data), org_id, collection, doc_id) for data, doc_id in due],
        ),
        lambda doc_id, data: rename_service(conn, PARAM, jsonb, lambda value: value, org_id, doc_id, data),
        lambda value: value,
    )
