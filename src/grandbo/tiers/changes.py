"""What changed: the deploys, config pushes and flag flips an organization's change sources reported.

A change is a document (collection `change`) whose id is its source and the source's id (`github:4711`), so a
second delivery of a change finds the one stored. Its `ref` is the time it took effect (`at`, UTC) spelled in
fixed-width digits, so the store reads a window of changes in time order through its index on `ref`, in one
query, whatever the number of changes the organization keeps (`Changes.between`, `Changes.find`).

A delivery the store already holds as it is writes nothing. One that says something else of the same change (a
GitHub deployment's status moving from in_progress to success, an Argo CD sync finishing) replaces it: the last
delivery wins, and the document's history keeps every earlier version; the change keeps the time it was first
received. A change's text (summary, url) is masked by the organization's redaction patterns before it is stored;
its ids, service, version and times are not. Its service becomes the catalog's name when the catalog knows it
(or one of its aliases). A time without a zone is taken as UTC; one before 2000 or more than a day ahead is
refused (`_refuse_implausible`).

Changes are kept as long as alerts (`GRANDBO_ALERT_RETENTION_DAYS`, counted from their last write), then pruned
as alerts are: a delivery that stores something, at most hourly per organization and process, hands a prune
round to the write-behind, which deletes at most PRUNE_BATCH changes, the oldest first, in one write; a full
round makes the next delivery prune again; a failing round is logged (`changes.prune_failed`), never raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

import structlog

from grandbo.errors import ConflictError, InvalidInputError, NotFoundError, UnreadableRecordError
from grandbo.model import utcnow
from grandbo.names import service_name
from grandbo.pages import Mark
from grandbo.ports import Document, DocumentWrite, Matching, OrgDocuments, Position
from grandbo.redaction import Redactor
from grandbo.tiers.change_model import Change, ChangeKind, NewChange
from grandbo.tiers.records import read_listed, read_record, read_records
from grandbo.tiers.retention import PRUNE_BATCH, prune_round
from grandbo.tiers.retry import rewritten
from grandbo.tiers.topology import Topology

CHANGES = "change"
MAX_WINDOW = 10_000  # changes `between` returns at most (those nearest the window's end)
FUTURE_SKEW = timedelta(days=1)  # how far ahead of this clock a change's time may be (another host's clock)
# The earliest time a change may have. Not the retention: that counts from a change's last write, and a backfill of
# last year's deploys is a real use. Every "no time" a sender may write falls before it (Go's 0001-01-01, .NET's
# DateTime.MinValue, Windows' 1601-01-01, a spreadsheet's 1899-12-30, the Unix epoch), and no change a source
# reports today is that old; filed at such a time, a change is outside every triage window (probe 20b C1).
EARLIEST_CHANGE = datetime(2000, 1, 1, tzinfo=UTC)
RECEIVE_ATTEMPTS = 64  # a delivery's write, read again after each conflict with another delivery of its changes
Outcome = Literal["new", "updated", "unchanged"]
Replaces = bool | Callable[["Change", NewChange], bool]  # whether a delivery replaces the change stored (`receive`)
log = structlog.get_logger(__name__)


def utc(at: datetime) -> datetime:
    """`at` in UTC (a time without a zone is taken as UTC)."""
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def at_key(at: datetime) -> str:
    """A change's `ref`: its time in UTC as 20 digits, which sort as the times do."""
    at = utc(at)
    return f"{at.year:04d}" + at.strftime("%m%d%H%M%S%f")


def _refuse_implausible(changes: Sequence[NewChange]) -> None:
    """A change dated more than FUTURE_SKEW ahead of now is refused: it would sit first in every list and
    outrank the real changes of a plan; a change's time is when it took effect. So is one before EARLIEST_CHANGE:
    a time the sender left unset, which would hide the change from every plan."""
    old = [change for change in changes if utc(change.at) < EARLIEST_CHANGE]
    if old:
        first = old[0]
        raise InvalidInputError(
            f"The change {first.id!r} is dated {utc(first.at):%Y-%m-%d %H:%M}Z, before {EARLIEST_CHANGE:%Y}: no "
            f"change is that old ({len(old)} such in this delivery; nothing was stored). A time like it is one the "
            "sender left unset (Go's zero time 0001-01-01, the Unix epoch 1970-01-01): `at` must be when the "
            "change took effect; send its real time, or leave it out where the source allows (`grandbo change add` "
            "then uses now).",
            detail={"fields": ["at"], "ids": [change.id for change in old[:20]],
                    "earliest": EARLIEST_CHANGE.isoformat()},
        )  # fmt: skip
    latest = utcnow() + FUTURE_SKEW
    ahead = [change for change in changes if utc(change.at) > latest]
    if ahead:
        first = ahead[0]
        raise InvalidInputError(
            f"The change {first.id!r} is dated {utc(first.at):%Y-%m-%d %H:%M}Z, more than a day ahead of now "
            f"({len(ahead)} such in this delivery; nothing was stored). `at` must be when the change took effect "
            "(a clock skew of up to a day is accepted): send its real time, or leave it out where the source "
            "allows (`grandbo change add` then uses now).",
            detail={"fields": ["at"], "ids": [change.id for change in ahead[:20]], "latest": latest.isoformat()},
        )


