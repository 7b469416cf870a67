"""A collection's documents as `tiers.operations.Snapshots` keeps them converted: read (only those written since, when
some are kept), then converted by what the read returns, once the transaction the read ran in is over: a pooled
connection of the Postgres store is not held while Python makes objects of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog

from grandbo.errors import UnreadableRecordError
from grandbo.ports import Document, Only, OrgDocuments

T = TypeVar("T")
log = structlog.get_logger(__name__)


def read_kept(
    documents: OrgDocuments, collection: str, convert: Callable[[Document], T], most: int | None, held: Held[T] | None,
    keys: Only,
) -> Callable[[], dict[str, T] | None]:  # fmt: skip
    """The collection's documents (`Snapshots.kept`): those written since `held`'s, unless more than `most` writes
    came since (a storm of 100,000 alerts between two triages was read whole once before the bound was seen); else
    all of them, once the store counted (on its index) no more than `most`. Read now; what it returns converts them,
    `held`'s brought up to date."""
    if held is not None and held.items is not None:
        since = documents.changed(collection, held.version, most)
        if since is not None:
            changed, gone = since
            before = held.items

            def brought() -> dict[str, T] | None:
                fresh = converted(collection, changed, convert)
                items = {**before, **fresh}
                for doc_id in [*gone, *(doc.doc_id for doc in changed if doc.doc_id not in fresh)]:
                    items.pop(doc_id, None)  # deleted, or written since in a form that cannot be read
                return None if most is not None and len(items) > most else items

            return brought
    if most is None:
        docs = documents.find(collection, keys=keys)
    elif documents.count(collection, most + 1) > most:  # counted on the index: none read (10,001 took 1.5-3.5 s)
        return over_most
    else:
        docs = documents.ranged(collection, None, None, most + 1, keys=keys)
        if len(docs) > most:
            return over_most
    return lambda: converted(collection, docs, convert)


def over_most() -> None:
    """What converts a collection kept as more than its `most` (`Snapshots.kept`): nothing."""


def converted(collection: str, docs: Sequence[Document], convert: Callable[[Document], T]) -> dict[str, T]:
    """Each document converted, by id; one `convert` cannot read (UnreadableRecordError) is left out, logged."""
    items, unreadable = {}, []
    for doc in docs:
        try:
            items[doc.doc_id] = convert(doc)
        except UnreadableRecordError:
            unreadable.append(doc.doc_id)
    if unreadable:
        log.warning("records.unreadable", what=collection, count=len(unreadable), ids=unreadable[:20])
    return items


@dataclass(frozen=True)
class Held(Generic[T]):
    """A collection kept converted, as of its org's epoch, its version and the org's erasures' version."""

    epoch: int | None
    version: int
    erased: int
    convert: Callable[[Document], T]  # another converter of the same collection reads it all again
    items: dict[str, T] | None  # None: more than the caller's `most`
