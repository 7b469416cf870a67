"""The operational facts recall joins at query time: the service catalog, the effectiveness ledger,
the organization's re-ranking weights and its own verdict calibration. They are read from the org's
documents, never embedded."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, overload

import structlog

from grandbo.errors import UnreadableRecordError
from grandbo.flights import Turns
from grandbo.model import Calibration, RerankWeights
from grandbo.names import service_name
from grandbo.ports import Document, Only, OrgDocuments
from grandbo.tiers.effectiveness import Effectiveness, summarize
from grandbo.tiers.erasure import COLLECTION as ERASURES
from grandbo.tiers.incident_model import INCIDENTS, SUMMARY_KEYS, PastIncident, past_incident
from grandbo.tiers.kept_reads import Held, converted, over_most, read_kept
from grandbo.tiers.ledger_source import LedgerSource, win_rates
from grandbo.tiers.records import read_record, read_records
from grandbo.tiers.topology import Service, Topology

OUTCOMES, SERVICES, SETTINGS = "outcome", "service", "settings"
ALERTS = "alert"  # received alerts (`tiers.alerts`), named here so triage reads them without importing that tier
# What to do about a setting that cannot be read: setting it again replaces it (its history is kept).
RECALIBRATE = (
    "fit it again (`grandbo calibrate DIR --org ORG`) or remove it (`grandbo settings calibration --remove --org "
    "ORG`, or DELETE /v1/settings/calibration): its history is kept"
)
REWEIGH = (
    "set the weights again (`grandbo settings rerank --similarity W ... --org ORG`, or PUT /v1/settings/rerank): "
    "those not given take their defaults"
)
# Services written since a process's topology of the org was made that it takes as changes to it (`_catalog`); past
# them, the catalog is read whole and its graph made again (a 10,000-service import: 20 pieces of 500).
CATALOG_CHANGES = 1_000
T = TypeVar("T")
Stamp = tuple[int | None, Sequence[int]]  # the org's epoch, and a collection's version and the erasures' (`stamp`)
log = structlog.get_logger(__name__)


def topology(documents: OrgDocuments) -> Topology:
    return Topology(read_records(Service, documents.find(SERVICES), "service"))


def calibration(documents: OrgDocuments) -> Calibration | None:
    """The organization's own verdict calibration (`grandbo calibrate`), if it has one."""
    return _calibration(documents.get(SETTINGS, "calibration"))


def rerank_weights(documents: OrgDocuments) -> RerankWeights:
    return _weights(documents.get(SETTINGS, "rerank"))


def _settings(documents: OrgDocuments) -> tuple[Document | None, Document | None]:
    """The org's re-rank weights and calibration documents, read in one statement (a first recall read each)."""
    found = {doc.doc_id: doc for doc in documents.find(SETTINGS, ids=("rerank", "calibration"))}
    return found.get("rerank"), found.get("calibration")


def _calibration(doc: Document | None) -> Calibration | None:
    return read_record(Calibration, doc, "calibration", remedy=RECALIBRATE) if doc else None


def _weights(doc: Document | None) -> RerankWeights:
    return read_record(RerankWeights, doc, "re-ranking weights", remedy=REWEIGH) if doc else RerankWeights()


def _service(doc: Document) -> Service:
    return read_record(Service, doc, "service")


def cited_services(incidents: Iterable[PastIncident]) -> dict[str, dict[str, None]]:
    """Runbook id -> the services of every incident whose close or corroborated finding named it, in their order."""
    cited: dict[str, dict[str, None]] = {}
    for incident in incidents:
        for cited_id, where in incident.cites:
            cited.setdefault(cited_id, {}).update(dict.fromkeys(where))
    return cited


