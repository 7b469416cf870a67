"""The console's analytics and on-call queue read an org's incidents once per process, as a triage does (their
services and times, kept by `Snapshots.kept`; after a write, only what was written), not every incident whole on
each view: analytics read them twice a view, the queue every open one, so a read key polling either cost the
shared process a read of the whole collection each time."""

from __future__ import annotations

from datetime import timedelta

from grandbo.model import utcnow
from grandbo.store.scoped import ScopedDocuments
from tests.serving import serving
from tests.test_console_http import signed_in


def test_analytics_and_the_queue_read_incidents_once_per_process_not_on_each_view(grandbo, monkeypatch):
    memory = grandbo.org("alpha", create=True)
    # Counted from the first write: a close's sync reads the incidents' summaries for the ledger's snapshot, and the
    # views then read only what was written since.
    reads: list[tuple[str, object]] = []
    find = ScopedDocuments.find

    def counted(self, collection, *args, **kwargs):  # type: ignore[no-untyped-def]
        reads.append((collection, kwargs.get("keys")))
        return find(self, collection, *args, **kwargs)

    monkeypatch.setattr(ScopedDocuments, "find", counted)
    started = utcnow() - timedelta(days=3)
    for n in range(12):
        memory.incidents.open(f"orders database lag {n}", services=["orders-db"], severity="sev2",
                              started_at=started, incident_id=f"INC-{n}")  # fmt: skip
    for n in range(6):
        memory.incidents.close(f"INC-{n}", resolution="rebuilt the replica", time_to_mitigate_s=600 + 60 * n)
    _, key = memory.keys.create("read", name="console")

    with serving(grandbo) as served:
        client = signed_in(served, key)
        for _ in range(3):
            analytics, queue = client.get("/ui/analytics"), client.get("/ui/triage")
            assert analytics.status_code == 200 and queue.status_code == 200
            assert "orders-db" in analytics.text  # its incidents per service and time to mitigate
            assert "INC-11" in queue.text and "INC-0<" not in queue.text  # the open ones only
        memory.incidents.open("payments timeouts", services=["payments"], severity="sev1", incident_id="INC-NEW")
        assert "INC-NEW" in client.get("/ui/triage").text  # what was written since is read
        client.close()

    whole = [keys for collection, keys in reads if collection == "incident"]
    # One read, of what the summaries need (not the whole documents), for every write and view of the process.
    assert len(whole) == 1 and whole[0] is not None and "findings" in whole[0], whole


def test_the_queue_reads_what_it_shows_of_each_alert_not_the_recall_and_plan_kept_with_it(grandbo, monkeypatch):
    """The queue read each of its 200 firing alerts whole, about 26 KB with the recall and plan kept with it: eight
    read-key sessions took another org's write p50 from 4 to 161 ms. It asks the store for the keys it shows."""
    from grandbo.ingest.alert import Alert

    memory = grandbo.org("alpha", create=True)
    memory.alerts.receive([Alert(source="alertmanager", event_id=f"e{n}", fingerprint=f"fp{n}", service="orders-db",
                                 summary=f"replica lag above 30s on orders-db {n}") for n in range(3)])  # fmt: skip
    _, key = memory.keys.create("read", name="console")
    asked: list[object] = []
    newest = ScopedDocuments.newest

    def counted(self, collection, *args, **kwargs):  # type: ignore[no-untyped-def]
        if collection == "alert":
            asked.append(kwargs.get("keys"))
        return newest(self, collection, *args, **kwargs)

    monkeypatch.setattr(ScopedDocuments, "newest", counted)
    with serving(grandbo) as served:
        client = signed_in(served, key)
        queue = client.get("/ui/triage")
        client.close()
    assert queue.status_code == 200 and "replica lag above 30s on orders-db 2" in queue.text
    assert asked and all(keys is not None and "recall" not in keys and "plan" not in keys for keys in asked), asked


def test_an_incident_summary_reads_times_and_severity_as_the_incident_does():
    """`Incident` reads a time without a zone as UTC and validates a severity; the summaries read raw data, so a
    naive time (an incident written by hand or by an older release) broke the analytics' arithmetic with aware
    ones (a 500), and an unknown severity left the incident out of triage and the runbooks' services."""
    from datetime import UTC, datetime

    from grandbo.ports import Document
    from grandbo.tiers.incident_model import past_incident

    data = {"id": "INC-1", "title": " Login failures ", "services": ["Auth"], "started_at": "2026-11-30T10:00:00",
            "closed_at": "2026-11-30T11:00:00+00:00", "severity": "whatever", "runbook_used": "RB-1"}  # fmt: skip
    summary = past_incident(Document("incident", "INC-1", "closed", data, 1, datetime.now(UTC)))
    assert summary.started_at == datetime(2026, 11, 30, 10, tzinfo=UTC) and summary.closed_at is not None
    assert (summary.closed_at - summary.started_at).total_seconds() == 3600
    assert (summary.title, summary.services, summary.severity) == ("Login failures", ("auth",), None)
    assert summary.cites == (("RB-1", ("auth",)),)


def test_an_entry_pages_corpus_counts_are_read_once_in_a_while_not_on_each_view(grandbo, monkeypatch):
    """Each view of an entry's page counted the org's corpus: a join of every active entry with its vector, 0.4-1.7
    s of the database at 150,000 entries. They are read once per org in `corpus.STATS_SECONDS` (and afresh for an
    org created again under the name); the entry's own embedding on every view."""
    from grandbo.store.scoped import ScopedEntries

    alpha, beta = grandbo.org("alpha", create=True), grandbo.org("beta", create=True)
    for memory in (alpha, beta):
        memory.remember_many([{"id": f"E{n}", "title": f"replica lag {n}", "body": "orders"} for n in range(3)])
    _, alpha_key = alpha.keys.create("read", name="console")
    _, beta_key = beta.keys.create("read", name="console")
    counted: list[str] = []
    stats = ScopedEntries.stats
    monkeypatch.setattr(ScopedEntries, "stats", lambda self, *a: counted.append(self.org) or stats(self, *a))
    with serving(grandbo) as served:
        alpha_client, beta_client = signed_in(served, alpha_key), signed_in(served, beta_key)
        pages = [alpha_client.get(f"/ui/memory/E{n}") for n in range(3)] + [beta_client.get("/ui/memory/E0")]
        alpha_client.close()
        beta_client.close()
    assert all(page.status_code == 200 and "active entries</dt><dd>3<" in page.text for page in pages)
    assert counted == ["alpha", "beta"], counted
