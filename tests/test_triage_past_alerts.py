"""An org of more received alerts than a process keeps (`triage.run.KEPT_ALERTS`) is triaged from the store
(`triage.past_alerts`) with the plan the kept alerts give, on both stores: recurrence, the outlier label, the
burst's first alerts and the probable origin."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import structlog.testing

from grandbo.background import FILLS_WAITING
from grandbo.ingest.alert import Alert
from grandbo.memory import OrgMemory
from grandbo.model import utcnow
from grandbo.service import Grandbo
from grandbo.store.postgres.dialect import DOCUMENTS as POSTGRES_DIALECT
from grandbo.store.sql.documents import DocumentSQL
from grandbo.store.sqlite.dialect import DOCUMENTS as SQLITE_DIALECT
from grandbo.tiers.alerts import ALERTS
from grandbo.tiers.change_model import NewChange
from grandbo.triage import run
from grandbo.triage.evidence import SEEN_KEYS, seen
from tests.test_triage_changes import CATALOG

SUMMARY = "checkout-api 5xx error rate above 5%"


def _alert(service: str | None, at, summary: str, *, fingerprint: str | None = None, n: int = 0) -> Alert:
    return Alert(source="alertmanager", event_id=f"{service}:{at.isoformat()}:{n}",
                 fingerprint=fingerprint or f"{service}:{summary}:{n}", service=service, summary=summary,
                 started_at=at - timedelta(minutes=1), received_at=at)  # fmt: skip


def _parts(plan) -> dict:
    """What the org's received alerts decide in a plan."""
    keys = ("alert_id", "recurrence", "similar_alerts", "outlier", "outlier_share", "changes", "origin")
    return plan.model_dump(include=set(keys))


@pytest.fixture
def stormy(memory: OrgMemory, raw):
    """An org whose alerts, around `now`, count in different ways for an alert on checkout-api at `now`, each
    written when it was received (the store path reads by write time)."""
    now = utcnow().replace(microsecond=0)
    memory.catalog.import_text(CATALOG)
    memory.changes.add(NewChange(id="pg-v2", service="payments-gateway", summary="deploy v2",
                                 at=now - timedelta(minutes=12)))  # fmt: skip
    fingerprint = "checkout-api:5xx"
    alerts = [
        *(
            _alert("checkout-api", now - timedelta(days=d), "checkout 5xx spike", fingerprint=fingerprint, n=d)
            for d in (2, 10, 40)
        ),  # the same fingerprint (40 days ago: before the window)
        _alert("web", now - timedelta(days=5), "web errors", fingerprint=fingerprint),  # its fingerprint, elsewhere
        _alert("checkout-api", now - timedelta(days=3), "checkout-api 5xx error rate above 7%"),  # alike by its words
        _alert("checkout-api", now - timedelta(days=1), "checkout-api latency p99 above 2s"),  # not alike
        _alert("checkout-api", now - timedelta(hours=1), "checkout-api pod restarted"),  # not alike
        _alert("checkout-api", now + timedelta(hours=1), "checkout-api 5xx error rate above 9%"),  # after `now`
        _alert("checkout-api", now - timedelta(days=31), "checkout-api 5xx error rate above 5%", n=1),  # too old
        _alert("payments-gateway", now - timedelta(minutes=4), "payments-gateway 5xx"),  # the burst
        *(_alert("payments-db", now - timedelta(minutes=9), "payments-db replica lag", n=n) for n in (1, 2)),  # a tie
        _alert("payments-gateway", now - timedelta(hours=3), "payments-gateway timeouts"),  # before the burst
        _alert("web", now - timedelta(minutes=2), "web 5xx"),  # downstream: not on the path
        *(_alert("search", now - timedelta(hours=h), "search latency high", n=h) for h in range(1, 6)),
        *(_alert(None, now - timedelta(days=d), "disk full on a node", n=d) for d in (1, 5, 45)),
    ]
    this = _alert("checkout-api", now, SUMMARY, fingerprint=fingerprint)
    memory.alerts.receive([*alerts, this])
    for alert in alerts:
        raw("UPDATE documents SET updated_at = %s WHERE org_id = 'acme' AND collection = 'alert' AND doc_id = %s",
            (alert.received_at.isoformat(), alert.id), org="acme")  # fmt: skip
    return now, this


