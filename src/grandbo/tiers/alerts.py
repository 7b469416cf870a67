"""Alerts the webhooks received: stored first, then each one's recall result kept with it.

An alert is a document (collection `alert`) whose id comes from the sender's event id, so a redelivery
finds the one already stored instead of storing it twice. All alerts of one delivery are stored in one
write: a delivery is stored whole or not at all. Recall runs after the store has committed; if it fails,
the alert stays, with the error, and can be recalled again. An alert's text (summary, description, label
values, links) is masked by the organization's redaction patterns before it is stored and asked; its ids are not.

Alerts are kept `GRANDBO_ALERT_RETENTION_DAYS` (90) after their last delivery or recall, then pruned; an alert an
incident lists (by its id or the sender's event id) is never pruned, nor one that cannot be read or is named in an
incident whose alert list cannot be read. The document log keeps their history, as it keeps every document's. A
delivery that stores a new alert, at most hourly per organization and process, hands a prune round to the
write-behind (`OrgMemory.defer`: off the request in a server, after the delivery is stored), after the delivery's
own write has committed: the round deletes at most PRUNE_BATCH alerts, the oldest first, in one write, and a full
round makes the next delivery prune again. It reads the due alerts only, and of the incidents their alert lists
(`Alerts.prune`). A round that fails is logged (`alerts.prune_failed`) and tried again an hour later; the delivery
it rode on is never refused for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import structlog
from pydantic import BaseModel, Field, ValidationError, ValidatorFunctionWrapHandler, field_validator

from grandbo.errors import ConflictError
from grandbo.ingest.alert import Alert
from grandbo.model import RecallResult, utcnow
from grandbo.names import service_name
from grandbo.ports import Document, DocumentWrite, NewWork, Only, OrgDocuments, Position, Work
from grandbo.redaction import Redactor
from grandbo.redrive import ALERT_TRIAGE
from grandbo.tiers.alert_status import moved, once_each, reopens
from grandbo.tiers.alert_text import KEPT_BODY_CHARS as KEPT_BODY_CHARS  # named here too: tests read them here
from grandbo.tiers.alert_text import KEPT_META_BYTES as KEPT_META_BYTES
from grandbo.tiers.alert_text import RECALLED, kept, masked_alert, recalled
from grandbo.tiers.edited import change_of
from grandbo.tiers.group_reads import as_read, open_groups
from grandbo.tiers.grouping import ALERT_GROUPS, TEXT_TESTS, AlertGroup, Groups, alert_time, in_order, place, slot_of
from grandbo.tiers.grouping import GROUP_SLOTS as GROUP_SLOTS  # named there: a delivery writes its services' slots
from grandbo.tiers.incident_model import INCIDENTS
from grandbo.tiers.operations import ALERTS as ALERTS  # named there: triage reads alerts without this tier
from grandbo.tiers.records import next_page, read_record, read_records, required, stored
from grandbo.tiers.retention import PRUNE_BATCH as PRUNE_BATCH  # named there; tests and benchmarks read it here
from grandbo.tiers.retention import prune_round
from grandbo.tiers.retry import rewritten
from grandbo.tiers.topology import Topology
from grandbo.triage.plan import TriagePlan

# What a list of alerts shows of each (`Alerts.page`'s keys): not the recall and plan kept with it (about 24 KB).
LISTED = ("id", "alert", "query", "state", "error", "group_id", "deliveries", "updated_at")
log = structlog.get_logger(__name__)


class StoredAlert(BaseModel):
    """An alert as kept: the normalized alert, the sentence asked, and what recall answered."""

    id: str = Field(description="The alert's id: `GET /v1/alerts/{id}` answers it.")
    alert: Alert
    query: str
    state: Literal["received", "recalled", "recall_failed"] = "received"
    recall: RecallResult | None = Field(default=None, description="What recall answered for the query.")
    plan: TriagePlan | None = Field(
        default=None, description="The triage plan; its runbooks' records are read from the ledger when it is read."
    )
    error: str | None = None
    group_id: str | None = Field(default=None, description="The group it joined (`GET /v1/alert-groups/{id}`).")
    deliveries: int = 1
    updated_at: datetime = Field(default_factory=utcnow)
    version: int = Field(default=0, exclude=True)

    @field_validator("recall", "plan", mode="wrap")
    @classmethod
    def _kept_shape(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A recall or plan kept by an older release in a shape this one cannot read is left out (None: triage
        the alert again), rather than making the alert itself unreadable."""
        try:
            return handler(value)
        except ValidationError:
            log.warning("alert.kept_result_unreadable", kind=type(value).__name__)
            return None

    def brief(self, said: Mapping[str, Any] | None = None) -> AlertBrief:
        """What a webhook's answer and a list say of the alert: the rest is at `GET /v1/alerts/{id}`. Its recall
        as `said` (`recalled`, as a list reads it) when the recall itself was not read."""
        if said is None:
            said = recalled(self.recall) or {}
            hit = self.recall.hits[0] if self.recall and self.recall.hits else None
            top = {**said["top_match"], "title": hit.entry.title} if hit else None
        else:
            top = said.get("top_match")
        runbook = self.plan.runbooks[0] if self.plan and self.plan.runbooks else None
        return AlertBrief(
            id=self.id, source=self.alert.source, status=self.alert.status, state=self.state,
            service=self.alert.service, severity=self.alert.severity.value if self.alert.severity else None,
            summary=self.alert.summary[:200], received_at=self.alert.received_at,
            seen_before=said.get("seen_before"), evidence=said.get("evidence"),
            top_match=TopMatch.model_validate(top) if top else None,
            top_runbook=TopRunbook(id=runbook.id, title=runbook.title, win_rate=runbook.win_rate,
                                   attempts=runbook.attempts) if runbook else None,
            error=self.error, href=f"/v1/alerts/{self.id}", group_id=self.group_id,
        )  # fmt: skip


