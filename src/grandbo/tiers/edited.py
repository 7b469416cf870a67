"""Documents people change a part at a time (an incident, the profile): bounded in size, and their history records
what each write changed rather than the whole document again.

Recorded whole, one finding of a line added to an incident of 100 long findings appended 1 MB to the history (4.5 MB
on Postgres), so a write key's small requests grew the disk every organization shares by orders of magnitude more
than they sent (hostile probe, session 13). A first write is recorded whole; each later one as its changed fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_core import to_json

from grandbo.errors import PayloadTooLargeError

MAX_EDITED_BYTES = 256 * 1024  # a document's JSON: an incident of 100 findings of a page each fits in half of it


def change_of(
    before: Mapping[str, Any] | None, after: Mapping[str, Any], records: str | None = None, grown: Sequence[str] = ()
) -> Any:
    """What writing `after` over `before` changed, as its history records it: the fields whose value changed (one
    removed as None; of an object, its fields that changed, the same way) and, of the list of records named
    `records` (each with an `id`), only those added or changed; of a list named in `grown` that only gained items
    at its end (an alert group's alerts), `{"added": [those items]}`. None for a first write: the history keeps it
    whole (`DocumentWrite.logged`)."""
    if before is None:
        return None
    changed: dict[str, Any] = {}
    for key, value in after.items():
        held = before.get(key)
        if key != records and held != value:
            both = isinstance(held, Mapping) and isinstance(value, Mapping)
            if key in grown and isinstance(held, list) and isinstance(value, list) and value[: len(held)] == held:
                changed[key] = {"added": value[len(held) :]}
                continue
            changed[key] = change_of(held, value) if both else value
    changed |= {key: None for key in before if key not in after}
    if records is not None:
        held = {record.get("id"): record for record in before.get(records) or [] if isinstance(record, dict)}
        touched = [record for record in after.get(records) or [] if held.get(record.get("id")) != record]
        if touched:
            changed[records] = touched
    return changed


def check_size(
    what: str, before: Mapping[str, Any] | None, after: Mapping[str, Any], remedy: str, room: int = 0
) -> None:
    """Refuse (413, with `remedy`) a write that leaves `what` over MAX_EDITED_BYTES (and `room` more: what closing
    an incident adds, its resolution and post-mortem) and larger than it was: one that shrinks or keeps the size of
    a document over the bound (written by an older release) still goes through."""
    size, limit = len(to_json(after)), MAX_EDITED_BYTES + room
    if size > limit and (before is None or size > len(to_json(before))):
        raise PayloadTooLargeError(
            f"The {what} would hold {size:,} bytes, over the {limit:,} it may hold. {remedy}",
            detail={"bytes": size, "limit": limit},
        )
