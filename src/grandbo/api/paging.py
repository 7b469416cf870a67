"""Cursor paging for the list routes: `limit` and `cursor` declared once, and the page each answers, bounded by
count and by bytes (`grandbo.pages`, where the cursor is made and read)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Generic, TypeVar

from fastapi import Depends, Query, Response
from pydantic import BaseModel, Field
from pydantic_core import to_json

from grandbo.pages import LARGEST_ENTRY as LARGEST_ENTRY  # the list routes' entries, named here too
from grandbo.pages import Read, decode, encode, filled
from grandbo.pages import entries_read as entries_read

T = TypeVar("T", bound=BaseModel)
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


def bounded_page(read: Read[T], asked: Asked, largest: int) -> Response:
    """A list route's answer, `{"items": [...], "next_cursor": ...}` (`Page`'s JSON), `filled` as `asked`."""
    parts, _, more = filled(read, asked.limit, asked.after, largest)
    body = b'{"items":[' + b",".join(parts) + b'],"next_cursor":' + to_json(encode(more)) + b"}"
    return Response(body, media_type="application/json")
