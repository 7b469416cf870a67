"""A store bound to one organization: what the service factory hands to the org-bound handle and the tiers.

Every method of a store names its organization; these wrappers name it once, at construction, so that
nothing above the store can ask for another organization's rows (`ports.OrgEntries`, `ports.OrgDocuments`).
The wrappers of one handle share its `Incarnation`, which each of their writes hands to the store: a handle's
writes go to the organization it was opened for, or nowhere (`grandbo.incarnation`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from grandbo.erased import erasure_pattern, erasure_probe, sieves
from grandbo.errors import InvalidInputError
from grandbo.figures import EntryFigures
from grandbo.flights import NextFlight
from grandbo.incarnation import Incarnation
from grandbo.model import CorpusStats, EmbeddingSpace, Entry, Event, Listing
from grandbo.ports import (
    Document,
    DocumentLog,
    DocumentWrite,
    EntryVectors,
    Forgetting,
    Idempotency,
    JobState,
    Matching,
    NewEvent,
    NewWork,
    Only,
    OrgDocuments,
    OrgEntries,
    Position,
    RebuildResult,
    Replayed,
    Tally,
    Work,
)
from grandbo.store.base import Given, Store
from grandbo.store.sql import storage
from grandbo.values import MAX_META_DEPTH, text_problem

_COUNTS: NextFlight[CorpusStats] = NextFlight()  # an org's corpus counts asked at once, read once (`grandbo.flights`)


def _holdable(text: str | None) -> bool:
    """Whether a stored id or reference could be `text`: none holds a NUL character (Postgres' text cannot, and
    both stores refuse one on write), so an id with one is an unknown id, asked of no database."""
    return text is None or "\x00" not in text


def _check_events(events: Sequence[NewEvent]) -> None:
    """Refuse an entry event either backend could not keep alike (a NUL or lone surrogate in its payload, id or
    actor: Postgres answered a psycopg DataError, SQLite stored it): the last seam every entry write passes."""
    for event in events:
        problem = text_problem([event.entry_id, event.actor, event.payload], max_depth=MAX_META_DEPTH + 4)
        if problem:
            raise InvalidInputError(
                f"Entry {event.entry_id[:128]!r} ({event.type.value}) {problem}.", detail={"entry_id": event.entry_id}
            )


class ScopedEntries(OrgEntries):
    """`ports.OrgEntries` over a store, for one organization (mypy checks each method against the port's)."""

    def __init__(self, store: Store, org_id: str, incarnation: Incarnation | None = None) -> None:
        self._store, self._org, self._incarnation = store, org_id, incarnation

    @property
    def org(self) -> str:
        return self._org

    def space(self) -> EmbeddingSpace | None:
        return self._store.space()

    def append(
        self, events: Sequence[NewEvent], vectors: EntryVectors | None = None, idempotency: Idempotency | None = None
    ) -> list[Entry]:
        _check_events(events)
        space = self._store.space() if vectors else None
        return self._store.append(self._org, events, Given(vectors or {}, space, idempotency, self._incarnation))

    def idempotent(self, key: str) -> Replayed | None:
        return self._store.idempotent(self._org, key)

    def get_many(self, entry_ids: Sequence[str]) -> dict[str, Entry]:
        return self._store.get_many(self._org, [entry_id for entry_id in entry_ids if _holdable(entry_id)])

    def entries(self, *, include_inactive: bool = False, listing: Listing | None = None) -> list[Entry]:
        return self._store.entries(self._org, include_inactive=include_inactive, listing=listing)

    def events(
        self, entry_id: str | None = None, since_seq: int = 0, *, holding: str = "", limit: int | None = None
    ) -> list[Event]:
        if not _holdable(entry_id):
            return []
        return self._store.events(self._org, entry_id, since_seq, holding=holding, limit=limit)

    def examples(self, content_type: str, limit: int) -> list[Entry]:
        return self._store.examples(self._org, content_type, limit)

    def runbooks(self, runbook_id: str, limit: int) -> tuple[bool, list[str]]:
        return self._store.runbooks(self._org, runbook_id, limit)

    def stats(self, max_attempts: int) -> CorpusStats:
        # Keyed by the store too: a process may open several (the key lives only while its read runs).
        key = (id(self._store), self._org, max_attempts)
        stats = _COUNTS.run(key, lambda: self._store.corpus_stats(self._org, max_attempts))
        stored, limit = self.stored()
        return stats.model_copy(update={"stored_bytes": stored, "storage_limit_bytes": limit})

    def stored(self) -> tuple[int, int | None]:
        return self._store.stored_bytes(self._org), self._store.storage_limit_mb * storage.MIB or None

    def unembeddable(self) -> int:
        return self._store.unembeddable_jobs(self._org)

    def figures(self, linked: Sequence[str], since: int | None = None) -> EntryFigures | None:
        return self._store.entry_figures(self._org, linked, since)  # `linked` is read only when counted

    def jobs(self, entry_ids: Sequence[str]) -> dict[str, JobState]:
        return self._store.embed_jobs(self._org, [entry_id for entry_id in entry_ids if _holdable(entry_id)])

    def vectors(self, entry_ids: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        return self._store.vectors(self._org, [entry_id for entry_id in entry_ids if _holdable(entry_id)])

    def rebuild(self, *, replace: bool = False) -> RebuildResult:
        return self._store.rebuild(self._org, replace=replace, incarnation=self._incarnation)

    def retry_failed(self) -> int:
        return self._store.retry_failed(self._org)

    def enqueue_missing(self) -> int:
        return self._store.enqueue_missing(self._org)

    def consistent_read(self) -> AbstractContextManager[None]:
        return self._store.consistent_read(self._org)

    def language(self) -> str | None:
        return self._store.language(self._org)

    def set_language(self, language: str | None) -> int:
        return self._store.set_language(self._org, language, self._incarnation)

    def purge(self, entry_id: str, reason: str, actor: str) -> Entry:
        problem = text_problem([reason, actor])
        if problem:
            raise InvalidInputError(f"The purge's reason or actor {problem}.", detail={"entry_id": entry_id})
        return self._store.purge(self._org, entry_id, reason, actor, self._incarnation)

    def purge_many(self, entry_ids: Sequence[str], reason: str, actor: str) -> list[str]:
        if problem := text_problem([reason, actor]):
            raise InvalidInputError(f"The purge's reason or actor {problem}.", detail={"entries": len(entry_ids)})
        return self._store.purge_many(self._org, [entry_id for entry_id in entry_ids if _holdable(entry_id)],
                                      reason, actor, self._incarnation)  # fmt: skip


class ScopedDocuments(OrgDocuments):
    """`ports.OrgDocuments` over a store, for one organization (mypy checks each method against the port's)."""

    def __init__(
        self, store: Store, org_id: str, write_behind_grace: float = 0.0, incarnation: Incarnation | None = None
    ) -> None:
        # Work recorded with a write waits this long for a re-driver: the writing process runs it first.
        self._store, self._org, self._grace, self._incarnation = store, org_id, write_behind_grace, incarnation

    def get(self, collection: str, doc_id: str) -> Document | None:
        return self._store.get_document(self._org, collection, doc_id) if _holdable(doc_id) else None

    def find(
        self, collection: str, refs: Only = None, *, ids: Only = None, by_write: bool = False, keys: Only = None,
        after: int | None = None,
    ) -> list[Document]:  # fmt: skip
        refs = None if refs is None else [ref for ref in refs if _holdable(ref)]
        ids = None if ids is None else [doc_id for doc_id in ids if _holdable(doc_id)]
        return self._store.find_documents(self._org, collection, refs, ids=ids, by_write=by_write, keys=keys,
                                          after=after)  # fmt: skip

    def oldest(
        self, collection: str, before: datetime, limit: int, *, after: Position = None, keys: Only = None
    ) -> list[Document]:
        return self._store.oldest_documents(self._org, collection, before, limit, after=after, keys=keys)

    def newest(
        self, collection: str, limit: int, *, before: Position = None, since: datetime | None = None,
        refs: Only = None, match: Matching | None = None, keys: Only = None,
    ) -> list[Document]:  # fmt: skip
        if (before is not None and not _holdable(before[1])) or not all(map(_holdable, (match or {}).values())):
            return []
        if refs is not None:
            refs = [ref for ref in refs if _holdable(ref)]
        return self._store.newest_documents(
            self._org, collection, limit, before=before, since=since, refs=refs, match=match, keys=keys
        )

    def ranged(
        self, collection: str, low: str | None, high: str | None, limit: int, *, after: tuple[str, str] | None = None,
        descending: bool = False, match: Matching | None = None, keys: Only = None,
    ) -> list[Document]:  # fmt: skip
        if (after is not None and not all(map(_holdable, after))) or not all(map(_holdable, (match or {}).values())):
            return []
        return self._store.ranged_documents(
            self._org, collection, low, high, limit, after=after, descending=descending, match=match, keys=keys
        )

    def put(
        self, writes: Sequence[DocumentWrite], actor: str, work: Sequence[NewWork] = (), done: Sequence[Work] = ()
    ) -> list[Document]:
        work = [dataclasses.replace(w, after=max(w.after, self._grace)) for w in work]
        done = [w for w in done if w.org_id == self._org]
        return self._store.put_documents(self._org, writes, actor, work, self._incarnation, done)

    def history(self, collection: str, doc_id: str) -> list[dict[str, Any]]:
        return self._store.document_history(self._org, collection, doc_id) if _holdable(doc_id) else []

    def version(self, collections: Sequence[str] | None = None) -> int:
        return self._store.documents_version(self._org, collections)

    def stamp(self, collections: Sequence[str]) -> tuple[int | None, list[int]]:
        return self._store.documents_stamp(self._org, collections)

    def reading(self) -> AbstractContextManager[None]:
        return self._store.reading_documents(self._org)

    def count(self, collection: str, most: int) -> int:
        return self._store.count_documents(self._org, collection, most)

    def changed(self, collection: str, after: int, limit: int | None = None) -> tuple[list[Document], list[str]] | None:
        return self._store.changed_documents(self._org, collection, after, limit)

    def tally(
        self, collection: str, by: Sequence[Sequence[str]], match: Matching, values: Sequence[Sequence[str]],
        refs: Only = None,
    ) -> Tally:  # fmt: skip
        return self._store.tally_documents(self._org, collection, by, match, values, refs)

    def log(self) -> DocumentLog:
        return self._store.document_log(self._org)

    def pages(self, holding: str, limit: int) -> Iterator[DocumentLog]:
        return self._store.document_pages(self._org, holding, limit)

    def erase(
        self, text: str, audit: DocumentWrite, actor: str, *, exact: bool = False, only_if_found: bool = False,
        forget: Forgetting | None = None, work: Sequence[NewWork] = (),
    ) -> tuple[int, int]:  # fmt: skip
        return self._store.erase_document_text(
            self._org, erasure_pattern(text, exact=exact), audit, actor, only_if_found=only_if_found,
            sieve=sieves(text), holding=erasure_probe(text, exact=exact), incarnation=self._incarnation, forget=forget,
            work=[dataclasses.replace(w, after=max(w.after, self._grace)) for w in work],
        )  # fmt: skip

    def load(self, log: DocumentLog) -> int:
        return self._store.load_documents(self._org, log, self._incarnation)


class ScopedWork:
    """`ports.OrgWork` over a store, for one organization."""

    def __init__(self, store: Store, org_id: str) -> None:
        self._store, self._org = store, org_id

    def claim(self, kind: str, subjects: Sequence[str], max_attempts: int, lease_seconds: float) -> list[Work]:
        return self._store.claim_work_of(self._org, kind, subjects, max_attempts, lease_seconds)

    def complete(self, work: Sequence[Work]) -> None:
        self._store.complete_work([w for w in work if w.org_id == self._org])

    def release(self, work: Sequence[Work]) -> None:
        self._store.release_work([w for w in work if w.org_id == self._org])

    def fail(self, work: Sequence[Work], error: str, retry_at: datetime) -> None:
        self._store.fail_work([w for w in work if w.org_id == self._org], error, retry_at)

    def counts(self, max_attempts: int) -> tuple[int, int]:
        return self._store.org_work_counts(self._org, max_attempts)


# Uses confirmed by a read that comes after them: a first recall's connection lent for the search it begins before its
# view (`OrgSearch.ahead`), whose hits are taken only once the view's watermarks confirmed the org (`Incarnation.seen`);
# the reads together a recall opens before its view (which reads nothing itself: the view's read is the first in it).
_CONFIRMED_AFTER = frozenset({"lend_search", "reading_documents"})


class _Confirming:
    """A store whose every use first confirms a handle's incarnation (`Incarnation.confirm`: a read, once). A use is
    a call: a method taken (`partial(store.erasures, ...)`) or an attribute read while a handle is built reads
    nothing (confirming on attribute access read the store once per request as its handle was made, review 22 L6)."""

    def __init__(self, store: Store, incarnation: Incarnation) -> None:
        self._store, self._incarnation = store, incarnation

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if not callable(found) or self._incarnation.confirmed or name in _CONFIRMED_AFTER:  # once: the store's own
            return found
        confirm = self._incarnation.confirm

        def confirmed(*args: Any, **kwargs: Any) -> Any:
            confirm()
            return found(*args, **kwargs)

        return confirmed


def confirming(store: Store, incarnation: Incarnation) -> Store:
    """The store the wrappers of a handle opened for a known incarnation (an API key's, a piece of work's) use: its
    first read or write reads the org's incarnation again, so a key of a dropped org, or a request that waited for
    its turn while the org was dropped and created again, reads nothing of the new org. A proxy rather than a check
    in each of the wrappers' fifty methods: none can be missed, and a handle of any other kind pays nothing."""
    return store if incarnation.confirmed else cast(Store, _Confirming(store, incarnation))
