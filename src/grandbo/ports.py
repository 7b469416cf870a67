"""What the store hands up, and the narrow protocols each caller above it uses.

The store is the bottom layer: it persists and answers queries. Nothing above it imports `grandbo.store`;
each part receives an object that satisfies one of these protocols, made by the service factory:

* the org-bound handle gets `OrgEntries` (the write seam's log and projection) and tiers get
  `OrgDocuments`, both already bound to one organization, so no call above the store names an org;
* the in-process search index (`retrieval.keeper`) reads `IndexFeed`, the change feed since a watermark;
* a store that searches vectors itself (Postgres + pgvector) also offers `VectorSearch`;
* the embed worker drains the `Outbox`; the write-behind runner (`grandbo.redrive`) drains `PendingWork`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from grandbo.embed_jobs import LOST as LOST
from grandbo.embed_jobs import LOST_AGAIN as LOST_AGAIN
from grandbo.embed_jobs import UNEMBEDDABLE as UNEMBEDDABLE  # the outbox's records, named here too
from grandbo.embed_jobs import EmbedJob as EmbedJob
from grandbo.embed_jobs import EmbedResult as EmbedResult
from grandbo.embed_jobs import JobState as JobState
from grandbo.embed_jobs import Outbox as Outbox  # the embed jobs of every org: their port is with their records
from grandbo.figures import EntryFigures as EntryFigures  # what an org's entries add up to, named here too
from grandbo.model import CorpusStats, EmbeddingSpace, Entry, Event, EventType
from grandbo.model import Listing as Listing  # a page of entries, named here too
from grandbo.pending_work import NewWork as NewWork  # the write-behinds' records, named here too
from grandbo.pending_work import OrgWork as OrgWork
from grandbo.pending_work import PendingWork as PendingWork
from grandbo.pending_work import Work as Work

# Both arms break ties by entry id, as the Postgres store's ORDER BY does, comparing scores rounded to
# these digits (BM25 to 1e-9, cosine to 1e-6): the two backends add the same numbers in different orders.
LEXICAL_TIE_DIGITS = 9
VECTOR_TIE_DIGITS = 6

Only: TypeAlias = Sequence[str] | None
"""A selection by name: only these refs, ids or keys (`OrgDocuments.find`); None: all of them."""
EntryVectors: TypeAlias = Mapping[str, npt.NDArray[np.float32]]
"""Vectors by entry id (`OrgEntries.append`)."""
Matching: TypeAlias = Mapping[tuple[str, ...], str | None]
"""Documents whose `data` holds each value at its path, None: no value there (`OrgDocuments.newest`)."""
Matrix: TypeAlias = npt.NDArray[np.float32]
Position: TypeAlias = tuple[datetime, str] | None
"""Where a page of documents in write order goes on: the write time and id of the last one a caller has."""
# What an erasure deletes with their history besides what it rewrites (`OrgDocuments.erase`): (collection, id)s, given
Forgetting: TypeAlias = Callable[[str, Any, Any], Iterable[tuple[str, str]]]  # a record: collection, before, after

# ---------------------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Idempotency:
    """A client's idempotency key for one write and the hash of the request it first came with."""

    key: str
    request_hash: str


class Replayed(Exception):
    """Raised by `append` when its idempotency key was recorded by an earlier write (committed, maybe by a
    concurrent request): nothing was written; `entry_ids` are that write's entries."""

    def __init__(self, entry_ids: list[str], request_hash: str) -> None:
        super().__init__(entry_ids)
        self.entry_ids, self.request_hash = entry_ids, request_hash