def test_an_org_of_more_alerts_than_a_process_keeps_gets_the_plan_the_kept_alerts_give(
    grandbo, memory: OrgMemory, stormy, monkeypatch
):
    """A year of alert storms was kept whole in every process, and read whole by the first triage after a restart.
    Past KEPT_ALERTS the triage reads from the store the alerts that can count for the alert it triages, and plans
    as it did; nothing of the org's alerts is kept."""
    now, this = stormy
    serviceless = _alert(None, now, "disk full on a node", n=99)
    asked = [(this, now), (this, now + timedelta(days=29)), (serviceless, now)]
    _keep(grandbo, memory)
    kept = [memory.triage(alert, narrate=False, now=at) for alert, at in asked]
    assert grandbo._snapshots._kept[("acme", ALERTS)].items is not None
    monkeypatch.setattr(run, "KEPT_ALERTS", 3)
    grandbo._snapshots.forget("acme")  # a restarted process
    stored = [memory.triage(alert, narrate=False, now=at) for alert, at in asked]
    _keep(grandbo, memory)  # as a background thread does after a triage that found none kept
    again = [memory.triage(alert, narrate=False, now=at) for alert, at in asked]
    assert grandbo._snapshots._kept[("acme", ALERTS)].items is None  # nothing of them held: over the bound
    assert [_parts(plan) for plan in stored] == [_parts(plan) for plan in again] == [_parts(plan) for plan in kept]
    first = stored[0]
    # 2, 5 (on web) and 10 days ago (its fingerprint), 3 days ago (its words), in an hour; not 40 nor 31 days ago
    assert (first.recurrence, first.similar_alerts) == ("frequent", 5)
    assert first.outlier_share == 0.6 and first.alert_id == this.id  # 3 alike of 5 on it until now
    assert first.origin is not None and first.changes[0].id == "pg-v2"
    # the burst: checkout-api, the gateway and the database, the change upstream of two of them
    assert first.changes[0].why["explains"].value == pytest.approx(2 / 3, abs=1e-4)
    later = stored[1]  # 29 days on: the one an hour after is the only one alike left in the window
    assert (later.recurrence, later.similar_alerts) == ("rare", 1)
    # no service: alike those of no service (1 and 5 days ago, not 45); it was never received (no id)
    assert (stored[2].recurrence, stored[2].similar_alerts, stored[2].alert_id) == ("rare", 2, None)


def _keep(grandbo, memory: OrgMemory) -> None:
    """The org's alerts kept by the process, as its background thread keeps them after a triage that found none."""
    grandbo._snapshots.kept("acme", memory._documents, ALERTS, seen, run.KEPT_ALERTS, SEEN_KEYS)


def test_a_process_without_background_threads_keeps_an_orgs_alerts_from_its_first_triage(
    grandbo, memory: OrgMemory, stormy
):
    """A triage of an org whose alerts the process does not keep reads those that can count (the store path) and
    leaves the whole read to a background thread (a server's `fills`). A process with none (the CLI, a library
    Grandbo without background=True) never kept them: every triage took the store path (12.7 against 5.7 ms CPU at
    250 alerts). Its first triage reads them whole now, with the plans the store path gives."""
    now, this = stormy
    asked = [(this, now), (_alert(None, now, "disk full on a node", n=99), now)]  # a `now` later reads them kept
    assert grandbo.pools.fills is None
    first = [memory.triage(alert, narrate=False, now=at) for alert, at in asked]
    assert grandbo._snapshots._kept[("acme", ALERTS)].items is not None  # kept from the first triage on
    grandbo._snapshots.forget("acme")  # and not due again for KEEP_ALERTS_EVERY: the store path
    stored = [memory.triage(alert, narrate=False, now=at) for alert, at in asked]
    assert ("acme", ALERTS) not in grandbo._snapshots._kept
    assert [_parts(plan) for plan in first] == [_parts(plan) for plan in stored]
    assert (first[0].recurrence, first[0].similar_alerts) == ("frequent", 5)


