"""A re-import of changed records keeps what people wrote to the imported incidents since (probe 21, F3): their
findings (with the memory they became), a close's resolution, a re-close's runbook, a finding of the import they
changed; it updates the rest from the source, gives the source's new findings ids no one else has, and its write
expects the incident it read, so a finding added at that very moment is kept too."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from grandbo.history.importer import import_history
from grandbo.history.registry import reader
from grandbo.history.stopped import Interrupted
from grandbo.model import Status
from grandbo.ports import DocumentWrite
from grandbo.tiers.imported import HISTORY, RUNNING
from grandbo.tiers.incident_model import INCIDENTS, FindingStatus
from grandbo.tiers.operations import OUTCOMES

RECORDS = [
    {
        "id": f"r-{n}", "title": f"redis evicted session keys {n}", "summary": f"logins failed {n}",
        "root_cause": f"maxmemory too low on cache{n}", "remediation": f"raised maxmemory of cache{n}",
        "started_at": "2026-03-01T10:00:00Z", "status": "resolved", "services": ["redis"], "runbook": "rb-cache",
    }
    for n in range(3)
]  # fmt: skip


def _imported(memory: Any, tmp_path: Path, rows: list[dict[str, Any]], name: str) -> Any:
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return import_history(memory, reader("jsonl"), path)


def _changed() -> list[dict[str, Any]]:
    """The source after it changed every record (a title), and gave the first a third finding."""
    rows = [{**row, "title": row["title"] + " (revised)"} for row in RECORDS]
    rows[0]["lesson"] = "watch the eviction rate"
    return rows


def _linked(memory: Any, incident_id: str, finding_id: str) -> Any:
    """The active entry the incident's memory map links finding `finding_id` to (following corrections)."""
    entry = memory.get(memory.incidents.get(incident_id).memory[finding_id])
    while entry.status is Status.SUPERSEDED:
        entry = memory.get(entry.superseded_by)
    return entry


def test_a_re_import_keeps_people_s_findings_and_close_and_updates_what_the_source_changed(memory, tmp_path):
    # Failed before (probe 21, F3): the incident was written from the source alone: the person's finding, the
    # close's resolution and the re-close's runbook were gone, and the finding's entry stayed active, unlinked.
    _imported(memory, tmp_path, RECORDS, "first.jsonl")
    incidents = memory.incidents
    added = incidents.add_finding("jsonl:r-0", "a person saw the keyspace fill", status="corroborated",
                                  root_cause="a batch job wrote without a TTL", actor="alice")  # fmt: skip
    assert added.id == "f3"
    incidents.close("jsonl:r-0", resolution="added TTLs to the batch job's keys", runbook_used="rb-a", actor="alice")
    incidents.close("jsonl:r-0", runbook_used="rb-ttl", actor="alice")  # re-closed naming another runbook
    incidents.sync("jsonl:r-0")
    person_entry = _linked(memory, "jsonl:r-0", "f3")
    assert "history" not in person_entry.meta

    report = _imported(memory, tmp_path, _changed(), "second.jsonl")

    assert (report.updated, report.refused) == (3, [])
    assert report.decisions["people_findings_kept"] == 1
    incident = incidents.get("jsonl:r-0")
    assert incident.title == "redis evicted session keys 0 (revised)"  # the source's change
    assert incident.resolution == "added TTLs to the batch job's keys"  # the person's close
    assert incident.runbook_used == "rb-ttl"  # the person's re-close
    findings = {finding.id: finding for finding in incident.findings}
    assert list(findings) == ["f1", "f2", "f3", "f4"]
    assert findings["f3"].summary == "a person saw the keyspace fill"
    assert findings["f4"].summary == "watch the eviction rate"  # the source's new one: the next free id
    # The person's finding is still linked to its entry, active, and theirs (not corrected into the import's):
    # corrected only to name the incident's new title
    linked = _linked(memory, "jsonl:r-0", "f3")
    assert linked.supersedes == person_entry.id and linked.status is Status.ACTIVE
    assert "batch job wrote without a TTL" in linked.body and "history" not in linked.meta
    assert linked.title == "redis evicted session keys 0 (revised): a person saw the keyspace fill"
    new_entry = _linked(memory, "jsonl:r-0", "f4")
    assert new_entry.id == "jsonl:r-0-f4"
    assert new_entry.meta["history"]["incident_id"] == "jsonl:r-0"
    assert new_entry.meta["finding_id"] == "f4"
    # An incident nobody touched is the source's as before
    assert incidents.get("jsonl:r-1").title == "redis evicted session keys 1 (revised)"
    assert [f.id for f in incidents.get("jsonl:r-1").findings] == ["f1", "f2"]
    # The next import of the same source changes nothing; a person's next finding takes the next id
    assert _imported(memory, tmp_path, _changed(), "third.jsonl").unchanged == 3
    assert incidents.add_finding("jsonl:r-0", "and another", actor="alice").id == "f5"


