"""What every store backend provides. Only a store knows its schema.

Writes arrive as events. A store appends them to `memory_events`, applies each to the `memory_entries` projection
with `projection.apply`, and enqueues embed jobs, all in one transaction. Reads are scoped by an explicit `org_id` on
every method. Above the store nobody sees this protocol: the service factory binds it to one organization
(`store.scoped`) and hands the narrow protocols of `grandbo.ports` to the parts that need them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from pydantic_core import from_json

from grandbo.errors import ConflictError, InvalidInputError, StaleWriteError
from grandbo.figures import EntryFigures
from grandbo.incarnation import Incarnation
from grandbo.model import CorpusStats, EmbeddingSpace, Entry, Event, Listing
from grandbo.ports import (
    Document,
    DocumentLog,
    DocumentWrite,
    EntryVectors,
    Forgetting,
    Idempotency,
    IndexFeed,
    JobState,
    Marks,
    Matching,
    NewEvent,
    NewWork,
    Only,
    Outbox,
    Position,
    RebuildResult,
    Replayed,
    StoredIndex,
    Tally,
    Work,
)
from grandbo.values import text_problem

TermsOf = Callable[[str, str, list[str], list[str], str | None], list[str]]
"""Index terms of an entry (title, body, tags, services) in its organization's declared language (None: the
entry's own, detected): a retrieval concern the store is handed. The store keeps each org's declared
language beside its terms (`set_language`), as a fact of how they were derived, and reads no setting."""

REDERIVE_TERMS = "-- re-derive every entry's stored terms (a step in Python, not SQL)"
"""A migration step that each backend runs in Python: every entry's stored terms are derived again with
the store's `TermsOf` (the tokenizer changed), and where the store's embedding space is the
deterministic provider's, whose vectors are made of those terms, the vectors of the entries whose terms
changed are dropped and queued for embedding again, unembeddable ones too (the worker or `grandbo backfill`
writes them; meanwhile the entries stay stored and found lexically). Every org gets a new epoch, so an index
built from the old terms is thrown away."""

TERMS_DERIVED_VECTORS = "deterministic"
"""The provider whose vectors are a function of the terms."""

REDERIVE_BATCH = 2_000

WRITE_ORDER = (
    "(SELECT max(e.seq) FROM document_events AS e "
    "WHERE e.org_id = d.org_id AND e.collection = d.collection AND e.doc_id = d.doc_id)"
)
"""The order documents (`d`) were written in: the sequence number of each one's newest event, one read of the
(org, collection, doc, seq) index apiece (asked for only where it matters: it costs a listing a fifth more)."""


def picked(data: Any) -> Any:
    """A document's data as a read of some of its keys returns it: the keys set, those absent or null left out
    (each backend selects them as an object of every key asked for); data that is not an object, whole."""
    return {key: value for key, value in data.items() if value is not None} if isinstance(data, dict) else data


# Every table holding an organization's rows, in the order dropping an org deletes them (SQLite's log_erasures
# aside: its row never outlives the erasure's transaction). Not postgres/migrations.py's _MIGRATION_1_TABLES,
# the four tables migration 1 created and put under row-level security; later migrations added the rest.
ORG_TABLES = ("pending_work", "index_images", "idempotency_keys", "document_events", "documents", "embed_outbox",
              "entry_vectors", "memory_entries", "memory_events", "orgs")  # fmt: skip
DROPPED = "org_dropped:"  # + org id: a `store_meta` key valued with the time the org was last dropped
DROPS_KEPT_S = 3600  # how long a drop is remembered (an org created again under the name waits for key caches)
# The documents that let a caller in as an organization (its API keys, its webhooks' signing secrets: the
# collections `tiers.keys` names): the first of its rows a drop deletes.
CREDENTIALS = ("api_key", "webhook_secret")


def stored_index(row: Sequence[Any] | None) -> StoredIndex | None:
    """An org's index image from its `index_images` row (epoch, language, provider, model, dimension, entry_seq,
    vector_seq, data[, where its vectors start]), as both backends read it; None for no row."""
    if row is None:
        return None
    epoch, language, provider, model, dimension, entry_seq, vector_seq, data, *vectors_at = row
    space = EmbeddingSpace(provider=provider, model=model, dimension=dimension) if provider else None
    marks = Marks(entry_seq, vector_seq, 0, epoch, space, language)
    return StoredIndex(marks, bytes(data), vectors_at[0] if vectors_at else None)


def loads_json(text: str | bytes) -> Any:
    """A JSON column, parsed by pydantic-core (Rust: five times faster than json.loads on the short lists an
    entry row holds, which reading 10,000 entries pays three times each); the standard parser for what it
    refuses (a lone surrogate escaped by an older writer)."""
    try:
        return from_json(text)
    except ValueError:
        return json.loads(text)


def check_documents(writes: Sequence[DocumentWrite]) -> None:
    """Refuse a document both backends could not keep alike (NUL, lone surrogates, absurd nesting)."""
    for write in writes:
        problem = text_problem([write.collection, write.doc_id, write.ref, write.event, write.data, write.logged])
        if problem:
            raise InvalidInputError(
                f"{write.collection} {write.doc_id!r} {problem}.", detail={"collection": write.collection}
            )


def history_data(write: DocumentWrite) -> dict[str, Any] | None:
    """What the document's history records of a write: its `logged` form when it has one, else its data."""
    return write.data if write.logged is None else write.logged


