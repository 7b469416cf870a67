"""The production store: Postgres with pgvector.

Every method names its organization and runs in a transaction that first sets `grandbo.org_id`;
row-level security (FORCEd, so the owning role is held to it too) is the second wall behind the
explicit `WHERE org_id = ...`. The vector arm runs in SQL (pgvector, exact or HNSW); the lexical arm
runs in process, in the search index above the store, over the rows this store's change feed hands up.

`PostgresStore` is composed of one mixin per concern, each in its own module of this package, the way
Django splits a database backend:

    connection.py  PostgresConnection: roles, the pool, the org-scoped transaction (the base of every mixin)
    dialect.py     what this backend's SQL says differently: placeholders, upserts, row locks, pgvector
    schema.py      migrations (the statements are migrations.py's), grants, the schema check
    orgs.py        organizations, their language, the embedding space
    entries.py     the event log and the projection; rows.py the entry row, steps.py the bulk write (COPY)
    feed.py        the change feed and the search index's saved images
    vectors.py     the vector arm; hnsw.py each large org's HNSW index
    documents.py   documents and their log
    outbox.py      the embed outbox; unembeddable.py the jobs settled as unembeddable (an all-zero vector)
    erasure.py     purging an entry; backup.py pg_dump and pg_restore
"""

from __future__ import annotations

from grandbo.ports import VectorSearch
from grandbo.store.base import Store
from grandbo.store.postgres.backup import BackupMixin
from grandbo.store.postgres.connection import PostgresConnection
from grandbo.store.postgres.documents import DocumentsMixin
from grandbo.store.postgres.entries import EntriesMixin
from grandbo.store.postgres.erasure import ErasureMixin
from grandbo.store.postgres.feed import FeedMixin
from grandbo.store.postgres.hnsw import VectorIndexMixin
from grandbo.store.postgres.orgs import OrgsMixin
from grandbo.store.postgres.outbox import OutboxMixin
from grandbo.store.postgres.pending import PendingWorkMixin
from grandbo.store.postgres.schema import SchemaMixin
from grandbo.store.postgres.unembeddable import UnembeddableMixin
from grandbo.store.postgres.vectors import VectorsMixin


class PostgresStore(
    BackupMixin,
    ErasureMixin,
    OutboxMixin,
    UnembeddableMixin,
    DocumentsMixin,
    VectorIndexMixin,
    VectorsMixin,
    FeedMixin,
    EntriesMixin,
    OrgsMixin,
    SchemaMixin,
    PendingWorkMixin,
    PostgresConnection,
):
    """Every organization's memory in one Postgres database with pgvector."""

    searches_vectors = True  # pgvector answers the vector arm of an org large enough for its HNSW index (`marks`)


_SATISFIES: type[Store] = PostgresStore  # mypy holds the class to every concern's protocol (`store.base.Store`)
_SEARCHES: type[VectorSearch] = PostgresStore  # and to the vector arm's, which `Grandbo.org` casts it to