def test_a_finding_added_between_the_re_import_s_read_and_its_write_is_kept(memory, tmp_path):
    # Failed before: the incident was written blind over the finding (and the source's new finding took the id
    # `f3` the person's finding had, its entry corrected into the import's).
    _imported(memory, tmp_path, RECORDS, "first.jsonl")
    memory.incidents.close("jsonl:r-0", resolution="restarted the cache", actor="alice")

    def person() -> None:
        memory.incidents.add_finding("jsonl:r-0", "the eviction policy was allkeys-lru", status="corroborated",
                                     root_cause="policy allkeys-lru evicted sessions", actor="bob")  # fmt: skip

    with _before_incident_write("jsonl:r-0", person) as ran:
        report = _imported(memory, tmp_path, _changed(), "second.jsonl")
    assert ran == [True]  # the person's write landed after the import read, before it wrote the incident
    assert (report.updated, report.refused) == (3, [])
    incident = memory.incidents.get("jsonl:r-0")
    summaries = {finding.summary: finding.id for finding in incident.findings}
    assert "the eviction policy was allkeys-lru" in summaries
    assert "watch the eviction rate" in summaries
    person_id, source_id = summaries["the eviction policy was allkeys-lru"], summaries["watch the eviction rate"]
    assert person_id != source_id
    assert incident.resolution == "restarted the cache"
    assert incident.title.endswith("(revised)")
    memory.incidents.sync("jsonl:r-0")
    person_entry, source_entry = _linked(memory, "jsonl:r-0", person_id), _linked(memory, "jsonl:r-0", source_id)
    assert person_entry.id != source_entry.id
    assert "allkeys-lru evicted sessions" in person_entry.body and "history" not in person_entry.meta
    assert source_entry.meta["history"]["incident_id"] == "jsonl:r-0"


def test_an_imported_finding_a_person_refuted_stays_refuted_and_retired_when_the_source_changes_it(memory, tmp_path):
    _imported(memory, tmp_path, RECORDS, "first.jsonl")
    memory.incidents.update_finding("jsonl:r-1", "f1", status="refuted", actor="alice")
    memory.incidents.sync("jsonl:r-1")
    assert memory.get("jsonl:r-1-f1").status is Status.RETIRED
    rows = [{**row, "root_cause": row["root_cause"] + " (the vendor's words)"} for row in RECORDS]

    report = _imported(memory, tmp_path, rows, "second.jsonl")

    assert report.decisions["people_findings_kept"] == 1
    f1 = memory.incidents.get("jsonl:r-1").findings[0]
    assert (f1.id, f1.status, f1.summary) == ("f1", FindingStatus.REFUTED, "maxmemory too low on cache1")
    assert memory.get("jsonl:r-1-f1").status is Status.RETIRED  # neither corrected nor filed again
    assert memory.incidents.get("jsonl:r-2").findings[0].summary.endswith("(the vendor's words)")