class TopMatch(BaseModel):
    """The memory recall ranked first for an alert."""

    id: str
    title: str
    kind: str
    label: Literal["frequent", "rare", "novel"] | None = None


class TopRunbook(BaseModel):
    """The runbook the plan puts first, with its record."""

    id: str
    title: str
    win_rate: float
    attempts: int


class AlertBrief(BaseModel):
    """An alert in a few hundred bytes: what fired, the verdict and the top match (the whole at `href`)."""

    id: str = Field(description="`GET /v1/alerts/{id}` answers it (the recall, the plan).")
    source: str
    status: Literal["firing", "resolved"]
    state: Literal["received", "recalled", "recall_failed"]
    service: str | None
    severity: str | None
    summary: str = Field(description="What fired (cut at 200 characters).")
    received_at: datetime
    seen_before: bool | None = Field(description="Recall's verdict: seen before, not, or no verdict (null).")
    evidence: float | None
    top_match: TopMatch | None
    top_runbook: TopRunbook | None
    error: str | None = Field(description="Why recall failed, when it did (state recall_failed).")
    href: str
    group_id: str | None = Field(None, description="The alert group it joined (`GET /v1/alert-groups/{id}`).")


def triaged(alerts: list[Alert], known: Mapping[str, StoredAlert] | None = None) -> list[Alert]:
    """The alerts of a delivery `Alerts.receive` would triage, once each: the firing ones (as it keeps them) not in
    `known` (those stored, `Alerts.known`), and those whose delivery reopens the stored one (`alert_status`). A
    redelivered alert is otherwise never triaged again (a resolve is a change of status, kept; a firing one after
    its resolve is a late replay)."""
    known = known or {}
    return [alert for alert in once_each(alerts).values() if alert.status == "firing" and (
        (held := known.get(alert.id)) is None or reopens(held.alert, alert, held.updated_at))]  # fmt: skip


RECEIVE_ATTEMPTS = 64  # a delivery's write, read again after each conflict with another delivery of its alerts


