"""One webhook delivery, end to end: verify, parse, store durably, then triage each new firing alert.

A delivery of at most INLINE_ALERTS firing alerts is triaged before the answer, which carries each alert's
plan (a sender or a person testing a webhook sees the result at once, and a small delivery takes
milliseconds). A larger one (an Alertmanager group of hundreds) is answered as soon as it is stored, each
alert `received`; its alerts are triaged after the answer on the process's bounded alert-triage pool, one
task per alert, so the pool serves the organizations in turn alert by alert and one org's storm never queues
another's alerts behind it; each keeps its result as a small delivery's does. Each alert's triage is
recorded with the delivery, so a process that dies after the 202 leaves it to another (`grandbo.redrive`); a
delivery's triages are leased a few at a time, and each one's result is kept in the write that completes its work
(`redrive.Leases`): one commit an alert.
Either way the request stores and queues; no recall runs in it for a large delivery. A delivery's alerts that ask
recall the same question are triaged one after another and share one recall over the same index
(`alike_together`, `retrieval.shared`): a storm of 500 alerts on a few summaries asks it a few dozen times.

A delivery is parsed whole first (a malformed one is refused 422 whatever room its org has; only a storm that
outpaces the reads of its org's full backlog has its large deliveries refused unread, `Background.admit`), then
its alerts already stored are read in one read by their ids (`Alerts.known`). Before storing, it takes a place in its
organization's share of that pool (`OrgMemory.reserve_alerts`: GRANDBO_ALERT_ORG_BACKLOG alerts) for each alert
it will triage: the firing ones not stored yet, and a resolved PagerDuty incident a later event reopens
(`tiers.alerts.triaged`, `tiers.alert_status`; a stored one is never triaged again otherwise, resolved or not).
One that would pass the share, or a small one with an alert to triage whose org has no room in the triage pool,
is refused (429 or 503, with Retry-After): the sender retries it whole, and nothing is stored
twice. A redelivery with nothing new (Alertmanager sends a group again every group_interval) takes no place
and is never refused for want of one: it is stored (each alert's count of deliveries, a resolve) as always.

Why the count is safe when processes race: only the write that stores an alert first triages it (each write
expects the version it read, `Alerts.receive`), and that write's delivery found it missing, so reserved its
place. Two processes given the same new alerts at once both find them missing and both reserve; the first to
store them triages them, the other's write conflicts, reads them again as redelivered, and gives its places
back. A process that finds an alert stored reserves nothing for it and does not triage it. The one case where
a delivery stores more new alerts than it reserved, an alert found stored and deleted before the write (a
prune, an erasure), leaves those alerts' recorded triage to the re-driver (`grandbo.redrive`, fair across
organizations) rather than the pool: the pool never holds more than its bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from contextlib import nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any

import structlog

from grandbo.errors import GrandboError, SignatureError, WorkDoneError
from grandbo.ingest import adapters, signatures
from grandbo.ports import Work
from grandbo.redrive import ALERT_TRIAGE, COMPLETED, Leases
from grandbo.retrieval.shared import SharedRecalls
from grandbo.tiers.alerts import StoredAlert, triaged
from grandbo.triage.plan import PlanGroup

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)
INLINE_ALERTS = 10  # firing alerts of one delivery triaged before its answer; more are triaged after it
GROUPED = frozenset({"alertmanager", "grafana"})  # the sources that send many alerts in one delivery
READ_SPARINGLY_BYTES = 16 * 1024  # a body this large may hold a group past INLINE_ALERTS (`Background.admit`)


def receive(memory: OrgMemory, source: str, body: bytes, headers: Mapping[str, str]) -> list[tuple[StoredAlert, bool]]:
    """Take one delivery from `source` for `memory`'s organization; return each alert and whether it was new.

    A PagerDuty delivery must carry a valid `X-PagerDuty-Signature` for one of the org's pagerduty secrets.
    Nothing is stored unless the whole delivery parses; once stored, an alert is never lost to a failing
    recall (it keeps the error instead).
    """
    if source == "pagerduty":
        held = memory.webhook_secrets.secrets("pagerduty")
        if not held:
            raise SignatureError(
                "No pagerduty webhook secret is set for this organization, so no delivery can be verified. "
                "Set the subscription's secret with `grandbo webhooks add pagerduty --org ORG --secret-file FILE`.",
                detail={"source": source},
            )
        if not signatures.verify(body, headers.get("x-pagerduty-signature"), held):
            raise SignatureError(
                "The X-PagerDuty-Signature does not match the body signed with this organization's pagerduty "
                "secret. Check the secret (`grandbo webhooks add pagerduty`) and that the body reaches Grandbo "
                "unmodified.",
                detail={"source": source},
            )
    if source in GROUPED and len(body) > READ_SPARINGLY_BYTES:  # refused unread while its org's storm outpaces the
        # reads of its full backlog (a source of one alert a delivery takes the small path: never refused so)
        memory.admit("alerts")
    alerts = adapters.parse(source, body)  # then: a malformed delivery is a 422, whatever room its org has
    known = memory.alerts.known(alerts)  # one read: those stored already, which nothing triages again
    fresh = len(triaged(alerts, known))
    if len(triaged(alerts)) > INLINE_ALERTS:
        seats = memory.reserve_alerts(fresh)  # refused before anything is stored: the whole delivery, or none
        with seats or nullcontext():
            received = memory.alerts.receive(alerts, known=known)  # each new firing alert's triage with it
            firing = alike_together([stored for stored, new in received if new and stored.alert.status == "firing"])
            groups: dict[str, PlanGroup | None] = {}  # a storm's alerts share a few groups: each read once
            shared = SharedRecalls()  # and alike alerts one recall (`retrieval.shared`)
            if seats is not None:
                seated = firing[: seats.left]
                # Leased ahead among the seated only: one past them would wait out the lease, never run here.
                leases = memory.leases(ALERT_TRIAGE, [stored.id for stored in seated])
                tasks = seats.submit_all(
                    [partial(_triage_later, memory, stored, groups, shared, leases) for stored in seated]
                )
                for task, stored in zip(tasks, seated, strict=True):
                    task.add_done_callback(partial(_unless_dropped, leases, stored.id))
                if len(firing) > fresh:  # stored, found missing by its write (pruned, erased): not seated here
                    log.warning("alert.triage_left_to_redrive", org_id=memory.org, alerts=len(firing) - fresh)
                return received  # answered now; each alert's triage follows (`GET /v1/alerts/{id}`)
        leases = memory.leases(ALERT_TRIAGE, [stored.id for stored in firing])
        for stored in firing:  # no background threads in this process: triaged before the answer
            _triage_later(memory, stored, groups, shared, leases)
        return [(memory.alerts.find(stored.id) or stored, new) for stored, new in received]
    if fresh:  # a redelivery with nothing new hands the triage pool nothing: never refused for its room
        memory.admit("triage")
    received = memory.alerts.receive(alerts, known=known)
    firing = [stored for stored, new in received if new and stored.alert.status == "firing"]
    done: dict[str, StoredAlert] = {}
    shared = SharedRecalls()
    firing = alike_together(firing)
    leases = memory.leases(ALERT_TRIAGE, [stored.id for stored in firing])
    for stored in firing:  # recorded work, run here: should it fail, it stays for the re-driver
        leases.run(stored.id, partial(_triage_into, memory, stored, done, shared))
    return [(done.get(stored.id, stored), new) for stored, new in received]


def alike_together(firing: list[StoredAlert]) -> list[StoredAlert]:
    """A delivery's alerts to triage with those that ask recall the same (the sentence, the severity, the service
    and the group, whose services recall is asked about too) next to each other, in the order each such set's
    first alert came: each set shares one recall while its answer is kept (`retrieval.shared`)."""
    alike: dict[tuple[str, object, str | None, str | None], list[StoredAlert]] = {}
    for stored in firing:
        asked = (stored.query, stored.alert.severity, stored.alert.service, stored.group_id)
        alike.setdefault(asked, []).append(stored)
    return [stored for same in alike.values() for stored in same]


def _triage_into(
    memory: OrgMemory, stored: StoredAlert, done: dict[str, StoredAlert], shared: SharedRecalls, claimed: Sequence[Work]
) -> object:
    done[stored.id] = recall_for(memory, stored, shared=shared, done=claimed)
    return COMPLETED


def _triage_later(
    memory: OrgMemory, stored: StoredAlert, groups: dict[str, PlanGroup | None], shared: SharedRecalls, leases: Leases
) -> None:
    """One alert of a large delivery, on the alert-triage pool (or before the answer in a process without one):
    recorded pending work, done here unless another process has it (`leases`: leased with the delivery's next
    ones); its group read once for the delivery (`groups`, shared by its alerts' tasks), its recall shared with its
    alike alerts (`shared`)."""

    def triage(claimed: Sequence[Work]) -> object:
        gid = stored.group_id
        if gid and gid not in groups:
            groups[gid] = memory.alert_groups.plan_group(gid)
        group = groups.get(gid) if gid else None
        recall_for(memory, stored, patient=True, group=group, shared=shared, done=claimed)
        return COMPLETED

    leases.run(stored.id, triage)


def _unless_dropped(leases: Leases, subject: str, task: Future[Any]) -> None:
    if task.cancelled():  # the pool closed before it ran: its lease, taken ahead, goes back
        leases.release(subject)


def recall_for(
    memory: OrgMemory, stored: StoredAlert, *, patient: bool = False, group: PlanGroup | None = None,
    shared: SharedRecalls | None = None, done: Sequence[Work] = (),
) -> StoredAlert:  # fmt: skip
    """Triage a stored alert without an LLM (fast: the acknowledgement of a small delivery waits for it) and
    keep the recall result and the plan (or the error) with it. With an LLM configured, the narrated plan
    replaces it later, off the request (`OrgMemory.defer`). `patient`: background work, which waits for room in
    the triage pool rather than being refused. The plan speaks for the alert's group (`group`, as read for its
    delivery; read here when not given); its recall is shared with the delivery's alike alerts (`shared`). `done`:
    the alert's leased triage work, completed in the write that keeps the result; when another runner completed
    it first, its result is the alert's and this one is not kept. The answer quotes memories: it is recalled again
    when a purge or erasure committed before it was kept (`grandbo.unerased`); kept after it, it held what the
    purge had erased."""

    def triaged() -> tuple[StoredAlert, bool]:
        plan, result, message = None, None, None
        try:
            planned = group or memory.alert_groups.plan_group(stored.group_id)
            plan, result = memory.triage.run(stored.alert, narrate=False, patient=patient, group=planned, shared=shared)
        except Exception as error:  # a stored alert is never lost to a failing triage: it keeps the error
            message = error.message if isinstance(error, GrandboError) else f"triage failed ({type(error).__name__})"
            log.warning("alert.triage_failed", org_id=memory.org, alert_id=stored.id, error=type(error).__name__)
        return memory.alerts.record_recall(stored, result, message, plan, done=done), message is None

    try:
        kept, triaged_ok = memory.unerased.run(triaged)
    except WorkDoneError:  # another runner (this one outlived its lease) kept its result first: that one stands
        log.info("alert.triaged_elsewhere", org_id=memory.org, alert_id=stored.id)
        return memory.alerts.find(stored.id) or stored
    if not triaged_ok:
        return kept
    try:
        narrator = memory.triage.llm
    except GrandboError:  # a misconfigured LLM is reported by the triage that asks it, not here
        narrator = None
    if narrator is not None:
        memory.defer(lambda: _narrated(memory, stored), waits_on_llm=True)
    return kept


def _narrated(memory: OrgMemory, stored: StoredAlert) -> None:
    def narrated() -> None:  # asked again when an erasure committed before it was kept (`grandbo.unerased`)
        group = memory.alert_groups.plan_group(stored.group_id)
        plan, result = memory.triage.run(stored.alert, patient=True, group=group)  # background: waits for room
        if plan.path == "llm":
            memory.alerts.record_recall(stored, result, None, plan)

    memory.unerased.run(narrated)