def not_empty(org_id: str, what: str) -> ConflictError:
    """The error of a replay into an organization that holds something already."""
    return ConflictError(
        f"Organization {org_id!r} already holds {what}; an event log replays only into an empty organization. "
        f"Create a new one (`grandbo orgs create NEW`) and import into it.",
        detail={"org_id": org_id},
    )


def document_conflict(org_id: str, write: DocumentWrite, found: int | None) -> ConflictError:
    """The error of a document write whose expected version is not the stored one."""
    if write.expected_version == 0 and found:  # a create whose id is taken: nothing changed "meanwhile"
        return StaleWriteError(
            f"{write.collection} {write.doc_id!r} exists already in org {org_id!r} (version {found}), so it cannot "
            "be created again: use another id for a new one, or read it again and change it.",
            detail={"collection": write.collection, "doc_id": write.doc_id, "version": found},
        )
    return StaleWriteError(
        f"{write.collection} {write.doc_id!r} in org {org_id!r} changed meanwhile (version {found}, "
        f"expected {write.expected_version}); read it again and retry.",
        detail={"collection": write.collection, "doc_id": write.doc_id, "version": found},
    )


# ------------------------------------------------------------------------------------------ the store's protocols
# Each store operation is declared once, in the protocol of its concern below (or, where callers above the store
# name the org themselves, in `grandbo.ports`: `IndexFeed`, `Outbox`). An operation of one org is declared here
# with `org_id` first; its meaning is documented once, on its org-bound form in `ports.OrgEntries` or
# `ports.OrgDocuments`, which `store.scoped` maps it to (its wrappers subclass those ports, so mypy checks them).
# A write of one org takes the `incarnation` of the handle it comes from (None: a caller of the store itself),
# checked in its transaction under the org's writer lock (`grandbo.incarnation`).
# mypy holds `SQLiteStore` and `PostgresStore` to `Store` (the check at the end of each backend's store.py).


class Lifecycle(Protocol):
    """Opening, the embedding space the store was created with, and the schema."""

    url: str
    searches_vectors: bool
    """Whether the store can answer the vector arm itself (`vector_search`, pgvector): for an org whose change
    feed hands up no vectors (its marks carry no space). Otherwise the in-process index computes it from the
    vectors the feed hands up."""

    def initialize(self, space: EmbeddingSpace) -> None: ...
    def switch_space(self, space: EmbeddingSpace, *, every_entry: bool = False) -> int:
        """Record a new active space and enqueue every active entry without a vector in it (every
        active entry with `every_entry`, whose old vectors are dropped); return the count."""
        ...

    def close(self) -> None: ...
    def schema_versions(self) -> list[int]: ...  # applied migration numbers, ascending


