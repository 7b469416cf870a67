"""What a received alert keeps of its recall: enough to show and cite, never the whole of every memory it found
(a hostile probe filled the shared disk with it)."""

from __future__ import annotations

from tests.serving import serving


def test_an_alert_does_not_store_the_whole_body_of_every_memory_its_recall_found(grandbo, raw):
    """Each received alert keeps its recall with every hit's whole entry, bodies up to 200,000 characters, in the
    alert document and again in its `alert.recalled` event: one 26 KiB delivery of 100 alerts matching three long
    post-mortems stored 116 MiB (4,494 times the request) in the store every organization shares, so one write
    key fills the disk (and then every organization's writes answer 507) within minutes."""
    acme = grandbo.org("acme", create=True)
    words = "checkout-api connection pool exhausted under load; p99 above two seconds; rollback fixed it. "
    for n in range(3):
        body = (words * (200_000 // len(words) + 1))[:200_000]
        acme.remember({"id": f"PM-{n}", "title": f"checkout-api pool exhausted during deploy {n}", "body": body,
                       "kind": "finding", "services": ["checkout-api"]})  # fmt: skip
    grandbo.backfill()
    key = acme.keys.create("write")[1]
    alert = {"status": "firing", "labels": {"alertname": "PoolExhausted", "service": "checkout-api"},
             "annotations": {"summary": "checkout-api connection pool exhausted, p99 above two seconds"},
             "startsAt": "2026-12-05T09:00:00Z", "fingerprint": "f1"}  # fmt: skip
    with serving(grandbo) as served, served.client(key) as client:
        answer = client.post("/v1/webhooks/alertmanager", json={"version": "4", "alerts": [alert]})
    assert answer.status_code == 202, answer.text
    assert answer.json()["alerts"][0]["top_match"], answer.text  # the recall found the post-mortems
    stored = raw("SELECT SUM(LENGTH(CAST(data AS TEXT))) FROM documents WHERE org_id = %s AND collection = 'alert'",
                 ("acme",), org="acme")[0][0]  # fmt: skip
    events = raw("SELECT SUM(LENGTH(CAST(data AS TEXT))) FROM document_events WHERE org_id = %s AND collection = 'alert'",
                 ("acme",), org="acme")[0][0]  # fmt: skip
    assert stored + events < 64 * 1024, f"one alert stored {stored + events:,} bytes"
    with serving(grandbo) as served, served.client(key) as client:
        shown = client.get(answer.json()["alerts"][0]["href"]).json()
    hits = shown["recall"]["hits"]
    assert {hit["entry"]["id"] for hit in hits} >= {"PM-0", "PM-1", "PM-2"}
    assert all(len(hit["entry"]["body"]) <= 1_000 + len(" [...]") for hit in hits)
    assert hits[0]["entry"]["body"].startswith(words) and hits[0]["entry"]["body"].endswith(" [...]")
    assert any("GET /v1/memories/{id} has each whole" in note for note in shown["recall"]["notes"])
    with serving(grandbo) as served, served.client(key) as client:  # the memory itself is whole
        assert len(client.get(f"/v1/memories/{hits[0]['entry']['id']}").json()["entry"]["body"]) == 200_000


def test_a_hits_large_meta_is_left_out_and_a_small_one_kept(memory):
    """The other half of what an alert keeps: a memory's meta over KEPT_META_BYTES is left out (noted), one under
    it kept as it is; a recall with nothing to cut is kept unchanged, without the note."""
    from grandbo.tiers.alerts import KEPT_META_BYTES, kept

    memory.remember({"id": "BIG", "title": "checkout-api pool exhausted, big meta", "kind": "finding",
                     "meta": {"trace": "x" * (KEPT_META_BYTES + 100)}})  # fmt: skip
    memory.remember({"id": "SMALL", "title": "checkout-api pool exhausted, small meta", "kind": "finding",
                     "meta": {"runbook_id": "RB-1"}})  # fmt: skip
    result = memory.recall("checkout-api connection pool exhausted", 5)
    stored = kept(result)
    assert stored is not None
    metas = {hit.entry.id: hit.entry.meta for hit in stored.hits}
    assert metas["BIG"] == {} and metas["SMALL"] == {"runbook_id": "RB-1"}
    assert any("meta over" in note for note in stored.notes)
    small_only = result.model_copy(update={"hits": [hit for hit in result.hits if hit.entry.id == "SMALL"]})
    assert len(small_only.hits) == 1 and kept(small_only) == small_only  # nothing cut: as it was, no note
    assert kept(None) is None
