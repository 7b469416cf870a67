"""Erasing a text from an organization's whole memory: a secret or personal data typed into an incident note,
a profile, an edit, as well as into entries.

`purge` (of one entry) erases what the entry held; `Erasure.purge_text` finds a text wherever the org keeps it:
every entry whose events ever held it is purged (through the handle's `purge`, audited each), and every
document and every event of the documents' history reads "[purged]" where the text was, in one transaction
that also records the erasure (collection `erasures`: who, why, how much; never the text) and deletes the refusal of
each rejected rule the text was a word of (its digest gives the word back to a guess: `learning_model.refusals_erased`).
An erasure that purges entries erases the documents first, in the transaction that records it `running` (ref
`running`), naming the entries it sets out to purge, with a write-behind that finishes it (`FINISH`); then it purges
them in batches, and records itself `done`. One cut short between its batches (kill -9, a crash) is finished by the
re-driver (`grandbo worker`, the server, the next CLI command on the embedded store): the listed entries not purged
yet are purged and the record is `done`, `resumed` (logged `memory.erasure_resumed`). The text itself is never kept,
so only what the record names can be finished, which is why the documents go first: a crash before that transaction
commits leaves nothing erased and nothing recorded. Until it is finished, `unfinished` (`grandbo stats`,
`/v1/stats`) names it and how many of its entries still hold the text.

The text is matched in any case (`Jane Roe` erases `JANE ROE` and `jane roe`: an operator erasing a leaked
name means every spelling of it) unless `exact`. A text found nowhere erases nothing and records no erasure:
the report says `found` False, and the CLI exits 1.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_json

from grandbo.erased import ERASURES, PURGED_TEXT, erase_text, erasure_pattern, sieves
from grandbo.erased import erasure_probe as _probe  # the database's filter of an erasure's reads
from grandbo.errors import InvalidInputError, validation_fields
from grandbo.model import utcnow
from grandbo.ports import Document, DocumentWrite, NewWork, OrgDocuments, OrgEntries
from grandbo.redrive import ERASURE_FINISH
from grandbo.tiers.incident_model import INCIDENTS, Incident
from grandbo.tiers.learning_model import refusals_erased
from grandbo.tiers.profile import PROFILE, Profile

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)

COLLECTION = ERASURES
RUNNING = "running"  # an erasure's record (and its ref) while it has entries left to purge
FINISH = ERASURE_FINISH  # the write-behind finishing an erasure (`finish`); subject: the erasure id
UNFINISHED_REMEDY = (
    "it was cut short (a crash, kill -9) and is finished by the re-driver: a running `grandbo worker` or server "
    "within a minute, `grandbo worker --once`, or (embedded store) the next CLI command; `grandbo stats` names it "
    "until then. If it stays, `grandbo backfill` gives its write-behind back when it gave up (see its last error)."
)
MIN_LENGTH = 4  # shorter texts would erase words everywhere
# Events of the org's log read at once while finding the entries that held the text: an entry's event holds its body
# (up to 200,000 characters, 800 KB of 4-byte ones), so a read of a text the database cannot filter holds 100 of them
# at most (2,000 could hold 1.6 GB, reviews 19 and 19b); a text it can filter reads the events holding it only.
EVENTS_PAGE = 100
LOG_PAGE = 500  # records of the org's document log read at once while checking the erasure (`_refuse`), at most
# (a page ends sooner after a few MB of their data: `store.sql.documents.PAGE_BYTES`)


@dataclass
class ErasureReport:
    entries: list[str] = field(default_factory=list)
    documents: int = 0
    document_events: int = 0
    erasure_id: str = ""  # "" when the text was found nowhere (nothing erased, nothing recorded)
    exact: bool = False

    @property
    def found(self) -> bool:
        return bool(self.entries or self.documents or self.document_events)

    def to_dict(self) -> dict[str, Any]:
        return {"found": self.found, "exact": self.exact, "entries": self.entries, "documents": self.documents,
                "document_events": self.document_events, "erasure_id": self.erasure_id}  # fmt: skip


_FIELD_NAME = re.compile(r"[a-z][a-z0-9_]*")


def _keys(value: Any) -> set[str]:
    """Every key of a JSON value, at any depth."""
    if isinstance(value, list):
        return set().union(*(_keys(item) for item in value)) if value else set()
    if isinstance(value, dict):
        return {str(key) for key in value}.union(*(_keys(item) for item in value.values()))
    return set()


def _holds(value: Any, pattern: re.Pattern[str]) -> bool:
    """Whether a JSON value holds a match of `pattern` in any of its strings, keys included."""
    if isinstance(value, str):
        return pattern.search(value) is not None
    if isinstance(value, list):
        return any(_holds(item, pattern) for item in value)
    if isinstance(value, dict):
        return any(_holds(key, pattern) or _holds(item, pattern) for key, item in value.items())
    return False


def _reads(model: type[BaseModel], data: dict[str, Any]) -> bool:
    try:
        model.model_validate(data)
    except ValidationError:
        return False
    return True


class Erasure:
    """The org's erasures of a text (an admin's act: interfaces check the caller's right first)."""

    def __init__(
        self, memory: OrgMemory, documents: OrgDocuments, entries: OrgEntries, purged: Callable[[], None]
    ) -> None:
        # `purged`: entries were purged (the org's index image went with them: saved again without their words)
        self._memory, self._documents, self._entries, self._purged = memory, documents, entries, purged

    def purge_text(self, text: str, *, reason: str, actor: str, exact: bool = False) -> ErasureReport:
        """Erase `text` (in any case, unless `exact`) from the whole organization: purge every entry any of whose
        events held it, and replace it by "[purged]" in every document and document event (a rejected rule holding
        it is forgotten: its refusal deleted). Afterwards no read, export or search of the org returns it. Found
        nowhere: nothing is written, no erasure recorded, and the report's `found` is False."""
        if len(text.strip()) < MIN_LENGTH:
            raise InvalidInputError(
                f"Name the text to erase, at least {MIN_LENGTH} characters (shorter ones would erase words "
                "everywhere).",
                detail={},
            )
        if not reason.strip():
            raise InvalidInputError("Say why the text is erased (--reason): the erasure is audited.", detail={})
        report = ErasureReport(erasure_id=f"erasure-{uuid.uuid4().hex[:12]}", exact=exact)
        pattern = erasure_pattern(text, exact=exact)
        self._refuse(text, pattern, exact=exact)
        held, searched = self._held(text, pattern, exact=exact)
        audit = {"reason": reason.strip(), "actor": actor, "at": utcnow().isoformat(), "exact": exact}
        # With entries to purge: recorded `running`, with what finishes it, in the documents' erasure's transaction.
        done = DocumentWrite(COLLECTION, report.erasure_id, {**audit, "status": "done", "entries": []}, "erased")
        report.documents, report.document_events = self._documents.erase(
            text, _running(report.erasure_id, audit, held) if held else done, actor, exact=exact,
            only_if_found=not held, forget=refusals_erased, work=_finishing(report, actor) if held else [],
        )  # fmt: skip
        if not held and not report.found:
            report.erasure_id = ""
            return report
        if not held:  # The erasure has counted itself (`grandbo.unerased`): work that read the text before (an
            # incident's sync copying a finding into an entry) writes nothing from here on, but may have since.
            if not (held := self._late(text, pattern, searched, exact)):
                return report
            self._documents.put([_running(report.erasure_id, audit, held)], actor, work=_finishing(report, actor))
            searched = -1  # looked already
        failed: list[BaseException] = []

        def finish() -> None:
            try:
                report.entries = self._finish(report.erasure_id, lambda: self._late(text, pattern, searched, exact))
            except Exception as error:  # counted as a failed attempt: the re-driver finishes it later
                failed.append(error)
                raise

        if not self._memory.run_work(FINISH, report.erasure_id, finish) and not failed:
            finish()  # not leased (another process took it): purging what is purged already writes nothing
        if failed:
            raise failed[0]
        return report

    def _late(self, text: str, pattern: re.Pattern[str], searched: int, exact: bool) -> list[str]:
        """The entries written holding the text after the search that ended at `searched` (-1: none looked for)."""
        return [] if searched < 0 else self._held(text, pattern, after=searched, exact=exact)[0]

    def finish(self, erasure_id: str) -> list[str]:
        """Finish the erasure `erasure_id` if it is `running` (a crash cut it short: `grandbo.redrive`): purge the
        entries it names that are not purged yet, and record it `done`, `resumed`; the entries it names. The text is
        not kept: what it had erased from documents it had erased before it purged any entry."""
        return self._finish(erasure_id, resumed=True)

    def _finish(self, erasure_id: str, late: Callable[[], list[str]] = list, *, resumed: bool = False) -> list[str]:
        """Purge the entries the `running` record names (and those `late` finds, named in the record first), then
        record it `done`; the entries purged (all it names, when `resumed`). Nothing when it is not running."""
        doc = self._documents.get(COLLECTION, erasure_id)
        if doc is None or not isinstance(doc.data, dict) or doc.data.get("status") != RUNNING:
            return []
        data = doc.data
        listed, reason, actor = [str(e) for e in data.get("entries", [])], str(data["reason"]), str(data["actor"])
        if resumed:
            log.warning("memory.erasure_resumed", org_id=self._memory.org, erasure_id=erasure_id, entries=len(listed),
                        holding=len(self._holding(listed)), actor=actor)  # fmt: skip
        # Those written late are named before any entry is purged: a crash during the purge leaves them to the
        # re-driver too, which cannot find them (the text is not kept)
        if more := [entry for entry in late() if entry not in listed]:
            listed += more
            self._documents.put([_running(erasure_id, data, listed)], actor)
        purged = self._purge(listed, reason, actor)
        done = {
            **data,
            "status": "done",
            "entries": listed if resumed else purged,
            **({"resumed": True} if resumed else {}),
        }
        self._documents.put([DocumentWrite(COLLECTION, erasure_id, done, "erased", essential=True)], actor)
        return listed if resumed else purged

    def unfinished(self) -> list[dict[str, Any]]:
        """The org's erasures cut short and not finished yet: each one's id, when it began, how many of the entries
        it names still hold the text, and what finishes it."""
        found = []
        for doc in self._documents.find(COLLECTION, [RUNNING]):
            data = doc.data if isinstance(doc.data, dict) else {}
            holding = len(self._holding([str(e) for e in data.get("entries", [])]))
            found.append({"erasure_id": doc.doc_id, "at": data.get("at"), "entries_holding": holding,
                          "remedy": UNFINISHED_REMEDY})  # fmt: skip
        return found

    def _holding(self, entry_ids: Sequence[str]) -> list[str]:
        """Those of `entry_ids` not purged yet (a purged entry reads "[purged]", with no body)."""
        held = self._entries.get_many(entry_ids)
        return [e for e in entry_ids if e in held and (held[e].title, held[e].body) != (PURGED_TEXT, "")]

    def _purge(self, held: list[str], reason: str, actor: str) -> list[str]:
        """Purge the entries `held` (`OrgEntries.purge_many`, in batches); those purged."""
        try:
            purged = self._entries.purge_many(held, reason, actor)
        except BaseException:  # a later batch failed: those before it committed, and the index is told too
            if held:
                self._purged()
                log.warning("memory.purge_cut_short", org_id=self._memory.org, held=len(held), actor=actor)
            raise
        if purged:
            self._purged()
            log.warning("memory.purged", org_id=self._memory.org, entries=len(purged), actor=actor)
        return purged

    def _held(
        self, text: str, pattern: re.Pattern[str], *, after: int = 0, exact: bool = False
    ) -> tuple[list[str], int]:
        """The entries any of whose events after `after` held a match of `pattern`, in the order they first did,
        and the last event read: the org's log read EVENTS_PAGE events at a time, of only the events whose stored
        text holds `_probe(text)` when it has one (the database's filter, then `pattern` on each). It read every
        entry's history, one read per entry: 161 s for 80,000 entries on Postgres (probe 16)."""
        held: dict[str, None] = {}
        probe = _probe(text, exact=exact)
        while page := self._entries.events(since_seq=after, holding=probe, limit=EVENTS_PAGE):
            held.update((event.entry_id, None) for event in page if _holds(event.payload, pattern))
            after = page[-1].seq
        return list(held), after

    def _refuse(self, text: str, pattern: re.Pattern[str], *, exact: bool = False) -> None:
        """Refuse, before anything is erased, an erasure the org's documents forbid (`_field_names`, `_patterns`,
        `_unreadable`). Only the records that hold a match of `pattern` matter: the document log is read LOG_PAGE
        records or a few MB of their data a read, whichever comes first, of only the records whose stored JSON holds
        `_probe(text)` in any case when it has one (the database's filter; a text without one reads every record),
        then matched here. It read the org's whole log at once: 8 s and 437 MiB for 150 MB of documents, for a text
        found nowhere (probe 19); then 500 records a read, 100 MB of 200 KB ones (review 19)."""
        names: set[str] = set()
        patterns: list[str] = []
        unreadable: list[str] = []
        sieve = sieves(text)  # the text is written in JSON as it is: Rust finds it in a record's JSON, or it is absent
        for page in self._documents.pages(_probe(text, exact=exact), LOG_PAGE):
            events = [e.data for e in page.events if not sieve or _in_json(e.data, pattern)]
            documents = [d for d in page.documents if not sieve or _in_json(d.data, pattern)]
            names.update(_field_names(pattern, [*events, *(d.data for d in documents)]))
            patterns += _patterns(pattern, documents)
            unreadable += _unreadable(self._memory.org, pattern, documents)
        if names:
            shown = ", ".join(sorted(names)[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            raise InvalidInputError(
                f"The text is part of the field name(s) {shown} that this organization's documents use: erasing it "
                "there would leave them unreadable, so nothing was erased. Erase a longer text (the words around "
                "it); if it is the name of a profile fact or a setting you gave, rename or remove that first.",
                detail={"fields": sorted(names)[:20]},
            )
        if patterns:
            raise InvalidInputError(
                f"The text is part of the redaction pattern {', '.join(repr(n) for n in patterns)} of this "
                "organization: erasing it there would change what the pattern masks, so nothing was erased. Remove "
                f"the pattern first (`grandbo settings redaction --remove {patterns[0]}`), erase the text, then add "
                "the pattern again if it is still wanted.",
                detail={"patterns": patterns},
            )
        if unreadable:
            shown = "; ".join(unreadable[:5]) + (f" and {len(unreadable) - 5} more" if len(unreadable) > 5 else "")
            raise InvalidInputError(
                f"Erasing the text would leave {shown} unreadable: longer than its limit ({PURGED_TEXT!r} is longer "
                "than the text) or no longer one of the words the field allows, so nothing was erased. Erase first "
                f"a longer text there that holds it (the words around it, at least {len(PURGED_TEXT)} characters), "
                "then this one; a word such as a key's scope or an outcome's kind cannot be erased alone.",
                detail={"documents": unreadable[:20]},
            )


def _running(erasure_id: str, audit: dict[str, Any], entries: list[str]) -> DocumentWrite:
    """The record of an erasure with `entries` to purge, before it has purged them (`RUNNING`, also its ref)."""
    data = {**audit, "status": RUNNING, "entries": entries}
    return DocumentWrite(COLLECTION, erasure_id, data, "erasing", ref=RUNNING, essential=True)


def _finishing(report: ErasureReport, actor: str) -> list[NewWork]:
    """The write-behind that finishes the erasure should its process not (`Erasure.finish`)."""
    return [NewWork(FINISH, report.erasure_id, {"actor": actor})]  # a re-driver waits out the write-behind grace


def _field_names(pattern: re.Pattern[str], records: Sequence[Any]) -> set[str]:
    """The keys shaped like a field name (`status`, `started_at`) that `pattern` finds in: documents are validated
    when read, and an incident whose `status` key read `[purged]` could never be read again. Keys a person typed (a
    fact called "Jane Roe's phone") are erased as usual."""
    return {key for data in records for key in _keys(data) if _FIELD_NAME.fullmatch(key) and pattern.search(key)}


def _unreadable(org: str, pattern: re.Pattern[str], documents: Sequence[Document]) -> list[str]:
    """The documents the erasure would leave their tier could not read. "[purged]" is longer than a text under 8
    characters, so a field near its limit (an incident's title of 500, an alert's summary the sender's was cut to)
    would grow past it; and a word from a fixed list (a key's scope `read`, an outcome's `failed`, a note's
    `rejected`) would no longer be one of its words: a key of that scope then authenticated nothing, and every
    listing with such a record left it out."""
    unreadable: list[str] = []
    for collection, model, given in _checked_models(org):
        for doc in (d for d in documents if d.collection == collection):
            if not isinstance(doc.data, dict) or not _holds(doc.data, pattern):
                continue
            own = {**given, "version": doc.version} if "version" in model.model_fields else given
            if not _reads(model, {**doc.data, **own}):
                continue  # only a document readable now is kept readable: this erasure did not break another
            try:
                model.model_validate({**erase_text(doc.data, pattern, own_id=doc.doc_id), **own})
            except ValidationError as error:
                unreadable.append(f"{collection} {doc.doc_id} ({', '.join(validation_fields(error))})")
    return unreadable


def _in_json(data: Any, pattern: re.Pattern[str]) -> bool:
    """Whether `pattern` finds anything in `data` written as JSON (found in Rust and C, not walked in Python); a
    record pydantic-core cannot write (a lone surrogate an older release kept) is walked, as any was before."""
    try:
        return pattern.search(to_json(data).decode()) is not None
    except PydanticSerializationError:
        return True


def _checked_models(org: str) -> list[tuple[str, type[BaseModel], dict[str, Any]]]:
    """The collections an erasure must leave readable, with the model each is read as (and the fields a record
    does not store, given when it is read)."""
    # Imported here: these tiers import (through operations) this module.
    from grandbo.tiers.alerts import ALERTS, StoredAlert
    from grandbo.tiers.effectiveness import Outcome
    from grandbo.tiers.keys import KEYS, ApiKey
    from grandbo.tiers.learning_model import NOTES, SIGNALS, Note, Signal
    from grandbo.tiers.operations import OUTCOMES, SERVICES
    from grandbo.tiers.topology import Service

    return [
        (INCIDENTS, Incident, {}), (ALERTS, StoredAlert, {}), (PROFILE, Profile, {}), (KEYS, ApiKey, {}),
        (NOTES, Note, {}), (SIGNALS, Signal, {}), (OUTCOMES, Outcome, {"org_id": org}), (SERVICES, Service, {}),
    ]  # fmt: skip


def _patterns(pattern: re.Pattern[str], documents: Sequence[Document]) -> list[str]:
    """The organization's own redaction patterns `pattern` finds in: its regular expression would read `[purged]`
    there (a character class), and what it masked would be stored unmasked from then on, silently."""
    held = next((d.data for d in documents if (d.collection, d.doc_id) == ("settings", "redaction")), None)
    extra = held.get("extra") if isinstance(held, dict) else None
    own = extra if isinstance(extra, dict) else {}
    return sorted(str(name) for name, regex in own.items() if isinstance(regex, str) and pattern.search(regex))
