"""Migration 30's step, written once for both backends: every stored service name in the form `names.service_name`
keeps it (NFKC, no invisible format character, lower case).

Before it, names were kept as they were sent: `ｃｈｅｃｋｏｕｔ-api` (fullwidth) or `checkout\\u200b-api` (a zero-width
space) in an entry's services never matched a `services` filter or the catalog's topology, which now normalize
what they are asked. The step rewrites, org by org and in batches: the entries' `services` (with their terms and
content hash, derived from them; their vectors are dropped and queued again, the text they embedded changed), and
the documents that hold service names: the catalog's services (a service's document id is its name: a renamed one
takes the normalized id, merged into the document of that name when there is one), incidents and their findings,
alerts, alert groups, changes and outcomes. The event logs are kept as they were: replaying one normalizes the
entries' names again (`projection.apply`), and a document's history says what was sent. Look-alikes that mix
scripts (`сheckout-api`) are kept as they are: only a write that adds one is refused (`names.refuse_added`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from grandbo.names import CATALOG, NAMED, merged, service_names, stored_names
from grandbo.store.projection import content_hash

NORMALIZE_SERVICE_NAMES = "-- every stored service name normalized (a step in Python, not SQL)"
"""The migration step each backend runs with `normalize_entries` and `normalize_documents`."""
MIGRATION = (
    30,
    "stored service names in the form every write and filter uses (NFKC, no invisible characters, lower case)",
    [NORMALIZE_SERVICE_NAMES],
)
"""Migration 30 as each backend's list holds it."""

BATCH = 2_000  # rows read at a time


def read_entries(p: str) -> str:
    """A batch of one org's entries after an id: id, title, body, tags, services (parameters: org, entry id)."""
    return (
        "SELECT entry_id, title, body, tags, services FROM memory_entries WHERE org_id = {p} AND entry_id > {p} "
        f"ORDER BY entry_id LIMIT {BATCH}"
    ).format(p=p)


def read_documents(p: str) -> str:
    """A batch of one org's documents of a collection after an id: id, data (parameters: org, collection, id)."""
    return (
        "SELECT doc_id, data FROM documents WHERE org_id = {p} AND collection = {p} AND doc_id > {p} "
        f"ORDER BY doc_id LIMIT {BATCH}"
    ).format(p=p)


def rename_service(
    conn: Any, p: str, encode: Callable[[Any], Any], decode: Callable[[Any], Any], org_id: str, doc_id: str,
    data: dict[str, Any],
) -> None:  # fmt: skip
    """A catalog service moved to the id of its normalized name (`data["name"]`), merged into the service there if
    there is one: `conn` either backend's connection (its `execute`), `p` its placeholder, `encode` and `decode` its
    JSON column's."""
    where = f"WHERE org_id = {p} AND collection = {p} AND doc_id = {p}"
    there = conn.execute(f"SELECT data FROM documents {where}", (org_id, CATALOG, data["name"])).fetchone()
    if there is not None:
        kept = encode(merged(decode(there[0]), data))
        conn.execute(f"UPDATE documents SET data = {p} {where}", (kept, org_id, CATALOG, data["name"]))
        conn.execute(f"DELETE FROM documents {where}", (org_id, CATALOG, doc_id))
    else:
        conn.execute(f"UPDATE documents SET doc_id = {p}, ref = {p}, data = {p} {where}",
                     (data["name"], data["name"], encode(data), org_id, CATALOG, doc_id))  # fmt: skip


EntryUpdate = tuple[str, list[str], str, str]  # entry id, its services, terms, content hash


def normalize_entries(
    read: Callable[[str], Sequence[Sequence[Any]]],
    write: Callable[[list[EntryUpdate]], object],
    terms: Callable[[str, str, list[str], list[str]], str],
    decode: Callable[[Any], list[str]],
) -> list[str]:
    """One org's entries whose services change normalized, written (`write`) with the terms (`terms(title, body,
    tags, services)`) and content hash derived from them; their ids. `read(after)`: `read_entries`' next batch."""
    after, changed = "", []
    while rows := read(after):
        due: list[EntryUpdate] = []
        for entry_id, title, body, tags, services in rows:
            kept = decode(services)
            if (names := service_names(kept)) != kept:
                listed = decode(tags)
                due.append(
                    (entry_id, names, terms(title, body, listed, names), content_hash(title, body, listed, names))
                )
        if due:
            write(due)
        changed += [entry_id for entry_id, *_ in due]
        after = rows[-1][0]
    return changed


def normalize_documents(
    read: Callable[[str, str], Sequence[tuple[str, Any]]],
    write: Callable[[str, list[tuple[Any, str]]], object],
    rename: Callable[[str, Any], object],
    decode: Callable[[Any], Any],
) -> int:
    """One org's documents whose service names change normalized; how many. `read(collection, after)`:
    `read_documents`' next batch; `write(collection, [(data, doc id)])` rewrites data in place; `rename(old id,
    data)` moves a catalog service to the id of its normalized name (merged into the one there, if any)."""
    done = 0
    for collection in NAMED:
        after, renamed = "", []
        while rows := read(collection, after):
            due = []
            for doc_id, data in rows:
                new = stored_names(collection, decode(data))
                if new is None:
                    continue
                if collection == CATALOG and new.get("name") != doc_id:
                    renamed.append((doc_id, new))  # after the batches: a rename may land on an id still ahead
                else:
                    due.append((new, doc_id))
            if due:
                write(collection, due)
            done += len(due)
            after = rows[-1][0]
        for doc_id, new in renamed:
            rename(doc_id, new)
        done += len(renamed)
    return done
