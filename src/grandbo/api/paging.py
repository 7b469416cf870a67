"""Cursor paging for the list routes: an opaque cursor names where the next page starts.

A cursor is the (time, id) position of the last item a page returned, base64url-encoded: clients pass it back
as they got it and never read it. The lists page by position, not by offset, so an item written meanwhile
neither shifts a page nor is returned twice.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Generic, TypeVar

from fastapi import Depends, Query
from pydantic import BaseModel, Field

from grandbo.errors import InvalidInputError
from grandbo.model import Entry

T = TypeVar("T")
MAX_PAGE = 500  # items one page holds at most
Cursor = Annotated[
    str | None, Query(max_length=400, description="`next_cursor` of the previous page, as it came; absent: the first.")
]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Items per page (1-{MAX_PAGE}).")]


@dataclass(frozen=True)
class Asked:
    """The page a list route was asked for: at most `limit` items, after the position `cursor` names."""

    limit: int
    cursor: str | None

    @property
    def after(self) -> tuple[datetime, str] | None:
        return decode(self.cursor)


def _asked(limit: Limit = 50, cursor: Cursor = None) -> Asked:
    return Asked(limit, cursor)


PageAsked = Annotated[Asked, Depends(_asked)]  # every list route's `limit` and `cursor`, declared once


class Page(BaseModel, Generic[T]):
    """One page of a list, and where the next one starts."""

    items: list[T]
    next_cursor: str | None = Field(description="Pass it as `cursor` for the next page; null: this was the last.")


def encode(position: tuple[datetime, str] | None) -> str | None:
    if position is None:
        return None
    raw = json.dumps([position[0].isoformat(), position[1]], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str | None) -> tuple[datetime, str] | None:
    """The position a cursor names; a cursor this server did not make is refused (422) with the remedy."""
    if not cursor:
        return None
    try:
        at, item = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        when = datetime.fromisoformat(at)
        if not isinstance(item, str) or when.tzinfo is None:
            raise ValueError("not a position")
        when.astimezone(UTC)  # a time past the calendar in UTC overflows every comparison with a stored one
        item.encode()  # a lone surrogate, escaped inside the base64, reached the store (the door sees only base64)
        if "\x00" in item:  # no id holds one, and Postgres refuses it in a query: the store-side pages answered 500
            raise ValueError("a NUL in the position")
    except (ValueError, TypeError, OverflowError, binascii.Error) as error:
        raise InvalidInputError(
            "Unknown cursor: pass `next_cursor` from the previous page exactly as it came, or none for the first page.",
            detail={"cursor": cursor[:80]},
        ) from error
    return when, item


def listed(entries: Sequence[Entry], limit: int) -> Page[Entry]:
    """A page of entries the store listed newest first, asked for one more than `limit` (whether another page
    follows)."""
    page = list(entries[:limit])
    last = page[-1] if page else None
    return Page(items=page, next_cursor=encode((last.created_at, last.id)) if last and len(entries) > limit else None)
