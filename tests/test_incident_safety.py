"""Closing an incident loses nothing and never duplicates: the post-mortem and the runbook outcome survive a
failed write-behind, and a sync that died between a correction and saving its mapping leaves one copy."""

from __future__ import annotations

import contextlib
import threading

import pytest
import structlog

from grandbo.errors import ConflictError
from grandbo.model import Status
from tests.test_incidents import hold_write_behind, investigate, store_out_of_reach


@pytest.mark.brief_lock_waits  # the test locks the file on purpose
def test_a_failed_write_behind_keeps_the_post_mortem_and_the_outcome_for_sync(
    grandbo, background, settings, backend, request
):
    pg_server = request.getfixturevalue("pg_server") if backend == "postgres" else None
    memory = background.org("acme", create=True)
    investigate(memory.incidents)
    gate = hold_write_behind(memory)
    memory.incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True, postmortem="Eviction storm: LRU policy.")
    with structlog.testing.capture_logs() as logs, store_out_of_reach(backend, settings, pg_server) as cut:
        gate.set()
        cut(lambda: any(line["event"] == "write_behind.failed" for line in logs))
        background.flush(timeout=60)
    assert any(line["event"] == "write_behind.failed" for line in logs)
    assert memory.incidents.get("INC-100").pending_postmortem == "Eviction storm: LRU policy."
    for _ in range(2):  # the repair, then a retry of it: counted once
        memory.incidents.sync("INC-100")
    postmortem = memory.get("INC-100-postmortem")
    assert postmortem.kind.value == "post-mortem" and postmortem.body == "Eviction storm: LRU policy."
    assert memory.ledger.effectiveness("RB-LRU").attempts == 1
    synced = memory.incidents.get("INC-100")
    assert synced.memory_sync == "done" and synced.pending_postmortem is None and synced.pending_outcome is None


def test_a_sync_that_died_between_a_correction_and_its_mapping_leaves_one_active_copy(memory):
    incidents = memory.incidents
    investigate(incidents)
    incidents.close("INC-100")
    (entry,) = memory.entries()
    # What an edit's sync did before the process died: the correction committed, the mapping never saved.
    memory.correct(entry.id, {"body": entry.body + "\nRemediation: volatile-lru"}, reason="edited")
    incidents.edit("INC-100", title="Login latency spike on auth")  # its sync now corrects again
    incidents.sync("INC-100")
    active = [e for e in memory.entries() if e.meta.get("finding_id") == "f1"]
    assert len(active) == 1 and active[0].title.startswith("Login latency spike on auth")
    assert memory.get(entry.id).status is Status.SUPERSEDED


def test_two_syncs_racing_write_one_copy(memory):
    incidents = memory.incidents
    investigate(incidents)
    incidents.update_finding("INC-100", "f2", status="corroborated")
    memory.incidents.close("INC-100")
    incidents.update_finding("INC-100", "f1", status="refuted")
    incidents.update_finding("INC-100", "f1", status="corroborated")  # written anew, under INC-100-f1-2

    def sync():
        with contextlib.suppress(ConflictError):  # a sync that lost the race to save the mapping says so
            incidents.sync("INC-100")

    threads = [threading.Thread(target=sync) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    ids = sorted(e.id for e in memory.entries())
    assert ids == ["INC-100-f1-2", "INC-100-f2"]


def test_an_incident_stored_unreadable_is_named_and_the_others_still_list(grandbo, memory):
    """A stored incident that fails its model (an older release's, or one an erasure or a pattern lengthened)
    made every listing of incidents a raw validation error: a 500 over REST, a traceback on the CLI."""
    from grandbo.errors import UnreadableRecordError
    from grandbo.ports import DocumentWrite
    from tests.serving import serving

    memory.incidents.open("checkout latency after the deploy", incident_id="INC-OK")
    good = memory._documents.get("incident", "INC-OK")
    broken = {**good.data, "id": "INC-BAD", "title": "x" * 600}  # over the title's 500 characters
    memory._documents.put([DocumentWrite("incident", "INC-BAD", broken, "incident.opened", ref="open")], "test")
    assert [i.id for i in memory.incidents.find()] == ["INC-OK"]
    with pytest.raises(UnreadableRecordError, match="incident 'INC-BAD' cannot be read: title") as refused:
        memory.incidents.get("INC-BAD")
    assert refused.value.detail["fields"] == ["title"]
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        listed = client.get("/v1/incidents")
        one = client.get("/v1/incidents/INC-BAD")
    assert listed.status_code == 200 and [i["id"] for i in listed.json()["items"]] == ["INC-OK"]
    assert one.status_code == 500 and one.json()["error"]["type"] == "record_unreadable"
    assert "grandbo export" in one.json()["error"]["message"]