@dataclass
class Snapshot:
    """An org's catalog, weights and ledger as its facts were when it was made (`facts`); it holds every documents
    version since at which they are the same (`_Newest`). Its ledger's outcomes are never read whole: recall counts
    those of its candidates' runbooks (`win_rates`, `used_on`), a runbook's record those of the runbook
    (`effectiveness`), by the store (`LedgerSource`)."""

    version: int  # the documents version it was first made at
    topology: Topology
    weights: RerankWeights
    source: LedgerSource
    calibration: Calibration | None = None
    facts: tuple[int | None, ...] = ()  # the org's epoch and the version of each of FACTS and of erasures
    problems: list[str] = field(default_factory=list)  # settings that could not be read, and what stood in
    _cited: dict[str, dict[str, None]] = field(default_factory=dict)  # `cited_services` of the org's incidents

    @property
    def cited(self) -> dict[str, dict[str, None]]:
        """Runbook id -> the services of the incidents whose close or corroborated finding named it."""
        return self._cited

    @property
    def read_at(self) -> tuple[int | None, ...]:
        """The versions it was read at (`facts`): equal, the same snapshot whatever else the org wrote since."""
        return self.facts

    def effectiveness(self, runbook_id: str, service: str | None = None) -> Effectiveness:
        """The runbook's record (on one service), counted by the store (`LedgerSource.counted`). A service not named as
        outcomes keep it (`service_name`) has the empty record."""
        if service is not None and (not service or service_name(service) != service):
            return summarize(runbook_id, (), service)  # on a service no outcome's name is
        return self.source.counted([runbook_id])[runbook_id].effectiveness(runbook_id, service)

    def used_on(self, runbook_id: str) -> list[str]:
        """The services a runbook was used on: its outcomes' (in name order: recall asks which, not when), then those
        of the incidents that cited it."""
        return list({**self.source.tried([runbook_id])[runbook_id].on, **self._cited.get(runbook_id, {})})

    def win_rates(self, runbook_ids: Sequence[str], services: Sequence[str] = ()) -> dict[str, tuple[float, str]]:
        """Runbook id -> (win rate, explanation); for one of `services` when that pair has enough results. From the
        runbooks' results counted by the store."""
        tried = self.source.tried(runbook_ids)
        return win_rates(runbook_ids, services, lambda runbook_id, service: tried[runbook_id].of(service))


# The collections a snapshot is read from: a write to any other (a received alert, a key) leaves it as it was.
FACTS = (OUTCOMES, SERVICES, SETTINGS, INCIDENTS)


@dataclass
class _Newest:
    """An org's newest snapshot, and the documents versions it is known to hold: each read before a stamp of the
    org that found its facts as they are (the newest few: recall asks at its view's version, others at the one
    just read)."""

    snapshot: Snapshot
    versions: tuple[int, ...] = ()  # replaced whole (read by other threads), never changed in place

    def holds(self, version: int) -> bool:
        return version in self.versions


def _standing_in(read: Callable[[], T], default: T, instead: str, problems: list[str]) -> T:
    """A setting recall joins, or `default` while it cannot be read: a recall during an incident answers
    with the defaults and says so (the setting's own read, `grandbo settings ...`, still refuses)."""
    try:
        return read()
    except UnreadableRecordError as error:
        log.warning("operations.setting_unreadable", id=error.detail.get("id"), fields=error.detail.get("fields"))
        problems.append(f"{error.message.rstrip('.')}; recall used {instead} meanwhile")
        return default


class Kept(Protocol):
    """`Snapshots.kept` bound to one org: its documents of a collection, each converted once per process."""

    @overload
    def __call__(
        self, collection: str, convert: Callable[[Document], T], most: None = None, keys: Only = None, /
    ) -> list[T]: ...
    @overload
    def __call__(
        self, collection: str, convert: Callable[[Document], T], most: int, keys: Only = None, /
    ) -> list[T] | None: ...