def test_an_import_record_of_the_release_before_is_merged_by_the_incident_s_history(memory, tmp_path):
    # An import record without `findings` and `parts` (written before them): what the last import filed is read
    # from the incident's history, so people's work is told apart there too.
    _imported(memory, tmp_path, RECORDS, "first.jsonl")
    documents = memory.incidents.documents
    for n in range(3):
        held = documents.get(HISTORY, f"jsonl:r-{n}")
        older = {key: value for key, value in held.data.items() if key not in ("findings", "parts")}
        documents.put([DocumentWrite(HISTORY, held.doc_id, older, "history.imported", ref="jsonl")], "import")
    memory.incidents.add_finding("jsonl:r-2", "a person's finding", actor="alice")
    memory.incidents.close("jsonl:r-2", resolution="a person's resolution", actor="alice")

    report = _imported(memory, tmp_path, _changed(), "second.jsonl")

    assert (report.updated, report.refused) == (3, [])
    incident = memory.incidents.get("jsonl:r-2")
    assert [f.summary for f in incident.findings][-1] == "a person's finding"
    assert incident.resolution == "a person's resolution"
    assert incident.title.endswith("(revised)")
    assert documents.get(HISTORY, "jsonl:r-2").data["findings"] == ["f1", "f2"]


def test_an_entry_a_person_corrects_while_the_re_import_corrects_it_is_followed_not_refused(memory, tmp_path):
    # Failed before: the record was refused ("not updated: Entry ... is superseded"), and so, in probe 21's run,
    # were 71 of 300 records whose incidents a close's sync rewrote while the import ran.
    _imported(memory, tmp_path, RECORDS, "first.jsonl")

    def person() -> None:
        memory.correct("jsonl:r-0-f1", {"body": "Root cause: maxmemory too low (checked)"}, actor="alice")

    def import_corrects_f1(calls: str, local: dict[str, Any]) -> bool:
        events = local.get("events") or [] if calls == "append" else []
        return any(e.entry_id == "jsonl:r-0-f1" and e.type.value == "corrected" for e in events)

    with _before(import_corrects_f1, person) as ran:
        report = _imported(memory, tmp_path, _changed(), "second.jsonl")
    assert ran == [True]
    assert (report.updated, report.refused) == (3, [])
    entry = _linked(memory, "jsonl:r-0", "f1")
    assert entry.title == "redis evicted session keys 0 (revised): maxmemory too low on cache0"  # the source's
    assert memory.get("jsonl:r-0-f1").superseded_by != entry.id  # after the person's correction, not over it


def test_a_re_import_stopped_between_its_incident_and_its_entries_resumes_with_the_same_ids(memory, tmp_path):
    _imported(memory, tmp_path, RECORDS, "first.jsonl")
    memory.incidents.add_finding("jsonl:r-0", "a person's finding", status="corroborated", actor="alice")

    def writes_entries(calls: str, local: dict[str, Any]) -> bool:
        return calls == "append" and any(e.entry_id == "jsonl:r-0-f4" for e in local.get("events") or [])

    def stop() -> None:
        raise KeyboardInterrupt

    with pytest.raises(Interrupted), _before(writes_entries, stop):
        _imported(memory, tmp_path, _changed(), "second.jsonl")
    assert [f.id for f in memory.incidents.get("jsonl:r-0").findings] == ["f1", "f2", "f3", "f4"]  # written first
    assert memory.find("jsonl:r-0-f4") is None

    report = _imported(memory, tmp_path, _changed(), "second.jsonl")  # the same import again resumes

    assert (report.updated, report.refused) == (3, [])
    incident = memory.incidents.get("jsonl:r-0")
    assert [(f.id, f.summary) for f in incident.findings][2:] == [("f3", "a person's finding"),
                                                                  ("f4", "watch the eviction rate")]  # fmt: skip
    assert memory.get("jsonl:r-0-f4").meta["history"]["incident_id"] == "jsonl:r-0"
    assert (
        _linked(memory, "jsonl:r-0", "f1").title
        == "redis evicted session keys 0 (revised): maxmemory too low on cache0"
    )
    assert _imported(memory, tmp_path, _changed(), "third.jsonl").unchanged == 3