def test_the_burst_first_alert_of_a_service_is_the_same_whatever_order_the_alerts_were_read_in(
    memory: OrgMemory, stormy
):
    """Two alerts of a service received at the same instant: the one the origin names does not depend on the order
    the alerts were kept or read in (ties by id)."""
    from grandbo.triage.changes import first_alerts

    now, _ = stormy
    docs = memory.alerts.documents.find(ALERTS)
    recent = [seen(doc) for doc in docs]
    upstream = memory.catalog.topology().upstream("checkout-api")
    window, gap = timedelta(minutes=120), timedelta(minutes=8)
    forward = first_alerts(recent, upstream, now, window, gap)
    backward = first_alerts(list(reversed(recent)), upstream, now, window, gap)
    assert forward == backward and set(forward) == {"checkout-api", "payments-gateway", "payments-db"}


@pytest.mark.parametrize(
    ("path", "value"),
    [(("alert", "service"), "svc-3"), (("alert", "fingerprint"), "f-7"), (("alert", "service"), None)],
)
def test_a_read_of_past_alerts_seeks_the_index_of_their_service_or_fingerprint(grandbo, settings, backend, path, value):
    """Each read of the store path walked every alert of the 30-day window by write time, matching each one's JSON
    (no index held the alert's service or fingerprint): 0.2-1 s a triage in an org of 50,000 alerts. Migration 20 keeps
    each in a column the read compares, indexed; the database seeks the index (on Postgres under row-level security,
    which keeps an index on `data #>> ...` unused): no walk of the window, no sort. An alert that names no service
    read every alert of the window: it reads those that name none, the only ones that can be alike it."""
    grandbo.org("acme", create=True)
    dialect = POSTGRES_DIALECT if backend == "postgres" else SQLITE_DIALECT
    sql = DocumentSQL(dialect)
    before, since = (datetime(2026, 1, 2, tzinfo=UTC), "a"), datetime(2026, 1, 1, tzinfo=UTC)
    where, values, order = sql.newest_page(1000, before, since, {path: value})
    query, index = sql.select("data", where, order), f"documents_by_{'_'.join(path)}"
    if backend == "sqlite":
        with sqlite3.connect(settings.home / "grandbo.db") as db:
            plan = [str(step[-1]) for step in db.execute(f"EXPLAIN QUERY PLAN {query}", ("acme", ALERTS, *values))]
        db.close()
        assert any(f"USING INDEX {index}" in step for step in plan) and not any("B-TREE" in s for s in plan), plan
        return
    with psycopg.connect(settings.database_url) as conn:  # a storm of 19 services and none, statistics read
        conn.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
        conn.execute(
            "INSERT INTO documents (org_id, collection, doc_id, data, version, updated_at) SELECT 'acme', %s, "
            "'a-' || n, jsonb_build_object('alert', jsonb_build_object('service', nullif('svc-' || n %% 20, 'svc-0'), "
            "'fingerprint', "
            "'f-' || n %% 500)), 1, %s - n * interval '1 minute' FROM generate_series(1, 20000) AS n",
            (ALERTS, before[0]),
        )
        conn.execute("ANALYZE documents")
        plan = [row[0] for row in conn.execute(f"EXPLAIN {query}", ("acme", ALERTS, *values))]
        conn.rollback()
    assert any(index in step for step in plan) and not any("Sort" in s for s in plan), "\n".join(plan)


class _WrittenDuringTheRead:
    """The org's documents, read as the store path reads them, with another write landing after the first page that
    holds any (a redelivery of an alert the later pages would have held)."""

    def __init__(self, documents, write=None) -> None:
        self._documents, self._write, self.read, self.listed = documents, write, 0, 0

    def newest(self, *args, **kwargs):
        page = self._documents.newest(*args, **kwargs)
        if kwargs.get("keys") == ():
            self.listed += len(page)  # ids and times, no data
        else:
            self.read += len(page)
        if page and self._write is not None:
            write, self._write = self._write, None
            write()
        return page

    def __getattr__(self, name):
        return getattr(self._documents, name)


