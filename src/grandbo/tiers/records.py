"""Reading a tier's stored documents as its models: a document that fails its model's checks (written by an
older release, or changed by an erasure or a pattern since) is an error that names it, never a raw validation
error, and a listing leaves it out (logged) instead of failing for every other document."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel, ValidationError

from grandbo.errors import NotFoundError, UnreadableRecordError, validation_fields
from grandbo.pages import Mark
from grandbo.ports import Document, Matching, Only, OrgDocuments, Position

M = TypeVar("M", bound=BaseModel)
log = structlog.get_logger(__name__)

REPORT = "export the organization (`grandbo export`) and report this"


def read_record(
    model: type[M],
    doc: Document,
    what: str,
    *,
    given: Mapping[str, Any] | None = None,
    remedy: str = REPORT,
    versioned: bool = True,
) -> M:
    """`doc` as `model`, with its version when the model keeps one (`versioned`: its `version` field is the
    document's, not a field of its own such as a change's) and the fields `given` (what the record does not
    store, such as its organization); UnreadableRecordError naming the record, its failing fields and `remedy`
    when it cannot be read."""
    whole = "(the record)"
    try:
        if not isinstance(doc.data, Mapping):  # a value of another shape where a record's fields should be
            raise TypeError(type(doc.data).__name__)
        data = {**doc.data, **(given or {})}
        if versioned and "version" in model.model_fields:
            data["version"] = doc.version
        return model.model_validate(data)
    except (ValidationError, TypeError) as error:
        fields = validation_fields(error, whole) if isinstance(error, ValidationError) else [whole]
        raise UnreadableRecordError(
            f"The stored {what} {doc.doc_id!r} cannot be read: {', '.join(fields[:5])} fail(s) its checks. Nothing "
            f"was changed and its history is kept; {remedy}.",
            detail={"id": doc.doc_id, "fields": fields[:20]},
        ) from error


def stored(documents: OrgDocuments, model: type[M], collection: str, doc_id: str, what: str) -> M | None:
    """The document `doc_id` of `collection` as `model` (each as `read_record` reads it), or None: there is none."""
    doc = documents.get(collection, doc_id)
    return read_record(model, doc, what) if doc else None


def required(found: M | None, what: str, key: str, doc_id: str, *, listed_by: str = "") -> M:
    """`found`, or NotFoundError when it is None: no `what` `doc_id` (under `key` in its detail) in this
    organization; `listed_by` names what lists them."""
    if found is None:
        listed = f": {listed_by} lists them" if listed_by else ""
        raise NotFoundError(f"No {what} {doc_id!r} in this organization{listed}.", detail={key: doc_id})
    return found


def read_records(
    model: type[M],
    docs: Iterable[Document],
    what: str,
    *,
    given: Mapping[str, Any] | None = None,
    versioned: bool = True,
) -> list[M]:
    """The documents that `model` can read (each as `read_record` reads it); the others are logged
    (`records.unreadable`) and left out."""
    return [record for record, _ in _readable(model, docs, what, given, versioned)]


def read_listed(
    model: type[M],
    docs: Iterable[Document],
    what: str,
    *,
    at: Callable[[Document], datetime] = lambda doc: doc.updated_at,
    versioned: bool = True,
) -> list[tuple[M, Mark]]:
    """`read_records`, each record with its place in the list its documents were read in (`at` of its document,
    its write time unless told, and its id): where a page that ends with it goes on, whatever is written since."""
    return [(record, (at(doc), doc.doc_id)) for record, doc in _readable(model, docs, what, None, versioned)]


def _readable(
    model: type[M], docs: Iterable[Document], what: str, given: Mapping[str, Any] | None, versioned: bool
) -> list[tuple[M, Document]]:
    found, unreadable = [], []
    for doc in docs:
        try:
            found.append((read_record(model, doc, what, given=given, versioned=versioned), doc))
        except UnreadableRecordError:
            unreadable.append(doc.doc_id)
    if unreadable:
        log.warning("records.unreadable", what=what, count=len(unreadable), ids=unreadable[:20])
    return found


def every_newest(
    documents: OrgDocuments, collection: str, page: int, *, since: datetime | None = None,
    match: Matching | None = None, keys: Only = None, refs: Only = None,
) -> Iterator[Document]:  # fmt: skip
    """Every document of `collection` that `OrgDocuments.newest` lists (written since `since`, of `refs`, holding
    `match`, with `keys` of their data), the newest first, read `page` at a time."""
    before: Position = None
    while True:
        docs = documents.newest(collection, page, before=before, since=since, refs=refs, match=match, keys=keys)
        yield from docs
        if (before := next_page(docs, page)) is None:
            return


def next_page(docs: list[Document], limit: int) -> Position:
    """Where the page after `docs` starts, the store having listed them newest first (`OrgDocuments.newest`) up to
    `limit`: the last one's write time and id; None when it held fewer (it was the last)."""
    return (docs[-1].updated_at, docs[-1].doc_id) if docs and len(docs) == limit else None


def shown_history(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A document's history as a user is shown it, oldest first: each event's `seq` is its place in the document's
    own history (1 the first). The store's number counts the events of every org (one store-wide sequence on both
    backends), so it showed how much other organizations wrote; a document's events are never deleted (an erasure
    rewrites them in place), so a place never changes."""
    return [{**event, "seq": place} for place, event in enumerate(events, start=1)]
