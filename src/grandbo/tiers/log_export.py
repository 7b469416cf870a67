"""`export_log`: an organization's whole log written as `eventlog` describes it, a page of the store at a time.

Every read is in one snapshot (`OrgEntries.consistent_read`), and none holds more than a page: entry events by
sequence (EXPORT_PAGE a read), active entries' vectors EXPORT_PAGE at a time (by sequence too), the document log
through `OrgDocuments.pages`. Read whole before (every event, entry and document held at once), an export of 10,000
entries and 10,000 documents took 286 MB, growing with the org."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from grandbo.files import replaced_privately, writable
from grandbo.model import Entry, Event, Listing, utcnow
from grandbo.ports import OrgDocuments, OrgEntries
from grandbo.retrieval.languages import AUTO
from grandbo.tiers.keys import WEBHOOK_SECRETS
from grandbo.tiers.learning_model import FOLDS

FORMAT = "grandbo-event-log"
VERSION = 1
EXPORT_PAGE = 1_000  # entry events, entries or document records read at once
Paged = TypeVar("Paged", Event, Entry)


def portable(collection: str, data: Any) -> Any:
    """A document's data as exported: a fold cursor without the store-wide numbers it keeps (its signal's newest
    write and the org's epoch), which showed how much the whole store wrote; a replay finds it by its signal."""
    if collection == FOLDS and isinstance(data, dict):
        return {key: value for key, value in data.items() if key not in ("seq", "epoch")}
    return data


def line(record: dict[str, Any]) -> bytes:
    """`record` as one line of an export: compact JSON, UTF-8 as written (not escaped), ended by a newline; the
    checksum line's sha256 is of these bytes. Public for whoever writes an export's lines again (the tests do)."""
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def by_seq(read: Callable[[int], list[Paged]]) -> Iterator[list[Paged]]:
    """`read(after)`'s pages, each read after the last one's sequence number, until one comes back empty (also how
    `transfer.export_file` pages the active entries)."""
    after = 0
    while page := read(after):
        yield page
        after = page[-1].seq


def _events(entries: OrgEntries) -> Iterator[Event]:
    for page in by_seq(lambda after: entries.events(since_seq=after, limit=EXPORT_PAGE)):
        yield from page


def _active(entries: OrgEntries) -> Iterator[list[Entry]]:
    """The active entries a page at a time, by sequence (the order an export has always written their vectors)."""
    return by_seq(lambda after: entries.entries(listing=Listing(limit=EXPORT_PAGE, after_seq=after)))


def export_log(
    org: str, entries: OrgEntries, documents: OrgDocuments, path: Path, *, with_secrets: bool = False
) -> dict[str, int]:
    """Write the organization's whole log as JSONL with a checksum line; return the counts written.

    Webhook signing secrets are left out (their documents and history) unless `with_secrets`: an export handed
    to someone for analysis must not carry what signs deliveries; a move to a new machine asks for them. The
    header names the signed sources left out (`secrets_withheld`), so the replay can say which need a new one.
    API keys are there as hashes (a hash of 32 random bytes gives nothing away), so a moved org's keys work."""
    writable(path, "an export")
    # One snapshot for every read: a write committed meanwhile is wholly in the export or wholly not.
    with entries.consistent_read():
        space = entries.space()
        withheld = [] if with_secrets else sorted(d.doc_id for d in documents.find(WEBHOOK_SECRETS)
                                                  if (d.data or {}).get("secrets"))  # fmt: skip
        counts = dict.fromkeys(("events", "vectors", "document_events", "documents"), 0)
        counts["secrets_withheld"] = len(withheld)
        digest = hashlib.sha256()
        lines = 0
        # Owner-only whatever it holds: the org's memory, its key hashes and (with_secrets) the webhook secrets in
        # clear; the umask would leave it readable by every user.
        with replaced_privately(path, "wb", "the export") as handle:

            def write(record: dict[str, Any], counted: str | None = None) -> None:
                nonlocal lines
                data = line(record)
                digest.update(data)
                handle.write(data)
                lines += 1
                if counted is not None:
                    counts[counted] += 1

            write({"format": FORMAT, "version": VERSION, "org": org, "exported_at": utcnow().isoformat(),
                   "space": space.model_dump(mode="json") if space else None,
                   "language": entries.language() or AUTO, "secrets_withheld": withheld})  # fmt: skip
            for event in _events(entries):
                write({"event": {"entry_id": event.entry_id, "type": event.type.value, "payload": event.payload,
                                 "actor": event.actor, "at": event.at.isoformat()}}, "events")  # fmt: skip
            for active in _active(entries):
                found = entries.vectors([entry.id for entry in active])
                for entry in active:
                    if (vector := found.get(entry.id)) is not None:
                        write({"vector": {"entry_id": entry.id, "vector": vector.tolist()}}, "vectors")
            for page in documents.pages("", EXPORT_PAGE):
                for doc_event in page.events:
                    if with_secrets or doc_event.collection != WEBHOOK_SECRETS:
                        write({"document_event": {"collection": doc_event.collection, "doc_id": doc_event.doc_id,
                                                  "type": doc_event.type,
                                                  "data": portable(doc_event.collection, doc_event.data),
                                                  "actor": doc_event.actor, "at": doc_event.at.isoformat()}},
                              "document_events")  # fmt: skip
                for document in page.documents:
                    if with_secrets or document.collection != WEBHOOK_SECRETS:
                        write({"document": {"collection": document.collection, "doc_id": document.doc_id,
                                            "ref": document.ref, "data": portable(document.collection, document.data),
                                            "version": document.version,
                                            "updated_at": document.updated_at.isoformat()}}, "documents")  # fmt: skip
            handle.write(line({"checksum": {"sha256": digest.hexdigest(), "lines": lines}}))
    return counts
