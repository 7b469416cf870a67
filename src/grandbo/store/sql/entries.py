"""The SQL both backends share for an organization's entries, spelled from their `Dialect`."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from grandbo.model import Listing
from grandbo.store.sql.dialect import Dialect


def listed(d: Dialect, include_inactive: bool, listing: Listing | None) -> tuple[str, list[Any], str]:
    """The condition after an org's `org_id = ...`, its parameters and the order of its entries: every one by seq,
    or `listing`'s page in SQL (newest first by creation, then id by code point, as the API's list routes sort;
    a page used to read and sort every entry of the org in the process). Entry times are kept in UTC (as text
    on SQLite, which sorts as the times do)."""
    where = "" if include_inactive else " AND status = 'active'"
    values: list[Any] = []
    if listing is None:
        return where, values, "seq"
    p, ids = d.param, f"entry_id{d.code_points}"
    if listing.kind is not None:
        where, values = f"{where} AND kind = {p}", [*values, listing.kind.value]
    if listing.service is not None:
        where, values = f"{where} AND {d.holds.format('services')}", [*values, listing.service]
    if listing.before is not None:
        at, entry_id = d.time(listing.before[0].astimezone(UTC)), listing.before[1]
        if d.row_values:
            where, values = f"{where} AND (created_at, {ids}) < ({p}, {p})", [*values, at, entry_id]
        else:
            where = f"{where} AND (created_at < {p} OR (created_at = {p} AND {ids} < {p}))"
            values = [*values, at, at, entry_id]
    return where, values, f"created_at DESC, {ids} DESC LIMIT {int(listing.limit)}"