@dataclass(frozen=True, slots=True)
class RebuildResult:
    """What recomputing an org's projection from its log found, and whether the projection was replaced."""

    entries: int = 0  # entries the log yields
    missing: list[str] = field(default_factory=list)  # in the log, not in the projection
    extra: list[str] = field(default_factory=list)  # in the projection, not in the log (a damaged log?)
    changed: list[str] = field(default_factory=list)  # in both, different
    replaced: bool = False

    @property
    def identical(self) -> bool:
        return not (self.missing or self.extra or self.changed)


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event before the log gives it a sequence number."""

    entry_id: str
    type: EventType
    payload: dict[str, Any]
    actor: str
    at: datetime


@dataclass(slots=True)  # read-only; not frozen, whose __init__ costs 4x (hundreds per recall)
class LexicalHit:
    entry_id: str
    score: float
    terms: Mapping[str, float] = field(default_factory=dict)
    coverage: float = 1.0


@dataclass(slots=True)  # read-only; not frozen, whose __init__ costs 4x (hundreds per recall)
class VectorHit:
    entry_id: str
    similarity: float


@dataclass(frozen=True, slots=True)
class Document:
    """A mutable record beside the memory entries: an incident, a service, an outcome, a setting."""

    collection: str
    doc_id: str
    ref: str | None
    data: dict[str, Any]
    version: int
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class DocumentWrite:
    """Put (or, with `data` None, delete) one document; `expected_version` guards against lost updates."""

    collection: str
    doc_id: str
    data: dict[str, Any] | None
    event: str
    ref: str | None = None
    expected_version: int | None = None
    # what the document's history records of this write instead of `data` (what it changed; a webhook secret's
    # count, not the secrets); None: `data` itself
    logged: dict[str, Any] | None = None
    secret: bool = False  # it replaces a secret: no copy of the old one may stay in the store's files
    essential: bool = False  # never refused for the org's storage limit (a key revoked, a secret rotated)


@dataclass(frozen=True, slots=True)
class DocumentEvent:
    """One event of the document log: a put (with its data) or a delete (data None)."""

    collection: str
    doc_id: str
    type: str
    data: dict[str, Any] | None
    actor: str
    at: datetime


@dataclass(frozen=True, slots=True)
class DocumentLog:
    """An organization's whole document log and the documents it yields, as one snapshot."""

    events: list[DocumentEvent]
    documents: list[Document]


@dataclass(frozen=True, slots=True)
class Marks:
    """Where an organization's data stands, read in one snapshot: the index is fresh when they agree."""

    entry_seq: int  # the highest event sequence applied to the projection
    vector_seq: int  # the highest vector write
    documents_seq: int  # the highest document event
    epoch: int | None  # changes when the org is dropped, rebuilt, its vectors dropped or its language set
    space: EmbeddingSpace | None  # the store's active embedding space
    language: str | None = None  # the language the org's terms are derived in (None: detected per entry)
    incarnation: int | None = None  # the org's (`grandbo.incarnation`; None: no such org): what a recall confirms


@dataclass(frozen=True, slots=True)
class IndexRow:
    """One projection row as the search index needs it."""

    entry_id: str
    active: bool
    terms: str  # the index terms, space-separated (derived by the function the store was given)
    content_hash: str


@dataclass(frozen=True, slots=True)
class StoredIndex:
    """An image of an organization's search index kept in the store (`IndexFeed.save_index`): `data` as the
    index wrote it, at the watermarks `marks` (its entry and vector sequences, epoch, language and space; the
    space None where the index holds no vectors). Its first `vectors_at` bytes are an image without the vectors."""

    marks: Marks
    data: bytes
    vectors_at: int | None = None  # None: the whole image (no vectors, or not told)


