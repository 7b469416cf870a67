"""Cursor paging for the list routes: `limit` and `cursor` declared once, and the page each answers, bounded by
count and by bytes (`grandbo.pages`, where the cursor is made and read)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Generic, TypeVar

from fastapi import Depends, Query, Response
from pydantic import BaseModel, Field
from pydantic_core import to_json

from grandbo.model import MAX_BODY_CHARS, Entry
from grandbo.pages import Mark, Read, decode, encode, filled
from grandbo.ports import Position
from grandbo.values import MAX_META_BYTES

T = TypeVar("T", bound=BaseModel)
MAX_PAGE = 500  # items one page holds at most
LARGEST_ENTRY = MAX_BODY_CHARS + MAX_META_BYTES  # a memory entry's JSON, near enough (its body and meta at their caps)
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


def entries_read(listing: Callable[[int, Position], Sequence[Entry]]) -> Read[Entry]:
    """A `Read` of the entries the store lists newest first (`listing(n, after)`: by creation, then id, each
    entry's place), asking one more than it gives (whether another page follows: none after the last)."""

    def read(n: int, after: Position) -> tuple[list[tuple[Entry, Mark]], Position]:
        found = listing(n + 1, after)
        page = [(entry, (entry.created_at, entry.id)) for entry in found[:n]]
        return page, page[-1][1] if page and len(found) > n else None

    return read


def bounded_page(read: Read[T], asked: Asked, largest: int) -> Response:
    """A list route's answer, `{"items": [...], "next_cursor": ...}` (`Page`'s JSON), `filled` as `asked`."""
    parts, _, more = filled(read, asked.limit, asked.after, largest)
    body = b'{"items":[' + b",".join(parts) + b'],"next_cursor":' + to_json(encode(more)) + b"}"
    return Response(body, media_type="application/json")