class Snapshots:
    """The newest snapshot of each organization, shared by every handle of one open store, reread only when
    one of the documents it is made of changed; and, kept the same way, one collection's documents each
    handle would otherwise read whole (`kept`)."""

    # Of this many at most (the least recently read go first). A snapshot is small (a catalog, some runbooks'
    # counts, weights) and recall reads one on every call: a server of a few hundred orgs keeps them all. A
    # collection kept (for triage: an org's alerts, changes and incidents; three per org: the catalog is kept as its
    # snapshot's topology) can be large: 64 orgs' worth and more.
    KEPT_SNAPSHOTS = 1024
    KEPT_COLLECTIONS = 4 * 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_org: OrderedDict[str, _Newest] = OrderedDict()
        self._kept: OrderedDict[tuple[str, str], Held[Any]] = OrderedDict()
        self._due: dict[tuple[str, str], float] = {}
        self._turns = Turns()  # an org's snapshot made by one thread at a time

    def get(
        self, org: str, documents: OrgDocuments, version: int | None = None, read: Callable[[], None] = lambda: None
    ) -> Snapshot:
        """The org's facts as of `version` (its documents version; read now when None); `read` is called once, when
        the store is read for them, before they are converted, or before this thread waits for another making them (a
        caller's reads together of the org ended then: its pooled connection is not held idle meanwhile)."""
        version = documents.version() if version is None else version
        with self._lock:
            cached = self._by_org.get(org)
            if cached is not None:
                self._by_org.move_to_end(org)  # the least recently read go first
        if cached is not None and cached.holds(version):
            return cached.snapshot
        # One thread at a time makes an org's snapshot: those that arrive meanwhile wait for it, then take it when it
        # holds the version they read (each made its own, the catalog's graph made whole 0.1-0.4 s at 10,000
        # services, as many times as requests arrived at once: probe 28). Another org's never waits here.
        # The caller's reads end before it waits (READ COMMITTED, each read sees what was committed before it: the
        # facts read after the wait are what they would have been in its transaction, the org's epoch in their stamp).
        reads = [read]  # `read`, until called

        def waiting() -> None:
            reads.pop()()

        with self._turns.of(org, waiting):
            with self._lock:
                cached = self._by_org.get(org)
            if cached is not None and cached.holds(version):
                return cached.snapshot
            return self._made(org, documents, version, cached, reads[0] if reads else lambda: None)

    def _made(
        self, org: str, documents: OrgDocuments, version: int, cached: _Newest | None, read: Callable[[], None]
    ) -> Snapshot:
        """The org's snapshot holding `version`: the newest kept when its facts are as they are now, else one made
        from it (what changed since it was read); kept."""
        # The stamp and each part's documents read in one transaction (a first recall made eight), and converted
        # once it is over: its pooled connection is not held while the catalog and the incidents become objects.
        with documents.reading():
            epoch, marks = documents.stamp([*FACTS, ERASURES])  # an erasure rewrites them in place
            facts = (epoch, *marks)
            # The same facts: the newest holds this version too, read before or after those it holds (a recall asks
            # at its view's, which may be older: taken as older, it made the newest again, then the next request did:
            # review 29). Versions are never compared: a dropped org made again starts over at 0 (its new epoch is in
            # the stamp).
            held = cached if cached is not None and cached.snapshot.facts == facts else None
            made = None if held is not None else self._remade(org, documents, version, (epoch, marks),
                                                              cached.snapshot if cached else None)  # fmt: skip
        read()
        newest = held if made is None else _Newest(made())
        assert newest is not None, "held, or made now"
        with self._lock:
            newest.versions = (*newest.versions[-7:], version)
            self._by_org[org] = newest
            self._by_org.move_to_end(org)
            while len(self._by_org) > self.KEPT_SNAPSHOTS:
                self._by_org.popitem(last=False)
        return newest.snapshot

    def _remade(
        self, org: str, documents: OrgDocuments, version: int, stamped: tuple[int | None, list[int]],
        cached: Snapshot | None,
    ) -> Callable[[], Snapshot]:  # fmt: skip
        """The org's snapshot made again from its stamp just read (`stamped`, of FACTS and the erasures): each part
        read again only when a collection it is made of changed (a finding added to an incident reads neither the
        catalog nor the ledger; all of it after an erasure or in a new epoch of the org). Read now; made, the
        documents converted, by what it returns."""
        epoch, marks = stamped
        facts = (epoch, *marks)

        def same(collection: str) -> bool:
            held = cached.facts if cached is not None else ()
            at = 1 + FACTS.index(collection)
            return len(held) == len(facts) and (held[0], held[-1], held[at]) == (facts[0], facts[-1], facts[at])

        def stamp(collection: str) -> Stamp:  # a collection's part of the stamp just read: not read again
            return epoch, (marks[FACTS.index(collection)], marks[-1])

        ledger = None if cached is not None and same(OUTCOMES) else _ledger(org, documents, facts, cached)
        # The incidents as a triage and the analytics read them: kept, and read again only once written.
        incidents = None if cached is not None and same(INCIDENTS) else self._kept_read(
            org, documents, INCIDENTS, past_incident, None, SUMMARY_KEYS, stamp(INCIDENTS))  # fmt: skip
        settings = None if cached is not None and same(SETTINGS) else _settings(documents)
        catalog = None if cached is not None and same(SERVICES) else _catalog(documents, facts, cached)

        def made() -> Snapshot:
            if ledger is None:
                assert cached is not None
                source = cached.source  # the counts kept stay the same
            else:
                source = ledger()
            if incidents is not None:
                cited = cited_services(incidents() or ())
            else:
                assert cached is not None
                cited = cached._cited
            if settings is None:
                assert cached is not None
                weights, calibrated, problems = cached.weights, cached.calibration, cached.problems
            else:
                problems = []
                weights = _standing_in(lambda: _weights(settings[0]), RerankWeights(), "the default weights", problems)
                calibrated = _standing_in(lambda: _calibration(settings[1]), None,
                                          "the model's shipped calibration, if any", problems)  # fmt: skip
            if catalog is not None:
                topology = catalog()
            else:
                assert cached is not None
                topology = cached.topology
            return Snapshot(version, topology, weights, source, calibrated, facts=facts, problems=problems,
                            _cited=cited)  # fmt: skip

        return made

    @overload
    def kept(
        self, org: str, documents: OrgDocuments, collection: str, convert: Callable[[Document], T], most: None = None,
        keys: Only = None,
    ) -> list[T]: ...  # fmt: skip
    @overload
    def kept(
        self, org: str, documents: OrgDocuments, collection: str, convert: Callable[[Document], T], most: int,
        keys: Only = None,
    ) -> list[T] | None: ...  # fmt: skip
    def kept(
        self, org: str, documents: OrgDocuments, collection: str, convert: Callable[[Document], T],
        most: int | None = None, keys: Only = None,
    ) -> list[T] | None:  # fmt: skip
        """Every document of `collection`, each converted once: after a write only the documents written since
        are read again (an erasure, or a version that went back, reads them all). With `most`, for a
        collection whose documents all have a `ref`: None when it holds more than that, counted on the store's index
        and none of them read, whatever was written since the last read (the caller reads the store for what it needs:
        one org's storm of changes took the process's memory, 62 MiB at 40,000 changes, growing with each).
        `keys`: the only keys of each document's data `convert` reads, all a whole read asks the store for (of an
        org's alerts, the alert without the recall and plan kept with it: 1 KB of JSON, not 24)."""
        return self._kept_read(org, documents, collection, convert, most, keys)()

    def keeps(self, org: str, documents: OrgDocuments, collection: str, convert: Callable[[Document], Any]) -> bool:
        """Whether the org's `collection` is kept converted by `convert` (or known over its bound) and its next `kept`
        reads only what was written since: not after an erasure, in a new epoch of the org or when its version went
        back (each reads the whole again; a triage then reads the store for what it needs and leaves the whole read
        to a background thread). One read of the org's stamp."""
        with self._lock:
            held = self._kept.get((org, collection))
        if held is None or held.convert != convert:
            return False
        epoch, (version, erased) = documents.stamp([collection, ERASURES])
        return (held.epoch, held.erased) == (epoch, erased) and version >= held.version

    def _kept_read(
        self, org: str, documents: OrgDocuments, collection: str, convert: Callable[[Document], T],
        most: int | None = None, keys: Only = None, stamp: Stamp | None = None,
    ) -> Callable[[], list[T] | None]:  # fmt: skip
        """`kept`'s documents read now (in the transaction of the `reading` block it is called in, if any); what it
        returns converts them and keeps them, once that block is over. `stamp`: the org's epoch and the collection's
        and the erasures' versions, when the caller read them just before (else read here)."""
        with self._lock:
            cached = self._kept.get((org, collection))
            if cached is not None:
                self._kept.move_to_end((org, collection))
        # An erasure (of a text, or of the copies of a purged entry) rewrites documents in place (no event of theirs:
        # the collection's version stays): its audit record says it happened.
        # A new epoch: the org was dropped and created again (perhaps by another process), among others.
        with documents.reading():  # the stamp and the read after it in one transaction
            epoch, (version, erased) = stamp or documents.stamp([collection, ERASURES])
            same = cached is not None and (cached.epoch, cached.erased, cached.convert) == (epoch, erased, convert)
            if cached is not None and same and cached.version == version:
                unchanged = cached.items
                return lambda: None if unchanged is None else list(unchanged.values())
            held = cached if cached is not None and same and version > cached.version else None  # brought up to date
            # Over `most` it stays so as the org writes (a prune that brings it under is not counted for).
            over = held is not None and held.items is None
            read = over_most if over else read_kept(documents, collection, convert, most, held, keys)

        def made() -> list[T] | None:
            items = read()
            with self._lock:
                self._kept[(org, collection)] = Held(epoch, version, erased, convert, items)
                self._kept.move_to_end((org, collection))
                while len(self._kept) > self.KEPT_COLLECTIONS:
                    self._kept.popitem(last=False)
            return None if items is None else list(items.values())

        return made

    def due(self, org: str, task: str, every_seconds: float) -> bool:
        """True at most once every `every_seconds` per org and task in this process: upkeep that rides a hot
        path (pruning old alerts on a webhook delivery) without costing every request."""
        now = time.monotonic()
        with self._lock:
            last = self._due.get((org, task))
            if last is not None and now - last < every_seconds:
                return False
            if len(self._due) > 10_000:  # one entry per org and task: never grow without bound
                self._due.clear()
            self._due[(org, task)] = now
        return True

    def due_again(self, org: str, task: str) -> None:
        """Make `task` due at its next chance (upkeep that stopped at its bound and has more to do)."""
        with self._lock:
            self._due.pop((org, task), None)

    def forget(self, org: str) -> None:
        """Drop what is kept of an organization (it was dropped or replaced)."""
        with self._lock:
            self._by_org.pop(org, None)
            for key in [key for key in self._kept if key[0] == org]:
                del self._kept[key]