def test_a_re_import_that_changes_the_title_brings_people_s_findings_memory_to_it(memory, tmp_path):
    # Failed before: the memory of a person's finding (and of the import's finding they changed) kept the old
    # incident title until the incident's next sync, while the import's own findings had the new one.
    _imported(memory, tmp_path, RECORDS, "first.jsonl")
    incidents = memory.incidents
    incidents.add_finding("jsonl:r-0", "a person saw the keyspace fill", status="corroborated", actor="alice")
    incidents.update_finding("jsonl:r-0", "f2", summary="raised maxmemory of cache0 to 8 GB", actor="alice")
    incidents.close("jsonl:r-0", resolution="added TTLs", actor="alice")
    incidents.sync("jsonl:r-0")
    assert _linked(memory, "jsonl:r-0", "f3").title == "redis evicted session keys 0: a person saw the keyspace fill"

    report = _imported(memory, tmp_path, _changed(), "second.jsonl")

    assert (report.updated, report.refused) == (3, [])
    person = _linked(memory, "jsonl:r-0", "f3")
    assert person.title == "redis evicted session keys 0 (revised): a person saw the keyspace fill"
    assert "history" not in person.meta and person.status is Status.ACTIVE
    changed = _linked(memory, "jsonl:r-0", "f2")
    assert changed.title == "redis evicted session keys 0 (revised): raised maxmemory of cache0 to 8 GB"
    assert (
        memory.history(person.supersedes)[-1].payload["reason"] == "re-import of jsonl:r-0: the source's record changed"
    )
    assert incidents.get("jsonl:r-0").memory["f3"] == person.id  # the incident names the entry corrected into
    incidents.sync("jsonl:r-0")  # the next sync finds nothing to change in them
    assert (_linked(memory, "jsonl:r-0", "f3").id, _linked(memory, "jsonl:r-0", "f2").id) == (person.id, changed.id)
    assert _imported(memory, tmp_path, _changed(), "third.jsonl").unchanged == 3


def test_an_import_run_records_one_event_with_its_counts_beside_each_record_s_own(memory, tmp_path):
    # Failed before: the run's event (the end of its lease) recorded nothing; its counts were in a log line only.
    _imported(memory, tmp_path, RECORDS, "first.jsonl")
    memory.incidents.add_finding("jsonl:r-0", "a person's finding", status="corroborated", actor="alice")
    _imported(memory, tmp_path, _changed(), "second.jsonl")

    documents = memory.incidents.documents
    ended = [event for event in documents.history(HISTORY, RUNNING) if event["type"] == "history.import_ended"]
    assert [(event["data"]["imported"], event["data"]["updated"]) for event in ended] == [(3, 0), (0, 3)]
    assert ended[-1]["data"]["decisions"]["people_findings_kept"] == 1
    assert (ended[-1]["data"]["refused"], ended[-1]["data"]["finished"], ended[-1]["actor"]) == (0, True, "import")
    # Each changed record: its import record written with the merged incident (naming the ids it gave the source's
    # new findings, so a killed import resumes with them), then once its entries are
    assert [event["type"] for event in documents.history(HISTORY, "jsonl:r-0")] == [
        "history.imported", "history.reimporting", "history.reimported"
    ]  # fmt: skip


def _outcome(memory: Any, incident_id: str) -> dict[str, Any]:
    """The ledger's result of rb-cache on the incident, as stored."""
    return memory.incidents.documents.get(OUTCOMES, f"outcome:{incident_id}:rb-cache:result").data


