"""Reading a tier's stored documents as its models: a document that fails its model's checks (written by an
older release, or changed by an erasure or a pattern since) is an error that names it, never a raw validation
error, and a listing leaves it out (logged) instead of failing for every other document."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

import structlog
from pydantic import BaseModel, ValidationError

from grandbo.errors import UnreadableRecordError, validation_fields
from grandbo.ports import Document

M = TypeVar("M", bound=BaseModel)
log = structlog.get_logger(__name__)


def read_record(model: type[M], doc: Document, what: str) -> M:
    """`doc` as `model`, with its version."""
    try:
        return model.model_validate({**doc.data, "version": doc.version})
    except ValidationError as error:
        fields = validation_fields(error, "(the record)")
        raise UnreadableRecordError(
            f"The stored {what} {doc.doc_id!r} cannot be read: {', '.join(fields[:5])} fail(s) its checks. Nothing "
            "was changed and its history is kept; export the organization (`grandbo export`) and report this.",
            detail={"id": doc.doc_id, "fields": fields[:20]},
        ) from error


def read_records(model: type[M], docs: Iterable[Document], what: str) -> list[M]:
    """The documents that `model` can read; the others are logged (`records.unreadable`) and left out."""
    found, unreadable = [], []
    for doc in docs:
        try:
            found.append(read_record(model, doc, what))
        except UnreadableRecordError:
            unreadable.append(doc.doc_id)
    if unreadable:
        log.warning("records.unreadable", what=what, count=len(unreadable), ids=unreadable[:20])
    return found