def _catalog(documents: OrgDocuments, facts: tuple[int | None, ...], cached: Snapshot | None) -> Callable[[], Topology]:
    """The org's catalog as the next snapshot holds it: `cached`'s topology with the services written since it was read
    (`Topology.changed`), up to CATALOG_CHANGES of them; else, and the first time, after an erasure, in a new epoch of
    the org or when the version went back, every service read and the graph made whole. Read now; what it returns
    makes it, the services converted."""
    at = 1 + FACTS.index(SERVICES)
    held = cached.facts if cached is not None else ()
    same = len(held) == len(facts) and (held[0], held[-1]) == (facts[0], facts[-1])  # the epoch, the erasures
    after, now = (held[at], facts[at]) if same else (None, None)
    if cached is not None and after is not None and now is not None and now > after:
        since = documents.changed(SERVICES, after, CATALOG_CHANGES)
        if since is not None:
            docs, gone, before = *since, cached.topology

            def brought() -> Topology:
                written = converted(SERVICES, docs, _service)  # one that cannot be read is dropped, as when whole
                unreadable = [doc.doc_id for doc in docs if doc.doc_id not in written]
                return before.changed(written.values(), [*gone, *unreadable])

            return brought
    every = documents.find(SERVICES)
    return lambda: Topology(converted(SERVICES, every, _service).values())


def _ledger(
    org: str, documents: OrgDocuments, facts: tuple[int | None, ...], cached: Snapshot | None
) -> Callable[[], LedgerSource]:
    """The org's ledger as the next snapshot counts it: `cached`'s counts of the runbooks no outcome written since
    named, kept (`LedgerSource.carried`); none kept the first time, after an erasure, in a new epoch of the org or
    when the version went back. Read now; what it returns makes it."""
    at = 1 + FACTS.index(OUTCOMES)
    held = cached.facts if cached is not None else ()
    same = len(held) == len(facts) and (held[0], held[-1]) == (facts[0], facts[-1])  # the epoch, the erasures
    after, now = (held[at], facts[at]) if same else (None, None)
    if cached is not None and after is not None and now is not None and now > after:
        carried = cached.source.carried(documents, after, now)
        return lambda: carried
    return lambda: LedgerSource(documents, OUTCOMES, facts[at])