class Organizations(Protocol):
    storage_limit_mb: int
    """The most an organization may store, in MiB (`store.sql.storage`; 0: no limit). `open_store` sets it."""
    disk_reserve_mb: int
    """Free space the embedded store's writes that add leave on its disk (`store.sqlite.full`; 0: none)."""

    def ensure_org(self, org_id: str) -> bool: ...  # True: this call made the org
    def orgs(self) -> list[str]: ...
    def org_created(self) -> dict[str, datetime]:
        """Every organization with the time it was created."""
        ...

    def drop_org(self, org_id: str) -> None: ...  # and records when (`since_dropped`) if it had keys (`HAS_KEYS`)
    def incarnation(self, org_id: str) -> int | None:
        """The org's incarnation (`grandbo.incarnation`), None when there is no such org."""

    def erasures(self, org_id: str) -> int: ...  # the org's count of erasures (`grandbo.unerased`); 0: no such org

    def since_dropped(self, org_id: str) -> float | None:
        """Seconds since an org of this name holding API keys was last dropped (recorded as the drop commits), by the
        database's clock, in `store_meta` for about DROPS_KEPT_S; None: no such drop (`HAS_KEYS`)."""

    def stored_bytes(self, org_id: str) -> int:
        """What the org has written to its logs, in bytes, as the storage limit counts it (`store.sql.storage`)."""
        ...

    def language(self, org_id: str) -> str | None: ...
    def set_language(self, org_id: str, language: str | None, incarnation: Incarnation | None = None) -> int:
        """`ports.OrgEntries.set_language`; the org gets a new epoch (its in-memory index is rebuilt from the new
        terms), and other organizations are not touched. Postgres: in one transaction holding the org's writer
        lock, reading the entries in batches. SQLite: the terms worked out from a read, outside the store's lock
        (every org's writes wait for it), then written; read again when the org's terms moved meanwhile, and
        ConflictError after LANGUAGE_ATTEMPTS such races."""
        ...


@dataclass(frozen=True)
class Given:
    """What an append is given beside its events (`ports.OrgEntries.append`): `vectors` of `space` (the store's),
    written instead of enqueuing their entries, the idempotency key, checked first under the org's writer
    lock, and the incarnation of the org the events are for."""

    vectors: EntryVectors = field(default_factory=dict)
    space: EmbeddingSpace | None = None
    idempotency: Idempotency | None = None
    incarnation: Incarnation | None = None


NOTHING_GIVEN = Given()


class EntryStore(Protocol):
    """The write seam's storage (events, projection and outbox in one transaction) and the reads of entries."""

    def append(self, org_id: str, events: Sequence[NewEvent], given: Given = NOTHING_GIVEN) -> list[Entry]:
        """`ports.OrgEntries.append`, with what it is `given` beside the events."""
        ...

    def idempotent(self, org_id: str, key: str) -> Replayed | None: ...
    def rebuild(self, org_id: str, *, replace: bool = False, incarnation: Incarnation | None = None) -> RebuildResult:
        """`ports.OrgEntries.rebuild`, in one transaction: without `replace` nothing is written, so a damaged log
        cannot destroy entries."""
        ...

    def get_many(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, Entry]: ...
    def entries(
        self, org_id: str, *, include_inactive: bool = False, listing: Listing | None = None
    ) -> list[Entry]: ...
    def events(
        self, org_id: str, entry_id: str | None = None, since_seq: int = 0, *, holding: str = "",
        limit: int | None = None,
    ) -> list[Event]:  # fmt: skip
        """The org's events after `since_seq` in order, at most `limit`; with `holding` (ASCII, no i, k or s: a run of
        a text, `tiers.erasure._probe`) only those whose stored payload holds it in any case (a filter, not a match)."""
        ...

    def examples(self, org_id: str, content_type: str, limit: int) -> list[Entry]:
        """The newest active entries of kind `example` whose meta.content_type, trimmed and its ASCII letters
        lowercased, is `content_type` (given folded: `words.folded_content_type`)."""
        ...

    def runbooks(self, org_id: str, runbook_id: str, limit: int) -> tuple[bool, list[str]]:
        """Whether an entry of the org (any status) cites `runbook_id` in its meta.runbook_id (a string); when none
        does, up to about `limit` ids of runbook entries and as many of runbooks entries cite, for a hint (the
        neighbours of `runbook_id` and a sample: `sql.entries.runbooks_read`). Read from indexes
        (migration 23), whatever the org's size: a mistyped outcome read every entry of the org (probe 17)."""
        ...

    def corpus_stats(self, org_id: str, max_attempts: int) -> CorpusStats: ...
    def unembeddable_jobs(self, org_id: str) -> int:
        """How many of the org's embed jobs are settled unembeddable: sought by migration 28's index of those
        alone (none in steady state), whatever the org's backlog (`ports.OrgEntries.unembeddable`)."""
        ...

    def entry_figures(
        self, org_id: str, linked: Sequence[str], since: int | None = None
    ) -> EntryFigures | None: ...  # `ports.OrgEntries.figures`
    def embed_jobs(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, JobState]: ...
    def vectors(self, org_id: str, entry_ids: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]: ...
    def consistent_read(self, org_id: str) -> AbstractContextManager[None]: ...
    def purge_many(
        self, org_id: str, entry_ids: Sequence[str], reason: str, actor: str, incarnation: Incarnation | None = None
    ) -> list[str]: ...  # batched
    def purge(
        self, org_id: str, entry_id: str, reason: str, actor: str, incarnation: Incarnation | None = None
    ) -> Entry:
        """`ports.OrgEntries.purge`: the text erased from every event that holds it (inside an erasure), and from the
        copies of it in documents (recorded in `erased.ERASURES` when there were any); the org's index image is
        deleted (it held the entry's words) and its epoch kept: an index in memory applies the purged row as any
        other change, and no image of an index made before the purge is saved after it (`NONE_PURGED_SINCE`)."""
        ...


