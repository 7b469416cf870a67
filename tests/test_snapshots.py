"""What every handle of one open store shares: the facts recall joins and the received alerts triage counts,
each read again only for what changed (both backends)."""

from __future__ import annotations

from grandbo.ingest.alert import summary_marks
from grandbo.ports import DocumentWrite
from grandbo.service import Grandbo
from grandbo.tiers.alerts import ALERTS
from grandbo.tiers.topology import Service
from grandbo.triage.evidence import seen
from grandbo.triage.plan import alert_from

ALERT = {"summary": "Redis connection reset during key eviction spike on auth-service", "service": "auth-service"}


def _marks(text: str) -> frozenset[int]:
    """The marks a kept alert holds of these words (`Seen.words`: its summary's, as the alike test compares them)."""
    return summary_marks(text)


def _kept(grandbo, org):
    memory = grandbo.org(org)  # a new handle each time, as every request of a server gets
    return {s.id: s for s in grandbo._snapshots.kept(org, memory._documents, ALERTS, seen)}


def test_a_received_alert_leaves_the_facts_as_they_were_and_a_catalog_change_does_not(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.catalog.put([Service(name="auth-service", depends_on=["redis-sessions"])], actor="test")
    before = grandbo._snapshots.get("acme", memory._documents)
    memory.alerts.receive([alert_from(ALERT)])
    after_alert = grandbo._snapshots.get("acme", grandbo.org("acme")._documents)
    assert after_alert is before  # its facts as they were: the same snapshot, nothing read again
    memory.catalog.put([Service(name="redis-sessions")], actor="test")
    after_catalog = grandbo._snapshots.get("acme", grandbo.org("acme")._documents)
    assert after_catalog.topology is not before.topology and "redis-sessions" in after_catalog.topology.names


def test_a_snapshot_asked_for_at_an_older_version_of_the_same_facts_leaves_the_newest_kept(grandbo):
    """A recall asks at its view's version, which may be older than the one a catalog read just asked at: the
    snapshot made for the newer one holds it (the facts are the same), and stays kept. It was made again for the older
    version, which the next request at the newer one made again in turn (review 29 M9)."""
    memory = grandbo.org("acme", create=True)
    memory.catalog.put([Service(name="auth-service")], actor="test")
    older = memory._documents.version()
    memory.alerts.receive([alert_from(ALERT)])  # a write of no fact: a newer version, the same facts
    newest = grandbo._snapshots.get("acme", memory._documents)
    assert grandbo._snapshots.get("acme", memory._documents, older) is newest
    assert grandbo._snapshots.get("acme", grandbo.org("acme")._documents) is newest
    assert grandbo._snapshots.get("acme", memory._documents, older) is newest


def test_received_alerts_are_kept_across_handles_and_brought_up_to_date(grandbo):
    memory = grandbo.org("acme", create=True)
    grandbo.org("other", create=True).alerts.receive([alert_from({**ALERT, "summary": "other org's own alert"})])
    first = memory.alerts.receive(
        [alert_from({**ALERT, "summary": f"{ALERT['summary']} on node {n}"}) for n in range(3)]
    )
    kept = _kept(grandbo, "acme")
    assert set(kept) == {stored.id for stored, _ in first} and len(kept) == 3  # acme's alerts only
    later = memory.alerts.receive([alert_from({"summary": "disk full on the search cluster", "service": "search"})])
    (stored, _), gone = later[0], first[0][0].id
    memory._documents.put([DocumentWrite(ALERTS, gone, None, "deleted")], "test")
    kept = _kept(grandbo, "acme")
    assert stored.id in kept and gone not in kept and len(kept) == 3
    assert kept[stored.id].words >= _marks("disk full search")


def test_a_purged_text_leaves_the_kept_alerts_too(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.alerts.receive([alert_from({"summary": "the zanzibar relay rejected every payment"})])
    assert any(_marks("zanzibar") <= s.words for s in _kept(grandbo, "acme").values())
    memory.erasure.purge_text("zanzibar", reason="a secret in an alert", actor="test")
    assert not any(_marks("zanzibar") <= s.words for s in _kept(grandbo, "acme").values())


def test_alerts_are_kept_for_a_bounded_number_of_organizations(grandbo, monkeypatch):
    """At most KEPT_COLLECTIONS collections (here: organizations' alerts) stay in memory; the least recently read
    goes first."""
    monkeypatch.setattr(type(grandbo._snapshots), "KEPT_COLLECTIONS", 2)
    for org in ("a1", "a2", "a3"):
        grandbo.org(org, create=True).alerts.receive([alert_from({**ALERT, "summary": f"{org} evictions spike"})])
    _kept(grandbo, "a1")
    _kept(grandbo, "a2")
    _kept(grandbo, "a1")  # read again (from memory): now the most recent
    _kept(grandbo, "a3")
    assert [key[0] for key in grandbo._snapshots._kept] == ["a1", "a3"]
    assert len(_kept(grandbo, "a2")) == 1  # read whole again when asked


def test_an_incident_or_outcome_write_remakes_only_the_parts_made_of_it(grandbo):
    """A finding added to an incident made the snapshot read the catalog, the ledger and the settings again (a
    catalog of 1 MB took 380 ms to read): each part is read again only when a collection it is made of changed."""
    memory = grandbo.org("acme", create=True)
    memory.catalog.put([Service(name="auth-service", depends_on=["redis-sessions"])], actor="test")
    memory.runbooks.add("RB-1", "rotate the token", ["rotate it"])
    memory.ledger.record("RB-1", "succeeded", service="auth-service")
    before = grandbo._snapshots.get("acme", memory._documents)
    memory.incidents.open("login failures", services=["billing"], incident_id="INC-1")
    memory.incidents.add_finding("INC-1", "token expired", status="corroborated", runbook_id="RB-1")
    after_incident = grandbo._snapshots.get("acme", grandbo.org("acme")._documents)
    assert after_incident.topology is before.topology and after_incident.source is before.source
    assert after_incident.weights is before.weights
    assert set(after_incident.used_on("RB-1")) == {"auth-service", "billing"}  # the incidents' part is made again
    memory.ledger.record("RB-1", "failed", service="checkout")
    after_outcome = grandbo._snapshots.get("acme", grandbo.org("acme")._documents)
    assert after_outcome.topology is before.topology and after_outcome.source is not before.source
    assert after_outcome.effectiveness("RB-1").attempts == 2 and "checkout" in after_outcome.used_on("RB-1")


def test_snapshots_are_kept_for_a_bounded_number_of_organizations(grandbo, monkeypatch):
    monkeypatch.setattr(type(grandbo._snapshots), "KEPT_SNAPSHOTS", 2)
    for org in ("s1", "s2", "s3"):
        grandbo._snapshots.get(org, grandbo.org(org, create=True)._documents)
    assert list(grandbo._snapshots._by_org) == ["s2", "s3"]
    grandbo._snapshots.get("s2", grandbo.org("s2")._documents)  # read again (from memory): now the most recent
    grandbo._snapshots.get("s1", grandbo.org("s1")._documents)
    assert list(grandbo._snapshots._by_org) == ["s2", "s1"]


def test_an_org_dropped_and_created_again_by_another_process_is_not_served_from_what_was_kept(grandbo, settings):
    """A server keeps acme's alerts; a CLI (another open store) drops acme and creates it again: the server must
    not keep counting the dead org's alerts (its versions are numbered across orgs, so the new ones are higher)."""
    memory = grandbo.org("acme", create=True)
    memory.alerts.receive([alert_from({"summary": "the zanzibar relay rejected every payment"})])
    assert any(_marks("zanzibar") <= s.words for s in _kept(grandbo, "acme").values())
    at_once = settings.model_copy(update={"key_cache_seconds": 0})  # made again at once, not 2.25 s after
    with Grandbo.open(at_once) as cli:
        cli.drop_org("acme")
        cli.org("acme", create=True).alerts.receive(
            [alert_from({"summary": "disk full on the search cluster", "service": "search"})]
        )
    kept = _kept(grandbo, "acme")
    assert len(kept) == 1 and next(iter(kept.values())).words >= _marks("disk full search")


def test_a_collection_kept_with_another_converter_is_read_again_for_it(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.alerts.receive([alert_from(ALERT)])
    assert [type(s).__name__ for s in _kept(grandbo, "acme").values()] == ["Seen"]
    ids = grandbo._snapshots.kept("acme", memory._documents, ALERTS, lambda doc: doc.doc_id)
    assert ids == list(_kept(grandbo, "acme"))


def test_a_storm_written_between_two_reads_is_not_read_whole_to_learn_the_collection_is_over_its_bound(grandbo):
    """`kept` with a bound asks the store for what was written since only up to the bound: 100,000 alerts of a storm
    between two triages were read (and converted) whole once before the collection was found over it. Past the bound
    it counts afresh (one more than the bound at most), and a storm of rewrites of a few documents still reads them
    right. Fails against the unbounded read of what changed (it converted all 12)."""
    documents = grandbo.org("acme", create=True)._documents
    converted: list[str] = []

    def convert(doc):
        converted.append(doc.doc_id)
        return doc.data["n"]

    def write(ids, n):
        documents.put([DocumentWrite("note", doc_id, {"n": n}, "put", ref=doc_id) for doc_id in ids], "test")

    def kept():
        return grandbo._snapshots.kept("acme", documents, "note", convert, 5)

    write(["a", "b", "c"], 0)
    assert sorted(kept()) == [0, 0, 0]
    for n in range(1, 9):  # eight writes of one document: more writes than the bound, few documents
        write(["b"], n)
    assert sorted(kept()) == [0, 0, 8]  # counted afresh: under the bound
    write(["c"], 9)
    converted.clear()
    assert sorted(kept()) == [0, 8, 9] and converted == ["c"]  # what was written since, only
    write([f"s{n:02d}" for n in range(12)], 1)  # the storm
    converted.clear()
    assert kept() is None and converted == []  # over the bound: nothing converted, six read at most


def test_what_changed_since_a_version_is_not_read_past_a_limit_of_writes(grandbo):
    """Both backends: `changed` with a limit reads nothing when more writes than that came after the version."""
    docs = grandbo.org("acme", create=True)._documents
    docs.put([DocumentWrite("note", f"n{n}", {"n": n}, "put") for n in range(3)], "test")
    at = docs.version(["note"])
    for n in range(3):
        docs.put([DocumentWrite("note", "n0", {"n": 10 + n}, "put")], "test")
    assert docs.changed("note", at, 2) is None  # three writes, of one document
    found = docs.changed("note", at, 3)
    assert found is not None and [d.data["n"] for d in found[0]] == [12] and found[1] == []
    assert docs.changed("note", 0, 5) is None and docs.changed("note", 0, 6) is not None