class Alerts:
    """One organization's received alerts."""

    def __init__(
        self,
        documents: OrgDocuments,
        redactor: Callable[[], Redactor],
        retention_days: float = 0,
        due: Callable[[], bool] = lambda: False,
        *,
        org: str = "",
        upkeep: Callable[[Callable[[], None]], object] = lambda task: task(),
        due_again: Callable[[], None] = lambda: None,
        topology: Callable[[], Topology] = Topology,
        group_window_minutes: float = 0,
    ) -> None:
        self.documents = documents
        self._redactor = redactor
        self.retention_days = retention_days
        self._due = due  # whether this process should prune now (at most hourly per org)
        self._org, self._upkeep, self._due_again = org, upkeep, due_again  # the org: for the logs
        self._topology = topology  # the catalog: a vendor's name of a service (an alias) becomes the catalog's
        self.group_window = timedelta(minutes=group_window_minutes)  # 0: alerts are not grouped

    def known(self, alerts: list[Alert]) -> dict[str, StoredAlert]:
        """Those of a delivery's alerts already stored, by id: one read of the store for them all, by their ids
        (an unreadable one is an UnreadableRecordError, as `find` says)."""
        docs = self.documents.find(ALERTS, ids=list(dict.fromkeys(alert.id for alert in alerts)))
        return {doc.doc_id: read_record(StoredAlert, doc, "alert") for doc in docs}

    def receive(
        self, alerts: list[Alert], *, actor: str = "webhook", known: dict[str, StoredAlert] | None = None
    ) -> list[tuple[StoredAlert, bool]]:
        """Store the alerts of one delivery in one write; each comes back with True when it is new, or reopened (a
        redelivery is counted and its status moved as `tiers.alert_status` says, but not recalled again, unless it
        reopens a resolved alert: a PagerDuty incident reopened, which is `received` again, event `alert.reopened`).
        Every write expects the version it read, so a delivery racing another for the same alert re-reads and counts
        as its redelivery (`tiers.retry`): never stored twice, never recalled twice, never refused. The triage
        of each new or reopened firing alert is recorded in the same write, as pending work (`grandbo.redrive`):
        whatever happens to the request after, it is done. Each new alert joins an alert group in the same write
        (`tiers.grouping`: the open groups of the window read once per attempt); a redelivered one keeps its group.
        Its stored alerts are read in one read (`Alerts.known`); a caller that read them already passes them as
        `known`, used for the first attempt only (the write's version check catches a stale one: then read again)."""
        unique = list(once_each(alerts).values())
        if unique:
            redactor, topology = self._redactor(), self._topology()
            unique = [
                alert.model_copy(update={**masked_alert(alert.model_dump(), redactor),
                                         "service": _catalog_service(alert, topology)})
                for alert in unique
            ]  # fmt: skip

        read = known

        def attempt() -> list[tuple[StoredAlert, bool]]:
            nonlocal read
            out: list[tuple[StoredAlert, bool]] = []
            writes: list[DocumentWrite] = []
            held, read = (self.known(unique) if read is None else read), None  # after a conflict: read again
            known_ones = {alert.id: found.model_copy() if (found := held.get(alert.id)) else None for alert in unique}
            grouped = self._grouped([alert for alert in unique if known_ones[alert.id] is None], writes)
            for alert in unique:
                known = known_ones[alert.id]
                if known is None:
                    stored = StoredAlert(id=alert.id, alert=alert, query=alert.query(), group_id=grouped.get(alert.id))
                    writes.append(self._write(stored, "alert.received"))
                    out.append((stored, True))
                    continue
                known.deliveries += 1
                reopened = reopens(known.alert, alert, known.updated_at)  # a PagerDuty incident reopened: as new
                if reopened:
                    known = known.model_copy(update={"state": "received", "recall": None, "plan": None, "error": None})
                known.alert, known.updated_at = moved(known.alert, alert, known.updated_at), utcnow()  # `alert_status`
                writes.append(self._write(known, "alert.reopened" if reopened else "alert.redelivered", held[alert.id]))
                out.append((known, reopened))
            if writes:
                work = [NewWork(ALERT_TRIAGE, stored.id) for stored, new in out
                        if new and stored.alert.status == "firing"]  # fmt: skip
                saved = {doc.doc_id: doc.version for doc in self.documents.put(writes, actor, work)}
                out = [(stored.model_copy(update={"version": saved[stored.id]}), new) for stored, new in out]
            return out

        out = rewritten(attempt, attempts=RECEIVE_ATTEMPTS)
        if any(new for _, new in out) and self.retention_days and self._due():
            self._upkeep(self._prune_round)
        return out

    def _grouped(self, new: list[Alert], writes: list[DocumentWrite]) -> dict[str, str]:
        """Place a delivery's new alerts in groups (`tiers.grouping`): the open groups of the window are read once,
        each group the delivery changed is written with its alerts (`writes`); each new alert's group id."""
        if not new or self.group_window <= timedelta(0):
            return {}
        ordered = in_order(new)
        since = alert_time(ordered[0]) - self.group_window
        slots = dict.fromkeys(slot_of(alert) for alert in ordered)  # read before the groups: see GROUP_SLOTS
        found = self.documents.find(GROUP_SLOTS, ids=list(slots), keys=("g",))
        read = {doc.doc_id: doc.version for doc in found}
        slotted = [str(doc.data["g"]) for doc in found if isinstance(doc.data, dict) and doc.data.get("g")]
        groups, held = open_groups(self.documents, since, self._org, slotted)  # bounded by their cost (`group_reads`)
        placing, changed, placed = Groups(groups, self._topology(), self.group_window), {}, {}
        for alert in ordered:
            group = place(placing, alert)
            changed[group.id], placed[alert.id], slots[slot_of(alert)] = group, group.id, group.id
        if placing.untested:  # a storm of long summaries alike nothing, most likely: said, as its groups may split
            log.warning("alerts.grouping_bounded", org_id=self._org, alerts=placing.untested, text_tests=TEXT_TESTS)
        writes += [self._group_write(group, "alert_group.grouped", as_read(held.get(group.id)))
                   for group in changed.values()]  # fmt: skip
        writes += [DocumentWrite(GROUP_SLOTS, slot, {"g": group_id}, "alert_group.slot",
                                 expected_version=read.get(slot, 0)) for slot, group_id in slots.items()]  # fmt: skip
        return placed

    @staticmethod
    def _group_write(group: AlertGroup, event: str, before: dict[str, Any] | None) -> DocumentWrite:
        data = group.model_dump(mode="json")  # its history: what it gained, not all of its alerts again (75 MB a storm)
        return DocumentWrite(ALERT_GROUPS, group.id, data, event, ref=group.status, expected_version=group.version,
                             logged=change_of(before, data, grown=("alerts", "services", "members")))  # fmt: skip

    def record_recall(
        self, stored: StoredAlert, result: RecallResult | None, error: str | None, plan: TriagePlan | None = None,
        done: Sequence[Work] = (),
    ) -> StoredAlert:  # fmt: skip
        """Keep recall's answer and the triage plan (or the error) with the alert, over whatever redeliveries
        changed meanwhile (read again and kept, `tiers.retry`), completing its leased triage work `done` in the
        same write (WorkDoneError, nothing kept, when another runner completed it first)."""

        def attempt() -> StoredAlert:
            current = self.find(stored.id) or stored
            updated = current.model_copy(update={
                "state": "recalled" if error is None else "recall_failed", "recall": kept(result), "error": error,
                "plan": plan, "updated_at": utcnow(),
            })  # fmt: skip
            event = "alert.recalled" if error is None else "alert.recall_failed"
            (doc,) = self.documents.put([self._write(updated, event, current)], "webhook", done=done)
            return updated.model_copy(update={"version": doc.version})

        return rewritten(attempt)

    def _prune_round(self) -> None:  # as upkeep (`tiers.retention`)
        prune_round(lambda n: self.prune(limit=n), self._due_again, failed="alerts.prune_failed", org=self._org)

    def prune(self, now: datetime | None = None, *, limit: int | None = None) -> int:
        """Delete the alerts whose last delivery or recall is older than the retention, except those an
        incident lists, the oldest first and at most `limit`; return how many. An alert written meanwhile (its
        version moved) waits for the next round rather than being deleted under a redelivery.

        A round reads what it decides on, not the organization's alerts and incidents whole: the due alerts, a
        page at a time from the oldest until `limit` of them are free (each one's `alert` alone, not the recall
        and plan kept with it), and, once one is due, every incident's list of alerts."""
        if not self.retention_days:
            return 0
        cutoff = (now or utcnow()) - timedelta(days=self.retention_days)
        free: list[Document] = []
        listed: Callable[[Document], bool] | None = None
        read, after = 0, None
        while limit is None or len(free) < limit:
            page = self.documents.oldest(ALERTS, cutoff, PRUNE_BATCH, after=after, keys=("alert",))
            if not page:
                break
            listed = listed or self._listed()
            free += [doc for doc in page if not listed(doc)]
            read += len(page)
            if len(page) < PRUNE_BATCH:
                break
            after = (page[-1].updated_at, page[-1].doc_id)
        writes = [
            DocumentWrite(ALERTS, doc.doc_id, None, "alert.pruned", ref=doc.ref, expected_version=doc.version)
            for doc in free[:limit]
        ]
        try:
            if writes:
                self.documents.put(writes, "retention")
        except ConflictError:
            return 0
        if read:
            log.info("alerts.pruned", org_id=self._org, pruned=len(writes), kept_for_incidents=read - len(free))
        self._prune_groups(cutoff, limit or PRUNE_BATCH)
        return len(writes)

    def _prune_groups(self, cutoff: datetime, limit: int) -> None:
        """Delete up to `limit` alert groups last written before `cutoff` (their alerts are as old: an incident opened
        from one lists the alerts itself), the oldest first, and up to `limit` group slots as old (services no alert
        named since); one written meanwhile waits for the next round."""
        docs = self.documents.oldest(ALERT_GROUPS, cutoff, limit, keys=("status",))
        docs += self.documents.oldest(GROUP_SLOTS, cutoff, limit, keys=("g",))
        writes = [DocumentWrite(doc.collection, doc.doc_id, None, "alert_group.pruned", ref=doc.ref,
                                expected_version=doc.version) for doc in docs]  # fmt: skip
        try:
            if writes:
                self.documents.put(writes, "retention")
        except ConflictError:
            return

    def _listed(self) -> Callable[[Document], bool]:
        """Whether an incident lists an alert (given its document): read from the incidents' alert lists, and
        the whole of each incident whose list cannot be read (an alert named anywhere in one is kept)."""
        cited, unreadable = _cited(self.documents.find(INCIDENTS, keys=("alerts",)))
        unread = [json.dumps(doc.data) for doc_id in unreadable if (doc := self.documents.get(INCIDENTS, doc_id))]
        redactor = self._redactor()

        def listed(doc: Document) -> bool:
            alert = doc.data.get("alert") if isinstance(doc.data, dict) else None
            if not isinstance(alert, dict):  # which event id it had cannot be read, nor whether one lists it
                return True
            # An incident stores its alert references masked (an org's own pattern may match an id): compare
            # each reference as written and as the org's patterns mask it.
            refs = {doc.doc_id, *([str(alert["event_id"])] if alert.get("event_id") else [])}
            refs |= {redactor.text(ref) for ref in refs}
            return bool(cited & refs) or any(ref in text for text in unread for ref in refs)

        return listed

    def find(self, alert_id: str) -> StoredAlert | None:
        return stored(self.documents, StoredAlert, ALERTS, alert_id, "alert")

    def get(self, alert_id: str) -> StoredAlert:
        return required(self.find(alert_id), "alert", "alert_id", alert_id)

    def count_at_most(self, most: int) -> int:
        """How many alerts the org holds, counted no further than `most` (an index read: no alert is read)."""
        return self.documents.count(ALERTS, most)

    def page(
        self, limit: int = 50, *, after: Position = None, status: str | None = None, service: str | None = None,
        source: str | None = None, since: datetime | None = None, until: datetime | None = None,
        severity: str | None = None, keys: Only = None,
    ) -> tuple[list[StoredAlert], Position]:  # fmt: skip
        """Up to `limit` alerts, the most recently changed (delivered, resolved, triaged) first, and where the next
        page starts (None: this was the last). Only those of `status`, `service` (its catalog name or an alias),
        `source` and `severity` (sev1..sev5), changed at or after `since` and before `until`. The store reads these
        alerts only, not the organization's; with `keys` (`LISTED`), only those keys of each."""
        docs, more = self.newest_docs(limit, after=after, status=status, service=service, source=source, since=since,
                                  until=until, severity=severity, keys=keys)  # fmt: skip
        return read_records(StoredAlert, docs, "alert"), more

    def newest_docs(
        self, limit: int, *, after: Position = None, status: str | None = None, service: str | None = None,
        source: str | None = None, since: datetime | None = None, until: datetime | None = None,
        severity: str | None = None, keys: Only = None,
    ) -> tuple[list[Document], Position]:  # fmt: skip
        if until is not None:  # before `until` is a page that starts there: the keyset the cursor already is
            after = min(after, (until, "")) if after else (until, "")
        match: dict[tuple[str, ...], str] = {("alert", "status"): status} if status else {}
        if severity:
            match[("alert", "severity")] = severity
        if service:
            match[("alert", "service")] = self.service_name(service)
        docs = self.documents.newest(ALERTS, limit, before=after, since=since,
                                     refs=[source] if source else None, match=match, keys=keys)  # fmt: skip
        return docs, next_page(docs, limit)

    def service_name(self, service: str) -> str:
        """The catalog's name of a service a caller names (its own, or the service one of its aliases names)."""
        return self._topology().canonical(service_name(service)) or service

    def recent(self, limit: int = 50) -> list[StoredAlert]:
        """The newest alerts first."""
        alerts = read_records(StoredAlert, self.documents.find(ALERTS), "alert")
        return sorted(alerts, key=lambda a: a.alert.received_at, reverse=True)[:limit]

    @staticmethod
    def _write(stored: StoredAlert, event: str, before: StoredAlert | None = None) -> DocumentWrite:
        """The write of `stored`; over `before` (as read), its history records what changed (a redelivery's count
        and time, not the alert, recall and plan again: 24 KB an alert, each time a sender repeats it)."""
        data = stored.model_dump(mode="json") | {RECALLED: recalled(stored.recall)}
        was = before.model_dump(mode="json") | {RECALLED: recalled(before.recall)} if before is not None else None
        logged = change_of(was, data) if was is not None else None
        return DocumentWrite(ALERTS, stored.id, data, event, ref=stored.alert.source, expected_version=stored.version,
                             logged=logged)  # fmt: skip


def _catalog_service(alert: Alert, topology: Topology) -> str | None:
    """The catalog's name of the alert's service: its own when the catalog knows it, else the service an alias
    names, tried on the service the vendor named and then on its id (PagerDuty's `service_id`)."""
    for name in (alert.service, alert.labels.get("service_id")):
        named = topology.canonical(name)
        if named and named in topology:
            return named
    return alert.service


def _cited(incidents: list[Document]) -> tuple[set[str], list[str]]:
    """The alert references the incidents list, and the ids of the incidents whose list cannot be read."""
    cited: set[str] = set()
    unreadable: list[str] = []
    for doc in incidents:
        held = doc.data.get("alerts") if isinstance(doc.data, dict) else doc.data
        if isinstance(held, list):
            cited.update(str(ref) for ref in held)
        elif held is not None:
            unreadable.append(doc.doc_id)
    return cited, unreadable