class OrgEntries(Protocol):
    """One organization's entries: the event log, its projection and the embed jobs of its entries."""

    @property
    def org(self) -> str: ...

    def space(self) -> EmbeddingSpace | None: ...

    def append(
        self, events: Sequence[NewEvent], vectors: EntryVectors | None = None, idempotency: Idempotency | None = None
    ) -> list[Entry]:
        """Append events, apply them to the projection and enqueue embedding in one transaction; return the
        entries they touched. `vectors` (of the store's space) are written instead of enqueuing their entries.
        With `idempotency`, the key is recorded in the same transaction; a key recorded before raises
        `Replayed` and writes nothing."""
        ...

    def idempotent(self, key: str) -> Replayed | None: ...  # the earlier write recorded under the key, or None
    def get_many(self, entry_ids: Sequence[str]) -> dict[str, Entry]: ...
    def entries(self, *, include_inactive: bool = False, listing: Listing | None = None) -> list[Entry]: ...
    def events(
        self, entry_id: str | None = None, since_seq: int = 0, *, holding: str = "", limit: int | None = None
    ) -> list[Event]: ...
    def examples(self, content_type: str, limit: int) -> list[Entry]: ...
    def runbooks(self, runbook_id: str, limit: int) -> tuple[bool, list[str]]: ...  # Store.runbooks
    def stats(self, max_attempts: int) -> CorpusStats: ...
    def stored(self) -> tuple[int, int | None]: ...  # the org's stored bytes and its limit (None: no limit), one read
    def unembeddable(self) -> int:
        """The org's embed jobs settled unembeddable (entries that never get a vector): what an empty recall's note
        needs beside the index's counts, without `stats`' join of every active entry with its vector, nor a read
        of every queued job (`Store.unembeddable_jobs`)."""
        ...

    def figures(self, linked: Sequence[str], since: int | None = None) -> EntryFigures | None:
        """What the org's entries add up to (`figures.EntryFigures`), counted by the store; `linked`: the incidents
        to pair with the services whose entries tell them. None when no event shaped an entry after `since`."""
        ...

    def jobs(self, entry_ids: Sequence[str]) -> dict[str, JobState]: ...  # their outbox jobs, pending or failed

    def vectors(self, entry_ids: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        """The current vectors (active space, current text) of those entries that have one."""
        ...

    def rebuild(self, *, replace: bool = False) -> RebuildResult:
        """Recompute the projection from the log and compare; replace it only when asked (`replace`)."""
        ...

    def retry_failed(self) -> int: ...
    def enqueue_missing(self) -> int: ...
    def purge_many(self, entry_ids: Sequence[str], reason: str, actor: str) -> list[str]: ...  # `Store.purge_many`
    def consistent_read(self) -> AbstractContextManager[None]:
        """Within (on this thread): every read of the store, of entries and documents alike, sees one snapshot
        (an export cannot be torn by a concurrent write). Reads only."""
        ...

    def language(self) -> str | None:
        """The language the org's terms are derived in (None: each entry's own, detected)."""
        ...

    def set_language(self, language: str | None) -> int:
        """Derive every entry's terms again in `language` (None: detection) for every write from now on, written in
        one transaction; return how many changed. ConflictError: rewritten meanwhile time after time (embedded)."""
        ...

    def purge(self, entry_id: str, reason: str, actor: str) -> Entry:
        """Erase an entry's text: redact it in every event of the log, drop its vector and embed job, mark the
        projection row purged (not active), and log the purge itself (actor, reason); one transaction."""
        ...


class Tally(NamedTuple):
    """What `OrgDocuments.tally` counts and reads."""

    groups: list[tuple[Any, ...]]  # the `by` values, then how many documents hold them
    rows: list[tuple[Any, ...]]  # the id and `values` of each that matches
    odd: list[Document]  # the odd outcomes among them, whole, by id (in no group or row above)


class OrgDocuments(Protocol):
    """One organization's documents: JSON records with a version and an append-only history."""

    def get(self, collection: str, doc_id: str) -> Document | None: ...
    def find(
        self, collection: str, refs: Only = None, *, ids: Only = None, by_write: bool = False, keys: Only = None,
        after: int | None = None,
    ) -> list[Document]:  # fmt: skip
        """Documents of a collection (only those of a `ref` in `refs`, an id in `ids`, written after sequence number
        `after`: `history`'s seq), by id or, `by_write`, in write order (each one's newest write's seq, no process's
        clock). With `keys`, data holds only those top-level keys that are set (non-object data comes whole)."""
        ...

    def oldest(
        self, collection: str, before: datetime, limit: int, *, after: Position = None, keys: Only = None
    ) -> list[Document]:
        """Up to `limit` documents of a collection last written before `before`, least recently written first (then by
        id), past `after` (a page's last write time and id); `keys` as for `find`. Read on an index of write times."""
        ...

    def newest(
        self, collection: str, limit: int, *, before: Position = None, since: datetime | None = None,
        refs: Only = None, match: Matching | None = None, keys: Only = None,
    ) -> list[Document]:  # fmt: skip
        """Up to `limit` documents of a collection, most recently written first (then by id, descending), before
        `before` (a page's last write time and id), written at or after `since`, of a `ref` in `refs`, holding each
        value of `match` at its path; `keys` as for `find`. Only those read (an index of write times, or a value's)."""
        ...

    def ranged(
        self, collection: str, low: str | None, high: str | None, limit: int, *, after: tuple[str, str] | None = None,
        descending: bool = False, match: Matching | None = None, keys: Only = None,
    ) -> list[Document]:  # fmt: skip
        """Up to `limit` documents of a collection whose `ref` is between `low` and `high` (inclusive; None: open)
        and whose data holds each value of `match` at its path, in `ref` order (then by id; `descending`: the
        greatest first), past `after` (the ref and id of the last one a caller has: to page on). For a collection
        whose ref sorts as its documents should (a time spelled in fixed-width digits): the store reads only the
        documents it returns (the index on ref). `keys` as for `find`."""
        ...

    def put(
        self, writes: Sequence[DocumentWrite], actor: str, work: Sequence[NewWork] = (), done: Sequence[Work] = ()
    ) -> list[Document]:
        """Write, record `work` and complete the leased `done` in one transaction (`DocumentStore.put_documents`)."""
        ...

    def history(self, collection: str, doc_id: str) -> list[dict[str, Any]]: ...
    def version(self, collections: Sequence[str] | None = None) -> int:
        """A number that grows with every document write of the org (with `collections`: to those only)."""
        ...

    def stamp(self, collections: Sequence[str]) -> tuple[int | None, list[int]]:
        """The org's epoch and each collection's version, read at once: a cache of their documents is fresh while
        the stamp is the same (versions only grow; a dropped org created again, by any process, gets a new epoch)."""
        ...

    def reading(self) -> AbstractContextManager[None]:
        """Within (this thread): the reads of documents share one read-only transaction where the store has one to
        share (Postgres: the org set and the schema checked once; embedded: nothing), and so do a recall's reads of
        the org's entries, vectors and embed jobs (`Recall`). Each sees every prior commit. No writes within: a write
        there takes a second connection of the pool while the block holds one. Nor long work on what is read: make
        objects of many documents after the block, once its connection is back in the pool
        (`tiers.operations.Snapshots`)."""
        ...

    def count(self, collection: str, most: int) -> int:
        """How many documents `collection` holds, counted no further than `most` (an index read, no document)."""
        ...

    def changed(self, collection: str, after: int, limit: int | None = None) -> tuple[list[Document], list[str]] | None:
        """The documents of a collection written after version `after`, as they are now, and the ids of those deleted
        since (to bring a cache of them up to date without reading them all); None past `limit` writes (none read)."""
        ...

    def tally(
        self, collection: str, by: Sequence[Sequence[str]], match: Matching, values: Sequence[Sequence[str]],
        refs: Only = None,
    ) -> Tally:  # fmt: skip
        """In one read, none parsed: the documents counted by their values at the `by` paths (rows, then the count), and
        the id and `values` of those holding each of `match`; the odd outcomes among them (`store.sql.odd_outcomes`:
        their model may not read them as stored) in neither, handed up whole for it to read. A value: its JSON's text
        (SQLite: a number as one), None where absent. `refs`: only those of a ref among them (its index). The ledger
        grouped in the database."""
        ...

    def log(self) -> DocumentLog: ...  # every document event of the org (oldest first), every document: an export
    def pages(self, holding: str, limit: int) -> Iterator[DocumentLog]: ...  # `log` a page a read (SharedDocuments)

    def erase(
        self, text: str, audit: DocumentWrite, actor: str, *, exact: bool = False, only_if_found: bool = False,
        forget: Forgetting | None = None, work: Sequence[NewWork] = (),
    ) -> tuple[int, int]:  # fmt: skip
        """Erase `text` (in any case unless `exact`) from every document and event of their history ("[purged]"),
        recording `audit` and `work`, in one transaction (`only_if_found`: none if not found), deleting there too the
        documents `forget` names for a record rewritten, with their history; (docs rewritten or gone, events)."""
        ...

    def load(self, log: DocumentLog) -> int:
        """Replay an exported document log into this org, which must hold no documents yet; return the
        number of events loaded. Events keep their time and actor; documents their version and ref."""
        ...


class FeedSnapshot(Protocol):
    """An organization's rows as of one consistent snapshot of the store."""

    marks: Marks
    # the org's embed jobs, counted with the marks by a store that searches its vectors (None: not counted)
    backlog: int | None

    def rows(self, after_seq: int, *, active_only: bool) -> Iterable[IndexRow]:
        """Projection rows changed after `after_seq` (up to `marks.entry_seq`), in sequence order."""
        ...

    def recent(self, after_seq: int, limit: int) -> Iterable[Mapping[str, Any]]:
        """Up to `limit` active entries (fields) changed after `after_seq`, newest first (cached ahead of reads)."""
        ...

    def vectors(self, after_vseq: int) -> Iterable[tuple[str, str, npt.NDArray[np.float32]]]:
        """(entry_id, content_hash, vector) of the active space written after `after_vseq`, in write order."""
        ...

    def stored(self, *, vectors: bool = True) -> StoredIndex | None:
        """The org's index image last saved (`IndexFeed.save_index`), if any; without `vectors`, maybe its head only."""
        ...


class IndexFeed(Protocol):
    """The change feed the in-process search index is kept fresh by."""

    def marks(self, org_id: str) -> Marks: ...
    def snapshot(
        self, org_id: str, *, vectors: bool = True, image: bool = False
    ) -> AbstractContextManager[FeedSnapshot]:
        """One consistent snapshot of the org's rows (and vectors, unless not read). The embedded store reads it on a
        connection of its own, without its lock: an index is built from it while other orgs' reads and writes go on.
        `image`: its `stored` will be read (a new index), so the store may read the image's head with the marks."""
        ...

    def save_index(self, org_id: str, image: StoredIndex) -> bool:
        """Keep `image` as the org's index image (replacing the last) unless the org was dropped, its epoch moved or
        an entry was purged since its marks; whether it was kept. A cache: deleted with the org and by a purge."""
        ...


class LentSearch(Protocol):
    """One `vector_search` on a connection taken already (`VectorSearch.lend_search`): the first call gives it back."""

    def search(self, space: EmbeddingSpace, vector: Matrix, limit: int, min_sim: float) -> list[VectorHit] | None:
        """Its hits; None: the connection was lost (search by `vector_search`). A statement's error is raised."""
        ...

    def close(self) -> None: ...


class VectorSearch(Protocol):
    """Exact or approximate nearest neighbours computed by the store itself (pgvector)."""

    def vector_search(
        self, org_id: str, space: EmbeddingSpace, vector: npt.NDArray[np.float32], limit: int, min_similarity: float
    ) -> list[VectorHit]: ...
    def lend_search(self, org_id: str) -> LentSearch:
        """A connection taken now by the calling thread for one search of the org on any thread (it waits for none)."""
        ...

    def any_vector(self, org_id: str, space: EmbeddingSpace) -> bool:
        """Whether `vector_search` has any vector of `space` to search (an active entry's): one index probe."""
        ...

    def embed_backlog(self, org_id: str) -> int:
        """The org's embed jobs, pending or failed: its entries waiting for a vector. A count of its rows in the
        outbox (as long as the backlog, none in steady state): callers keep it, see `OrgSearch.waiting`."""
        ...