class DocumentStore(Protocol):
    """Documents (`ports.OrgDocuments`): every write is also appended to `document_events`, in one transaction."""

    def put_documents(
        self, org_id: str, writes: Sequence[DocumentWrite], actor: str, work: Sequence[NewWork] = (),
        incarnation: Incarnation | None = None, done: Sequence[Work] = (),
    ) -> list[Document]:  # fmt: skip
        """Write the documents, record `work` (the write-behinds the write acknowledges) and delete the leased work
        `done` (what the write completes) in one transaction; WorkDoneError, nothing written, when any of `done` is
        gone (another runner completed it first)."""
        ...

    def get_document(self, org_id: str, collection: str, doc_id: str) -> Document | None: ...
    def find_documents(
        self, org_id: str, collection: str, refs: Only = None, *, ids: Only = None, by_write: bool = False,
        keys: Only = None, after: int | None = None,
    ) -> list[Document]: ...  # fmt: skip
    def oldest_documents(
        self, org_id: str, collection: str, before: datetime, limit: int, *, after: Position = None, keys: Only = None
    ) -> list[Document]: ...
    def newest_documents(
        self, org_id: str, collection: str, limit: int, *, before: Position = None, since: datetime | None = None,
        refs: Only = None, match: Matching | None = None, keys: Only = None,
    ) -> list[Document]: ...  # fmt: skip
    def ranged_documents(
        self, org_id: str, collection: str, low: str | None, high: str | None, limit: int, *,
        after: tuple[str, str] | None = None, descending: bool = False, match: Matching | None = None,
        keys: Only = None,
    ) -> list[Document]: ...  # fmt: skip
    def document_history(self, org_id: str, collection: str, doc_id: str) -> list[dict[str, Any]]: ...
    def reading_documents(self, org_id: str) -> AbstractContextManager[None]: ...  # `OrgDocuments.reading`
    def documents_version(self, org_id: str, collections: Sequence[str] | None = None) -> int: ...
    def documents_stamp(self, org_id: str, collections: Sequence[str]) -> tuple[int | None, list[int]]: ...
    def count_documents(self, org_id: str, collection: str, most: int) -> int: ...
    def tally_documents(  # `OrgDocuments.tally`
        self, org_id: str, collection: str, by: Sequence[Sequence[str]], match: Matching,
        values: Sequence[Sequence[str]], refs: Only = None,
    ) -> Tally: ...  # fmt: skip
    def changed_documents(
        self, org_id: str, collection: str, after: int, limit: int | None = None
    ) -> tuple[list[Document], list[str]] | None: ...
    def document_log(self, org_id: str) -> DocumentLog: ...
    def document_pages(self, org_id: str, holding: str, limit: int) -> Iterator[DocumentLog]: ...  # `pages`
    def load_documents(  # `OrgDocuments.load`; ConflictError: held any
        self, org_id: str, log: DocumentLog, incarnation: Incarnation | None = None
    ) -> int: ...

    def erase_document_text(
        self, org_id: str, pattern: re.Pattern[str], audit: DocumentWrite, actor: str, *, only_if_found: bool = False,
        sieve: bool = False, holding: str = "", incarnation: Incarnation | None = None,
        forget: Forgetting | None = None, work: Sequence[NewWork] = (),
    ) -> tuple[int, int]:  # fmt: skip
        """`ports.OrgDocuments.erase`, the text given as its `erasure_pattern`; the old bytes are freed. `sieve`: the
        text has no character JSON escapes: a row whose JSON text `pattern` finds nothing in holds none of it and is
        not decoded (`erased.sieves`); `holding`: only rows that may hold it are read (`pages`)."""
        ...


