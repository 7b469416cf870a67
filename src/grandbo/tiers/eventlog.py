"""Export and replay of a whole organization: its event log, every tier's documents, and its vectors.

`export_log` (`log_export`) writes JSON Lines: a header (format, org, embedding space), every entry event with its
time and actor (history included: corrections, retirements, purges), the current vector of every active entry,
every document event (incidents, runbooks, the ledger's outcomes, the catalog, settings, profiles, learned
notes, keys, ...) and every current document with its version, then one checksum line: the SHA-256 of every
byte before it and the number of lines. `replay_log` checks the whole file first (checksum, shape, the
write seam's checks on every remembered entry) and replays it into an organization that holds nothing:
the documents as they were, the entry events in their order through the write seam's `append` (REPLAY_CHUNK a
transaction), so the projection is rebuilt by the same function that built the original. Vectors of the target
store's own space are kept; any other space, or `reembed`, has the target's provider embed the entries again.

Credentials belong to one organization: a replay into an organization of another name (a copy, a rename)
carries none of the export's API keys and webhook signing secrets (a key names its org; a secret shared by
two orgs would have both accept the same signed deliveries), and says which sources need a new secret. A
replay under the same name (the organization moved to another machine) keeps them. What a migration changed in
stored documents since an export was made is changed in its documents too (a change's service in lower case).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from grandbo.embeddings.base import as_float32
from grandbo.errors import GrandboError, ImportFormatError, InvalidInputError
from grandbo.model import EmbeddingSpace, Entry, EventType, NewEntry, parse_entry
from grandbo.names import CATALOG, NAMED, merged, stored_names
from grandbo.ports import Document, DocumentEvent, DocumentLog, NewEvent, OrgDocuments, OrgEntries
from grandbo.redaction import Redactor
from grandbo.retrieval.languages import AUTO, declared
from grandbo.tiers import alert_text, alerts, incident_model, replayed_outcomes
from grandbo.tiers.effectiveness import zoned
from grandbo.tiers.keys import KEYS, WEBHOOK_SECRETS, secrets_logged
from grandbo.tiers.log_export import EXPORT_PAGE as EXPORT_PAGE  # a page of an export, of either kind
from grandbo.tiers.log_export import FORMAT, VERSION
from grandbo.tiers.log_export import export_log as export_log  # the export, with the replay it is read by
from grandbo.tiers.operations import OUTCOMES, SETTINGS
from grandbo.values import MAX_META_DEPTH, text_problem

# Collections whose documents hold free text, and what masks it: replayed only masked, as they are written.
_MASKED: dict[str, Callable[[dict[str, Any], Redactor], dict[str, Any]]] = {
    incident_model.INCIDENTS: incident_model.masked,
    alerts.ALERTS: alert_text.masked,
}

# Events a replay writes in one transaction: one org's whole log in one held the embedded store's write lock, and
# every other org's writes, for as long as it took (40,000 entries: 4.4 s; past 10 s they are refused, probe 24).
REPLAY_CHUNK = 2_000
_ENTRY_FIELDS = set(NewEntry.model_fields) - {"id"}


@dataclass
class ReplayReport:
    """What a replay loaded."""

    events: int = 0
    entries: int = 0
    document_events: int = 0
    documents: int = 0
    vectors_kept: int = 0
    embedded: int = 0  # entries embedded again by the target's provider
    keys_left_out: int = 0  # API keys of the export not carried (another organization's)
    sources_without_secret: list[str] = field(default_factory=list)  # signed sources that need a new secret
    outcomes_left_out: list[dict[str, Any]] = field(default_factory=list)  # unreadable (`replayed_outcomes`), skipped
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Parsed:
    space: EmbeddingSpace | None
    org: str
    language: str | None  # the header's (None: an export from before it was written there)
    withheld: list[str]  # signed sources whose secrets the export left out
    events: list[NewEvent]
    vectors: dict[str, list[float]]
    doc_events: list[DocumentEvent]
    documents: list[Document]
    lines: dict[tuple[str, str], int] = field(default_factory=dict)  # each document's line in the file


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The file's records, after its checksum line was found and matched."""
    raw = path.read_bytes()
    lines = raw.splitlines(keepends=True)
    bad = ImportFormatError(
        f"{path} is not a complete Grandbo event-log export (no checksum line at its end): it was cut short or "
        "is another kind of file. Export it again with `grandbo export --org ORG FILE`; files of entries "
        "(one entry a line) are loaded with `grandbo import`.",
        detail={"path": str(path)},
    )
    if not lines:
        raise bad
    try:
        last = json.loads(lines[-1])
        expected, count = last["checksum"]["sha256"], last["checksum"]["lines"]
    except (ValueError, KeyError, TypeError):
        raise bad from None
    body = lines[:-1]
    actual = hashlib.sha256(b"".join(body)).hexdigest()
    if actual != expected or count != len(body):
        raise ImportFormatError(
            f"{path} fails its checksum ({len(body)} lines, sha256 {actual[:12]}..., the export says {count} "
            f"lines, {str(expected)[:12]}...): it was changed or damaged after the export. Nothing was imported; "
            "export it again.",
            detail={"path": str(path), "lines": len(body)},
        )
    for number, line in enumerate(body, start=1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            raise ImportFormatError(f"line {number} of {path} is not valid JSON.", detail={"line": number}) from None
        if not isinstance(record, dict):
            raise ImportFormatError(f"line {number} of {path} is not a JSON object.", detail={"line": number})
        yield number, record


def _stamp(value: Any) -> datetime:
    stamp = datetime.fromisoformat(str(value))
    if stamp.tzinfo is None:
        raise ValueError("a time without a time zone")
    return stamp.astimezone(UTC)  # the same instant, written as every other stored time (they sort as text)


def _parse(path: Path) -> _Parsed:
    records = _records(path)
    try:
        _, header = next(records)
    except StopIteration:
        raise ImportFormatError(f"{path} holds no header line.", detail={"path": str(path)}) from None
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise ImportFormatError(
            f"{path} is not a {FORMAT} version {VERSION} file (header {str(header)[:120]}).",
            detail={"path": str(path)},
        )
    parsed = _Parsed(
        EmbeddingSpace.model_validate(header["space"]) if header.get("space") else None,
        str(header.get("org", "")),
        str(header["language"]) if header.get("language") is not None else None,
        sorted(str(source) for source in header.get("secrets_withheld") or []),
        [],
        {},
        [],
        [],
    )
    for number, record in records:
        problem = None if "vector" in record else text_problem(record, max_depth=MAX_META_DEPTH + 8)
        if problem:  # what the store cannot keep, named here rather than by the database mid-replay
            raise ImportFormatError(f"line {number} of {path} {problem}.", detail={"line": number})
        try:
            if "event" in record:
                e = record["event"]
                kind = EventType(e["type"])
                if not isinstance(e["payload"], dict):
                    raise ValueError("payload is not an object")
                if kind is EventType.REMEMBERED:  # the write seam's checks: times, text, nesting
                    parse_entry({k: v for k, v in e["payload"].items() if k in _ENTRY_FIELDS})
                parsed.events.append(NewEvent(str(e["entry_id"]), kind, e["payload"], str(e["actor"]), _stamp(e["at"])))
            elif "vector" in record:
                parsed.vectors[str(record["vector"]["entry_id"])] = record["vector"]["vector"]
            elif "document_event" in record:
                d = record["document_event"]
                parsed.doc_events.append(
                    DocumentEvent(str(d["collection"]), str(d["doc_id"]), str(d["type"]), d["data"], str(d["actor"]),
                                  _stamp(d["at"]))
                )  # fmt: skip
            elif "document" in record:
                d = record["document"]
                parsed.documents.append(
                    Document(str(d["collection"]), str(d["doc_id"]), d["ref"], d["data"], int(d["version"]),
                             _stamp(d["updated_at"]))
                )  # fmt: skip
                parsed.lines[parsed.documents[-1].collection, parsed.documents[-1].doc_id] = number
            else:
                raise ValueError(f"unknown record {sorted(record)[:3]}")
        except GrandboError as error:
            raise ImportFormatError(f"line {number} of {path}: {error.message}", detail={"line": number}) from None
        except (KeyError, TypeError, ValueError) as error:
            raise ImportFormatError(
                f"line {number} of {path} cannot be replayed: {type(error).__name__}: {str(error)[:200]}",
                detail={"line": number},
            ) from None
    return parsed


Mask = Callable[[dict[str, Any]], dict[str, Any]]


def _credentials(parsed: _Parsed, org: str, report: ReplayReport) -> DocumentLog:
    """The export's documents, without its API keys and webhook secrets when `org` is not the exported one's
    name (see the module's docstring); what was left out is counted and noted with the remedy."""
    # An export made before secrets left the history still holds them in its webhook secrets' events.
    kept = DocumentLog([_secretless(event) for event in parsed.doc_events], parsed.documents)
    held = {d.doc_id for d in parsed.documents if d.collection == WEBHOOK_SECRETS and (d.data or {}).get("secrets")}
    withheld = [source for source in parsed.withheld if source not in held]
    report.sources_without_secret = withheld
    for source in withheld:
        report.notes.append(
            f"{source}: the export was made without --with-secrets, so it carries no webhook signing secret; "
            f"{source} deliveries to {org!r} are refused until `grandbo webhooks add {source} --org {org} "
            "--secret-file FILE` (a file holding the subscription's secret)."
        )
    if parsed.org == org:
        return kept
    left_out = (KEYS, WEBHOOK_SECRETS)
    keys = {d.doc_id for d in parsed.documents if d.collection == KEYS}
    signed = sorted(held)
    report.keys_left_out = len(keys)
    report.sources_without_secret = sorted(set(withheld) | held)
    if keys:
        report.notes.append(
            f"{len(keys)} API key(s) of {parsed.org!r} not carried: keys belong to the organization they were made "
            f"for. Make new ones with `grandbo keys create --org {org} --scope read|write|admin`."
        )
    for source in signed:
        report.notes.append(
            f"{source}: the webhook signing secret of {parsed.org!r} not carried (two organizations must never "
            f"accept the same signed deliveries); {source} deliveries to {org!r} are refused until you give its "
            f"subscription a new secret and `grandbo webhooks add {source} --org {org} --secret-file FILE`."
        )
    return DocumentLog(
        [e for e in kept.events if e.collection not in left_out],
        [d for d in kept.documents if d.collection not in left_out],
    )


def _secretless(event: DocumentEvent) -> DocumentEvent:
    """A webhook secrets' history event as the history keeps it now (`keys.secrets_logged`), whatever the export."""
    held = (event.data or {}).get("secrets") if event.collection == WEBHOOK_SECRETS else None
    return replace(event, data=secrets_logged(held)) if isinstance(held, list) else event


def _masked_documents(parsed: DocumentLog) -> DocumentLog:
    """The export's documents with the free text of incidents and alerts masked by the patterns of its own
    settings, which the (empty) target organization takes with the rest, as entries are masked below."""
    record = next((d for d in parsed.documents if (d.collection, d.doc_id) == (SETTINGS, "redaction")), None)
    redactor = Redactor.of(record.data if record is not None and isinstance(record.data, dict) else None)

    def data(collection: str, value: Any) -> Any:
        mask = _MASKED.get(collection)
        return mask(value, redactor) if mask is not None and isinstance(value, dict) else value

    return DocumentLog(
        [replace(e, data=data(e.collection, e.data)) for e in parsed.events],
        _named_now(
            [replace(d, data=_as_stored_now(d.collection, data(d.collection, d.data))) for d in parsed.documents]
        ),
    )


def _as_stored_now(collection: str, value: Any) -> Any:
    """A document as this release stores it, from an export of an earlier one: its service names as
    `names.service_name` keeps them (migrations 19 and 30 put the stored ones so; an export made before them
    carries them as they were sent: `ｃｈｅｃｋｏｕｔ-api`, `Checkout-API`), an outcome's time with its zone (UTC when
    it has none: `effectiveness.zoned`). Its history events are kept as they were, as the migrations keep them."""
    if collection == OUTCOMES and isinstance(value, dict) and "at" in value:
        value = {**value, "at": zoned(value["at"])}
    return (stored_names(collection, value) or value) if collection in NAMED else value


def _named_now(documents: list[Document]) -> list[Document]:
    """The documents with each catalog service under the id of its name (`_as_stored_now`), merged into the one of
    that id when two normalize alike (as migration 30 merges them)."""
    out: dict[tuple[str, str], Document] = {}
    renamed = []
    for doc in documents:
        name = doc.data.get("name") if doc.collection == CATALOG and isinstance(doc.data, dict) else None
        if isinstance(name, str) and name and name != doc.doc_id:
            renamed.append(replace(doc, doc_id=name, ref=name))
        else:
            out[(doc.collection, doc.doc_id)] = doc
    for doc in renamed:
        there = out.get((CATALOG, doc.doc_id))
        out[(CATALOG, doc.doc_id)] = doc if there is None else replace(there, data=merged(there.data, doc.data))
    return list(out.values())


def replay_log(
    entries: OrgEntries,
    documents: OrgDocuments,
    path: Path,
    *,
    reembed: bool = False,
    mask: Callable[[], Mask] | None = None,
    embed: Callable[[], int] | None = None,
    skip_bad_outcomes: bool = False,
) -> ReplayReport:
    """Replay an export into this (empty) organization; see the module's docstring. `mask()` gives what redacts a
    remembered payload by the org's patterns once its documents (its settings among them) are loaded; an
    entry it changes is embedded again; `embed` embeds
    what has no vector and returns how many were embedded. An outcome document the ledger cannot read refuses the
    file (ImportFormatError, nothing written) unless `skip_bad_outcomes`: then it is left out and named in the report
    (`replayed_outcomes`)."""
    parsed = _parse(path)
    if entries.entries(include_inactive=True) or documents.version() != 0:
        raise InvalidInputError(
            f"Organization {entries.org!r} is not empty; `grandbo import-events` replays only into an empty "
            "organization (nothing is merged). Create a new one with `grandbo orgs create NEW` and import into it.",
            detail={"org_id": entries.org},
        )
    report = ReplayReport(events=len(parsed.events), document_events=len(parsed.doc_events),
                          documents=len(parsed.documents))  # fmt: skip
    # The language its entries are indexed in: the store's, as the header says (older exports: the settings'
    # record); checked before anything is written.
    recorded = next((d for d in parsed.documents if (d.collection, d.doc_id) == (SETTINGS, "language")), None)
    named = parsed.language or (str(recorded.data.get("language", AUTO)) if recorded is not None else AUTO)
    language = declared(named)
    carried = _masked_documents(_credentials(parsed, entries.org, report))
    if left := replayed_outcomes.unreadable(carried.documents, parsed.lines, entries.org):  # as they would be filed
        if not skip_bad_outcomes:
            raise replayed_outcomes.refusal(path, entries.org, left)
        report.outcomes_left_out = replayed_outcomes.detail(left)
        report.notes.append(replayed_outcomes.note(left))
        out = {o.id for o in left}
        carried = replace(carried, documents=[d for d in carried.documents
                                              if d.collection != OUTCOMES or d.doc_id not in out])  # fmt: skip
    report.documents = len(carried.documents)
    report.document_events = documents.load(carried)
    if language is not None:
        entries.set_language(language)
    events = parsed.events
    changed: set[str] = set()
    if mask is not None:
        masking = mask()
        events = []
        for event in parsed.events:
            if event.type is EventType.REMEMBERED:
                masked = masking(event.payload)
                if masked != event.payload:
                    changed.add(event.entry_id)
                    event = NewEvent(event.entry_id, event.type, masked, event.actor, event.at)
            events.append(event)
        if changed:
            report.notes.append(f"{len(changed)} entries redacted by this organization's patterns; embedded again")
    space = entries.space()
    vectors: dict[str, npt.NDArray[np.float32]] = {}
    if reembed:
        report.notes.append("vectors of the export ignored (--reembed): embedded by this store's provider")
    elif parsed.vectors and parsed.space != space:
        report.notes.append(f"the export's vectors are of {parsed.space}, this store's of {space}: embedded again")
    elif space is not None:
        for entry_id, values in parsed.vectors.items():
            array = as_float32(values)  # None for NaN, Infinity or past float32 (1e308): embedded again
            if entry_id not in changed and array is not None and array.shape == (space.dimension,) and array.any():
                vectors[entry_id] = array
    stored: dict[str, Entry] = {}
    try:
        for start in range(0, len(events), REPLAY_CHUNK):
            part = events[start : start + REPLAY_CHUNK]
            given = {event.entry_id: vectors[event.entry_id] for event in part if event.entry_id in vectors}
            stored.update((entry.id, entry) for entry in entries.append(part, given))
    except GrandboError as error:
        loaded = f"{len(stored)} of its entries" if stored else "no entry"
        raise type(error)(
            f"{error.message} The documents of the export were loaded and {loaded}: delete the organization "
            f"(`grandbo orgs delete {entries.org} --yes`) and import into a new one.",
            detail=error.detail,
        ) from error
    report.entries = len(stored)
    report.vectors_kept = len(entries.vectors(list(vectors)))
    if embed is not None and report.vectors_kept < sum(1 for e in stored.values() if e.status.value == "active"):
        report.embedded = embed()
    return report