def test_an_alert_written_again_while_the_pages_are_read_is_still_read(memory: OrgMemory, raw, monkeypatch):
    """The store path reads an alert's service newest first, a page at a time; an alert redelivered meanwhile moves
    above the pages read, so the later pages no longer hold it. What was written since the reads began is read once
    more, from a minute before the newest write the first pages saw (the database's clock, as the write's; a re-read
    by the app's clock missed it when the app's ran 5 minutes ahead): the oldest of five alike alerts, redelivered
    after the first page, still counts."""
    from grandbo.triage import past_alerts
    from grandbo.triage.past_alerts import stored_recent

    now = utcnow().replace(microsecond=0)
    alerts = [_alert("search", now - timedelta(hours=h), "search latency high", n=h) for h in range(1, 6)]
    memory.alerts.receive(alerts)
    for alert in alerts:
        raw("UPDATE documents SET updated_at = %s WHERE org_id = 'acme' AND collection = 'alert' AND doc_id = %s",
            (alert.received_at.isoformat(), alert.id), org="acme")  # fmt: skip
    monkeypatch.setattr(past_alerts, "PAGE", 2)
    oldest = alerts[-1]
    racing = _WrittenDuringTheRead(memory.alerts.documents, lambda: memory.alerts.receive([oldest]))
    this = _alert("search", now, "search latency high", n=99)
    found = {other.id for other in stored_recent(racing, this, now)}
    assert found == {alert.id for alert in alerts}


def test_an_org_past_its_kept_alerts_is_told_by_a_count_not_by_reading_10001_alerts(
    grandbo, memory: OrgMemory, stormy, monkeypatch
):
    """A process's first triage of an org past KEPT_ALERTS read KEPT_ALERTS + 1 of its alerts (their `id` and `alert`)
    only to learn that it holds more: 1.5-3.5 s at 50,000 alerts of 24 KB. The store counts them on its index (no
    further than the bound), and no alert is read for it (by the background thread that keeps them, now: `_keep`)."""
    now, this = stormy
    monkeypatch.setattr(run, "KEPT_ALERTS", 3)
    grandbo._snapshots.forget("acme")
    store = type(grandbo._store)
    ranged, counted = store.ranged_documents, []

    def seen_ranged(self, org_id, collection, *args, **kwargs):  # the store's own read, recorded
        counted.append(collection)
        return ranged(self, org_id, collection, *args, **kwargs)

    monkeypatch.setattr(store, "ranged_documents", seen_ranged)
    _keep(grandbo, memory)
    plan = memory.triage(this, narrate=False, now=now)
    assert plan.recurrence == "frequent" and grandbo._snapshots._kept[("acme", ALERTS)].items is None
    assert ALERTS not in counted
    documents = memory.alerts.documents
    held = len(documents.find(ALERTS))
    assert [documents.count(ALERTS, most) for most in (3, held, held + 5)] == [3, held, held]
    assert grandbo.org("beta", create=True).alerts.documents.count(ALERTS, 100) == 0  # another org's: none


def test_a_live_storms_alerts_are_read_once_more_from_a_minute_before_the_newest_not_ten(memory: OrgMemory, raw):
    """The second read went back RECEIPT_SLACK (10 minutes) before the reads began: in a live storm, every alert of the
    service written in those minutes was read twice per triage. It goes back a minute before the newest write the
    first read saw: of 60 alerts of the last 10 minutes, the 7 of its last minute are listed again, by id, and none
    is read twice (it read them whole again)."""
    from grandbo.triage.past_alerts import stored_recent

    now = utcnow().replace(microsecond=0)
    alerts = [_alert("search", now - timedelta(seconds=10 * n), f"search shard {n} slow", n=n) for n in range(60)]
    memory.alerts.receive(alerts)
    for alert in alerts:
        raw("UPDATE documents SET updated_at = %s WHERE org_id = 'acme' AND collection = 'alert' AND doc_id = %s",
            (alert.received_at.isoformat(), alert.id), org="acme")  # fmt: skip
    counted = _WrittenDuringTheRead(memory.alerts.documents)
    this = _alert("search", now, "search shard 99 slow", n=99)
    found = stored_recent(counted, this, now)
    assert {other.id for other in found} == {alert.id for alert in alerts}
    assert (counted.read, counted.listed) == (60, 7)  # the fingerprint's reads find none