def change_key(source: str, change_id: str) -> str:
    """The document id of a change: its source and the source's id."""
    return f"{source}:{change_id}"


class Changes:
    """One organization's change events."""

    def __init__(
        self,
        documents: OrgDocuments,
        redactor: Callable[[], Redactor],
        topology: Callable[[], Topology] = Topology,
        retention_days: float = 0,
        due: Callable[[], bool] = lambda: False,
        due_again: Callable[[], None] = lambda: None,
        upkeep: Callable[[Callable[[], None]], object] = lambda task: task(),
        org: str = "",
    ) -> None:
        self.documents, self._redactor, self._topology = documents, redactor, topology
        self.retention_days, self._due, self._due_again, self._upkeep = retention_days, due, due_again, upkeep
        self._org = org  # for the logs

    def receive(
        self, changes: Sequence[NewChange], source: str, *, actor: str = "webhook", replace: Replaces = True
    ) -> list[tuple[Change, Outcome]]:
        """Store the changes of one delivery from `source` in one write; each comes back with what became of it:
        `new`, `updated` (the same id said something else: the last delivery wins, the history keeps the rest) or
        `unchanged` (a redelivery: nothing written; also whatever it says of a change already stored when
        `replace` is False or says no for that stored change and this delivery of it: a GitHub deployment event
        that its statuses have updated since, an in_progress status arriving after the success). A stored change
        that cannot be read is replaced (its history keeps it). Every write expects the version it read, so two
        deliveries of one change racing each other never store it twice (`tiers.retry`)."""
        unique = list({change.id: change for change in changes}.values())  # the last of a repeated id wins
        if not unique:
            return []
        _refuse_implausible(unique)
        redactor, topology = self._redactor(), self._topology()
        masked = [self._masked(change, redactor, topology) for change in unique]

        def attempt() -> list[tuple[Change, Outcome]]:
            out: list[tuple[Change, Outcome]] = []
            writes: list[DocumentWrite] = []
            now = utcnow()
            for change in masked:
                key = change_key(source, change.id)
                doc = self.documents.get(CHANGES, key)
                known = _readable(doc)
                same = known is not None and known.model_dump(exclude={"source", "received_at"}) == change.model_dump()
                if known is not None and (same or not (replace(known, change) if callable(replace) else replace)):
                    out.append((known, "unchanged"))
                    continue
                stored = Change(**change.model_dump(), source=source, received_at=known.received_at if known else now)
                event = "change.updated" if doc else "change.received"
                writes.append(DocumentWrite(CHANGES, key, stored.model_dump(mode="json"), event, ref=at_key(stored.at),
                                            expected_version=doc.version if doc else 0))  # fmt: skip
                out.append((stored, "updated" if doc else "new"))
            if writes:
                self.documents.put(writes, actor)
            return out

        out = rewritten(attempt, attempts=RECEIVE_ATTEMPTS)
        if any(outcome != "unchanged" for _, outcome in out) and self.retention_days and self._due():
            self._upkeep(self._prune_round)
        return out

    def add(self, change: NewChange, *, source: str = "cli", actor: str = "cli") -> tuple[Change, Outcome]:
        """Store one change (`grandbo change add`), as `receive` does."""
        return self.receive([change], source, actor=actor)[0]

    @staticmethod
    def _masked(change: NewChange, redactor: Redactor, topology: Topology) -> NewChange:
        # In lower case as the catalog, the entries and the alert webhooks name services: a change of `Payments-API`
        # (a repository's name) was in no plan of the alerts on payments-api, nor in `GET /v1/changes?service=`.
        lowered = service_name(change.service)
        named = topology.canonical(lowered)
        service = named if named and named in topology else lowered
        url = _fitted("url", redactor.text(change.url)) if change.url else change.url
        return change.model_copy(
            update={"summary": _fitted("summary", redactor.text(change.summary)), "url": url,
                    "service": service, "at": utc(change.at)}
        )  # fmt: skip

    # ------------------------------------------------------------------ reads

    def between(
        self, since: datetime, until: datetime, services: Sequence[str] | None = None, *, limit: int = MAX_WINDOW
    ) -> list[Change]:
        """Every change that took effect from `since` to `until` (both included), of any service or only of
        `services` (catalog names), ordered by `at` (then by source and id), the earliest first. One read of the
        store, of the window's changes only; past `limit` changes, those nearest `until` are kept."""
        if utc(until) < utc(since):
            return []
        wanted = sorted(set(services)) if services is not None else None
        if wanted is not None and len(wanted) != 1:  # one read a service: another's storm never takes the limit
            found = [change for service in wanted for change in self.between(since, until, [service], limit=limit)]
            return sorted(found, key=lambda change: (change.at, change.source, change.id))[-limit:]
        match: Matching | None = {("service",): wanted[0]} if wanted else None
        docs = self.documents.ranged(CHANGES, at_key(since), at_key(until), limit, descending=True, match=match)
        return read_records(Change, reversed(docs), "change", versioned=False)

    def find(
        self, *, service: str | None = None, kind: ChangeKind | str | None = None, source: str | None = None,
        since: datetime | None = None, until: datetime | None = None, limit: int = 50, cursor: Position = None,
    ) -> tuple[list[Change], Position]:  # fmt: skip
        """Up to `limit` changes, the latest `at` first, and where the next page starts (None: this was the last;
        pass it back as `cursor`). Only those of `service` (its catalog name or an alias), `kind` and `source`
        that took effect from `since` to `until`. The store reads the page's changes only."""
        found, more = self.page(service=service, kind=kind, source=source, since=since, until=until, limit=limit,
                                cursor=cursor)  # fmt: skip
        return [change for change, _ in found], more

    def page(
        self, *, service: str | None = None, kind: ChangeKind | str | None = None, source: str | None = None,
        since: datetime | None = None, until: datetime | None = None, limit: int = 50, cursor: Position = None,
    ) -> tuple[list[tuple[Change, Mark]], Position]:  # fmt: skip
        """`find`, each change with its place in the list (`read_listed`: the time it took effect and its key)."""
        match: dict[tuple[str, ...], str] = {}
        if service:
            match[("service",)] = self._topology().canonical(service_name(service)) or service
        if kind:
            match[("kind",)] = _kind(kind).value
        if source:
            match[("source",)] = source
        after = (at_key(cursor[0]), cursor[1]) if cursor else None
        low, high = (at_key(since) if since else None), (at_key(until) if until else None)
        docs = self.documents.ranged(CHANGES, low, high, limit, after=after, descending=True, match=match)
        more = (_at_of(docs[-1]), docs[-1].doc_id) if len(docs) == limit and docs else None
        return read_listed(Change, docs, "change", at=_at_of, versioned=False), more

    def get(self, change_id: str) -> Change:
        """One change, by its key (`source:id`, as `GET /v1/changes` lists it) or by the source's id alone when only
        one source used it."""
        doc = self.documents.get(CHANGES, change_id)
        if doc is None:
            found = self.documents.newest(CHANGES, 2, match={("id",): change_id})
            doc = found[0] if len(found) == 1 else None
            if len(found) > 1:
                raise NotFoundError(
                    f"Several sources reported a change {change_id!r}: ask for it as SOURCE:ID "
                    f"({', '.join(d.doc_id for d in found)}).",
                    detail={"change_id": change_id, "keys": [d.doc_id for d in found]},
                )
        if doc is None:
            raise NotFoundError(
                f"No change {change_id!r} in this organization: list them with `GET /v1/changes` or "
                "`grandbo change list`.",
                detail={"change_id": change_id},
            )
        return read_record(Change, doc, "change", versioned=False)

    # ------------------------------------------------------------------ retention

    def _prune_round(self) -> None:  # as upkeep (`tiers.retention`)
        prune_round(lambda n: self.prune(limit=n), self._due_again, failed="changes.prune_failed", org=self._org)

    def prune(self, now: datetime | None = None, *, limit: int = PRUNE_BATCH) -> int:
        """Delete up to `limit` changes last written before the retention, the oldest first, in one write; return
        how many. A change written meanwhile (its version moved) waits for the next round."""
        if not self.retention_days:
            return 0
        cutoff = (now or utcnow()) - timedelta(days=self.retention_days)
        due = self.documents.oldest(CHANGES, cutoff, limit, keys=("id",))
        writes = [DocumentWrite(CHANGES, doc.doc_id, None, "change.pruned", ref=doc.ref, expected_version=doc.version)
                  for doc in due]  # fmt: skip
        try:
            if writes:
                self.documents.put(writes, "retention")
        except ConflictError:
            return 0
        if writes:
            log.info("changes.pruned", org_id=self._org, pruned=len(writes))
        return len(writes)


def _readable(doc: Document | None) -> Change | None:
    """The stored change, or None when there is none or it cannot be read (a delivery then replaces it)."""
    try:
        return read_record(Change, doc, "change", versioned=False) if doc else None
    except UnreadableRecordError:
        log.warning("change.unreadable_replaced", change=doc.doc_id if doc else None)
        return None


def _kind(kind: ChangeKind | str) -> ChangeKind:
    try:
        return ChangeKind(kind)
    except ValueError:
        raise InvalidInputError(
            f"Unknown change kind {kind!r}: use one of {', '.join(k.value for k in ChangeKind)}.",
            detail={"kind": str(kind), "kinds": [k.value for k in ChangeKind]},
        ) from None


def _at_of(doc: Document) -> datetime:
    """The time a change's `ref` spells (what a page's cursor holds)."""
    return datetime.strptime(doc.ref or "", "%Y%m%d%H%M%S%f").replace(tzinfo=UTC)


def _fitted(field: str, text: str) -> str:
    """`text` cut to `NewChange.field`'s limit again: a mask is longer than the short secret it replaced."""
    limit: int = next(m.max_length for m in NewChange.model_fields[field].metadata if hasattr(m, "max_length"))
    return text[:limit]
