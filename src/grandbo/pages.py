"""A list's pages, bounded by count and by bytes, and the opaque cursor that names where the next one starts.

A cursor is the (time, id) position of the last item a page returned, base64url-encoded: clients pass it back
as they got it and never read it. The lists page by position, not by offset, so an item written meanwhile
neither shifts a page nor is returned twice. A list ordered by when its items were last written (incidents, alert
groups, alerts) moves an item written while a client pages to its head, ahead of the cursor: that client sees it
on its next walk from the first page, not on this one.

A page is bounded by bytes as well as by count (`filled`), on every face (the REST lists, the MCP tools): 500
incidents of 250 KiB each answered 125 MB in 854 ms and grew the server by 416 MiB, and four such readers took
another org's recall p95 from 7 to 587 ms (hostile probe 19). A page past MAX_PAGE_BYTES ends early, with the
cursor of the rest: the place of the last item it kept, as the read that kept it gave it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from pydantic import BaseModel
from pydantic_core import to_json

from grandbo.errors import InvalidInputError
from grandbo.model import MAX_BODY_CHARS, Entry
from grandbo.ports import Position
from grandbo.values import MAX_META_BYTES

T = TypeVar("T", bound=BaseModel)
# The items of one page as JSON hold at most this many bytes, but for a first item larger alone (none is: the
# largest record, an entry of 200,000 characters escaped six bytes each and 64 KiB of meta, is 1.3 MB). 500
# ordinary records (a few KB each) fit uncut; a page of incidents near their 256 KiB cap holds 8.
MAX_PAGE_BYTES = 2 * 1024 * 1024
# What one read of a list holds at most, by its records' caps: the read is made in parts of READ_AHEAD // the
# largest record, so that a page of large records reads little more than it answers, not its `limit` of them.
READ_AHEAD = 4 * MAX_PAGE_BYTES
LARGEST_ENTRY = MAX_BODY_CHARS + MAX_META_BYTES  # a memory entry's JSON, near enough (its body and meta at their caps)
# Where one listed item sits in its list's order (a time and an id, as the list sorts: a write time, a creation, the
# time a change took effect): a page that ends with it goes on from there, whatever is written meanwhile.
Mark = tuple[datetime, str]
# (n, after) -> up to n items after `after`, each with its `Mark` (from what the list sorts by, as that read found
# it), and where the next read starts (None: no more)
Read = Callable[[int, Position], tuple[Sequence[tuple[T, Mark]], Position]]


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


def filled(
    read: Read[T], limit: int, after: Position, largest: int, budget: int = MAX_PAGE_BYTES
) -> tuple[list[bytes], list[T], Position]:
    """Up to `limit` items after `after`, as JSON and as read, holding at most `budget` bytes together (the first
    always), and where the next page starts (None: this was the last). `read(n, after)` is the list's own read (a
    `Read`). Read `READ_AHEAD // largest` items at a time (`largest`: the bytes of the list's largest record, by its
    caps). A page cut by bytes inside a read goes on from the place of the last item it kept, as that read gave it:
    never from a second read, which an item changed, closed or deleted meanwhile would shift (an unchanged item
    was then on no page). Items a read left out (filtered, unreadable) after the last kept one are read again."""
    parts: list[bytes] = []
    items: list[T] = []
    used, part = 0, max(1, READ_AHEAD // largest)
    while True:
        found, more = read(min(part, limit - len(items)), after)
        for item, mark in found:
            dumped = to_json(item)
            if items and used + len(dumped) > budget:
                return parts, items, after
            parts.append(dumped)
            items.append(item)
            used += len(dumped)
            after = mark
        if more is None or len(items) >= limit:
            return parts, items, more
        after = more


def entries_read(listing: Callable[[int, Position], Sequence[Entry]]) -> Read[Entry]:
    """A `Read` of the entries the store lists newest first (`listing(n, after)`: by creation, then id, each
    entry's place; or the oldest first from a place, toward the newest), asking one more than it gives (whether
    another page follows: none after the last)."""

    def read(n: int, after: Position) -> tuple[list[tuple[Entry, Mark]], Position]:
        found = listing(n + 1, after)
        page = [(entry, (entry.created_at, entry.id)) for entry in found[:n]]
        return page, page[-1][1] if page and len(found) > n else None

    return read