def test_a_long_running_process_keeps_the_alerts_on_a_background_thread_after_a_triage_that_found_none(
    grandbo, background
):
    """The whole read a cold triage leaves (`triage.run.KEEP_ALERTS_EVERY`): done off the request, the next triages
    read the kept alerts (then only what was written since)."""
    memory = background.org("acme", create=True)
    now = utcnow().replace(microsecond=0)
    this = _alert("checkout-api", now, SUMMARY)
    memory.alerts.receive([_alert("checkout-api", now - timedelta(days=1), SUMMARY, n=1), this])
    assert memory.triage(this, narrate=False).similar_alerts == 1
    done = threading.Event()
    for _ in range(3000):  # 30 s at most: a bound, never a measured time
        if background._snapshots.keeps("acme", memory._documents, ALERTS, seen):
            break
        done.wait(0.01)
    assert background._snapshots.keeps(
        "acme", memory._documents, ALERTS, seen
    )  # kept in the background: `kept` would read them whole
    assert len(background._snapshots.kept("acme", memory._documents, ALERTS, seen)) == 2


def test_after_an_erasure_a_triage_reads_the_store_not_every_kept_alert_again(grandbo, background):
    """An erasure rewrites documents in place: the kept alerts are read whole again. A triage after it reads the
    store for what it needs and leaves the whole read to a background thread; `keeps` said True whatever the
    erasure, so the triage read them all on its request (review 30)."""
    memory = background.org("acme", create=True)
    now = utcnow().replace(microsecond=0)
    this = _alert("checkout-api", now, SUMMARY)
    leaked = _alert("web", now - timedelta(hours=2), "web token kelp-secret leaked", n=2)
    memory.alerts.receive([_alert("checkout-api", now - timedelta(days=1), SUMMARY, n=1), leaked, this])
    kept = background._snapshots.kept("acme", memory._documents, ALERTS, seen)
    assert len(kept) == 3 and background._snapshots.keeps("acme", memory._documents, ALERTS, seen)
    assert memory.erasure.purge_text("kelp-secret", reason="a credential", actor="alice").documents
    assert not background._snapshots.keeps("acme", memory._documents, ALERTS, seen)
    assert background._snapshots.due("acme", "triage.keep_alerts", run.KEEP_ALERTS_EVERY)  # a fill left just now
    assert memory.triage(this, narrate=False).similar_alerts == 1  # the store's: the same plan
    assert not background._snapshots.keeps("acme", memory._documents, ALERTS, seen)  # not read whole on the request


def test_a_full_cache_fill_queue_never_refuses_another_orgs_write_behind(grandbo, settings):
    """Filling an org's kept alerts (a whole read, 0.3-0.8 s) has its own pool: it took places of the write-behind
    pool, which every org's acknowledged write-behinds share, so past ~85 triaging orgs another org's request was
    answered 503 there (review 30). A fill with no room is left to a later triage, quietly: nothing refused."""
    limited = settings.model_copy(update={"work_queue": 2})  # two write-behinds waiting, every org's together
    now = utcnow().replace(microsecond=0)
    this = _alert("checkout-api", now, SUMMARY)
    with Grandbo.open(limited, background=True) as process, structlog.testing.capture_logs() as logs:
        orgs = [process.org(f"org-{n}", create=True) for n in range(4)]  # four cold orgs
        for memory in orgs:
            memory.alerts.receive([_alert("checkout-api", now - timedelta(days=1), SUMMARY, n=1), this])
        process.flush()  # their receipts' upkeep done
        pools, gate = process.pools, threading.Event()
        try:
            for n in range(2):  # both write-behind threads held: what is submitted there now waits
                pools.behind.submit(f"held-{n}", gate.wait)
            assert all(pools.fills.offer(f"filling-{n}", gate.wait) for n in range(1 + FILLS_WAITING))
            for memory in orgs:  # each triage leaves a fill that finds no room
                assert memory.triage(this, narrate=False).similar_alerts == 1
            pools.admit("other", "behind")  # another org's request still finds its write-behind's place
            assert pools.behind.stats().waiting == 0
            assert (pools.behind.stats().refused, pools.fills.stats().refused) == (0, 0)
            assert not [line for line in logs if line["event"] == "pool.refused"]
        finally:
            gate.set()