def test_a_re_import_keeps_the_result_a_person_s_close_recorded_for_the_runbook(memory, tmp_path):
    # Failed before: the changed record's outcome was written blind under the id a close's result shares, so the
    # source's "succeeded" replaced the failure the person recorded when they closed the incident.
    rows = [{**row, "runbook_succeeded": True} for row in RECORDS]
    _imported(memory, tmp_path, rows, "first.jsonl")
    assert _outcome(memory, "jsonl:r-0")["comment"] == "imported from jsonl"
    memory.incidents.close("jsonl:r-0", runbook_used="rb-cache", succeeded=False, actor="alice")
    memory.incidents.close("jsonl:r-2", runbook_used="rb-cache", succeeded=True, actor="alice")  # as the source
    memory.incidents.sync("jsonl:r-0")
    memory.incidents.sync("jsonl:r-2")
    assert _outcome(memory, "jsonl:r-0")["kind"] == "failed"
    changed = [{**row, "runbook_succeeded": n == 0} for n, row in enumerate(_changed())]  # r-1, r-2: now failed

    report = _imported(memory, tmp_path, changed, "second.jsonl")

    person = _outcome(memory, "jsonl:r-0")
    assert (person["kind"], person["comment"]) == ("failed", "close of incident jsonl:r-0")  # the person's
    assert _outcome(memory, "jsonl:r-2")["kind"] == "succeeded"  # the person's close said so (the same as the import)
    assert _outcome(memory, "jsonl:r-1")["kind"] == "failed"  # nobody's but the import's: the source's change
    assert (report.updated, report.refused) == (3, [])
    assert report.decisions["people_outcomes_kept"] == 2
    assert _imported(memory, tmp_path, changed, "third.jsonl").unchanged == 3


def test_a_close_s_result_recorded_between_the_re_import_s_read_and_its_write_is_kept(memory, tmp_path):
    # Failed before: the import's outcome (the source now says the runbook worked), written blind after the
    # close's sync recorded the person's result of the same runbook, replaced it.
    _imported(memory, tmp_path, [{**row, "runbook_succeeded": False} for row in RECORDS], "first.jsonl")
    outcome_id = "outcome:jsonl:r-0:rb-cache:result"

    def person() -> None:  # the failure again, with the time it took: the result is theirs now
        memory.incidents.close("jsonl:r-0", runbook_used="rb-cache", succeeded=False, time_to_mitigate_s=600,
                               actor="bob")  # fmt: skip
        memory.incidents.sync("jsonl:r-0")

    def puts_the_outcome(calls: str, local: dict[str, Any]) -> bool:
        writes = local.get("writes") or [] if calls == "put" else []
        return any(w.collection == OUTCOMES and w.doc_id == outcome_id for w in writes)

    with _before(puts_the_outcome, person) as ran:
        report = _imported(memory, tmp_path, [{**row, "runbook_succeeded": True} for row in _changed()], "b.jsonl")
    assert ran == [True]
    person_result = _outcome(memory, "jsonl:r-0")
    assert (person_result["kind"], person_result["time_to_mitigate_s"]) == ("failed", 600)
    assert person_result["actor"] == "bob"
    assert _outcome(memory, "jsonl:r-1")["kind"] == "succeeded"  # the source's change, where no one else wrote
    assert (report.updated, report.refused) == (3, [])
    assert report.decisions["people_outcomes_kept"] == 1
    assert memory.incidents.get("jsonl:r-0").title.endswith("(revised)")


@contextmanager
def _before_incident_write(incident_id: str, write: Callable[[], None]) -> Iterator[list[bool]]:
    """`_before` the first write of the import that puts incident `incident_id`."""

    def puts_it(calls: str, local: dict[str, Any]) -> bool:
        writes = local.get("writes") or [] if calls == "put" else []
        return any(
            w.collection == INCIDENTS and w.doc_id == incident_id and w.event.startswith("history.") for w in writes
        )

    with _before(puts_it, write) as ran:
        yield ran


@contextmanager
def _before(when: Callable[[str, dict[str, Any]], bool], write: Callable[[], None]) -> Iterator[list[bool]]:
    """Run `write` (a person's write, through the real tiers) once, in the import's thread, just before the first
    call of the org's scoped store (`store/scoped.py`: `put` of documents, `append` of entry events) that `when`
    says (given the method's name and arguments) is the import's: a scheduler for one interleaving, nothing
    replaced."""
    ran: list[bool] = []

    def profile(frame: Any, event: str, _: Any) -> None:
        code = frame.f_code
        if ran or event != "call" or not code.co_filename.endswith("store/scoped.py"):
            return
        if when(code.co_name, frame.f_locals):
            ran.append(True)
            sys.setprofile(None)
            try:
                write()
            finally:
                sys.setprofile(profile)

    sys.setprofile(profile)
    try:
        yield ran
    finally:
        sys.setprofile(None)