class EmbedQueue(Outbox, Protocol):
    """The embed outbox: `ports.Outbox` (the worker's side) and the counts and repairs of every org's jobs."""

    def outbox_depth(self) -> int:
        """Embed jobs waiting in every organization (pending and failed)."""
        ...

    def readiness(self, counted: bool = True, max_attempts: int = 5) -> tuple[int, int, int]:
        """The newest migration, the jobs waiting and those failed (`max_attempts` used; 0, 0 unless `counted`), in
        one query: what `/readyz` reports. Asked without a key, its cost never grows with the number of orgs."""
        ...

    def retry_failed(self, org_id: str | None = None) -> int:
        """Make every job waiting claimable now: failed, waiting for its retry time, leased (the worker's failure or
        give-back then has no effect, `ports.Outbox.fail_jobs`), or given back while its org was busy (Postgres,
        `BUSY_RETRY_S`: a backfill right after an import left those pending); not the unembeddable. How many."""
        ...

    def requeue_unembeddable(self) -> int:
        """Make the unembeddable jobs claimable again, for a new provider (`reembed`); return how many."""
        ...

    def enqueue_missing(self, org_id: str | None = None) -> int:
        """Enqueue every active entry without a current vector in the active space; return how many."""
        ...


class Backup(Protocol):
    """Backup and restore of the whole store (every organization)."""

    def backup(self, destination: Path) -> None:
        """Write a consistent copy of the whole store to `destination`, checked before it is called done."""
        ...

    def restore(self, source: Path) -> Path | None:
        """Replace the whole store with a backup, after checking the file is one; a failed restore changes
        nothing. Returns where a copy of the replaced store is kept, if one is (the embedded store's)."""
        ...


class PendingWork(Protocol):
    """Write-behinds (ports.PendingWork) recorded by `put_documents`, re-driven until done."""

    lease_beat_seconds: float
    """A claim leases for `beats.BEATS` of these, renewed every one while held (`store.sql.beats`). `open_store`
    sets it (GRANDBO_WRITE_BEHIND_HEARTBEAT_SECONDS)."""

    def beat_work(self) -> int:
        """Renew now the leases this process holds (its heartbeat thread does it every beat); how many."""
        ...

    def claim_work(self, limit: int, max_attempts: int, lease_seconds: float) -> list[Work]:
        """Lease up to `limit` ready pieces of work (not leased, due, under `max_attempts` failures), dealt
        round-robin across the orgs (`store.queue`)."""
        ...

    def claim_work_of(
        self, org_id: str, kind: str, subjects: Sequence[str], max_attempts: int, lease_seconds: float
    ) -> list[Work]:
        """Lease the org's work of `kind` on any of `subjects`, due or not; none of what another runner holds."""
        ...

    def work_holders(self) -> list[tuple[str, str]]:
        """(org, holder) of every lease not run out, every org's: the holder as `store.sql.holders` recorded it."""
        ...

    def free_work_held_by(self, org_id: str, holder: str, error: str, retry_seconds: float) -> list[Work]:
        """Free the org's leases `holder` (a process proved gone) holds, each a failed attempt with `error`, due after
        `pending_work.lost_delay`: the work freed, attempts as now counted (a lease run out: by the claim taking it)."""
        ...

    def complete_work(self, work: Sequence[Work]) -> None: ...
    def release_work(self, work: Sequence[Work]) -> None:
        """Give leased work back, no attempt counted: any runner may take it when it is due."""
        ...

    def fail_work(self, work: Sequence[Work], error: str, retry_at: datetime) -> None:
        """Count a failed attempt and make the work due again at `retry_at`."""
        ...

    def work_counts(self, max_attempts: int) -> tuple[int, int]:
        """(waiting, failed) in every org, in one statement; failed: gave up after `max_attempts`."""
        ...

    def org_work_counts(self, org_id: str, max_attempts: int) -> tuple[int, int]: ...
    def retry_failed_work(self, org_id: str | None = None) -> int:
        """Give failed work (and work waiting for a retry) back to the runners, due now; how many."""
        ...


class Store(Lifecycle, Organizations, EntryStore, DocumentStore, IndexFeed, EmbedQueue, Backup, PendingWork, Protocol):
    """A durable home for every organization's memory: every concern's protocol. A new concern is one more
    protocol here; a new operation, one more method in its concern's protocol."""
