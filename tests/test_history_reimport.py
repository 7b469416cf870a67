"""A re-import whose records lack a part (a thinner export): the parts an import retired for being gone are filed
again when a later import's records have them again, and a person's retirement and a purge stay (probe 20b,
finding I1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grandbo.history.importer import import_history
from grandbo.history.registry import reader
from grandbo.model import Status
from grandbo.tiers.imported import Imported

FULL = [
    {
        "id": f"h-{n}", "title": f"checkout outage {n} due to pool exhaustion", "date": f"2024-01-0{n + 1}",
        "root_cause": f"db pool {n} exhausted", "remediation": f"raised the pool of shard{n}x to 200",
        "postmortem": f"# Outage {n}\n\nThe connection pool of shard{n}x ran dry under a retry storm.",
    }
    for n in range(5)
]  # fmt: skip
THIN = [{k: v for k, v in row.items() if k not in ("remediation", "postmortem")} for row in FULL]  # as Jira's
# search answers without `fields=*all`: no post-mortem, one finding fewer


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run(memory, path: Path, mapping: dict[str, str] | None = None):
    return import_history(memory, reader("jsonl"), path, mapping=mapping)


def _active(memory, incident_id: str) -> list[str]:
    return sorted(entry.id for entry in memory.entries() if entry.meta.get("incident_id") == incident_id)


def test_the_parts_a_thinner_export_retired_are_filed_again_by_a_full_one(memory, tmp_path):
    # Failed before (probe 20b, I1): the full export again said `entries_left_retired 10`, and every post-mortem
    # and fix stayed retired, out of recall, for good.
    full, thin = write_jsonl(tmp_path / "full.jsonl", FULL), write_jsonl(tmp_path / "thin.jsonl", THIN)
    run(memory, full)
    assert run(memory, thin).updated == 5
    assert memory.get("jsonl:h-0-postmortem").status is Status.RETIRED
    report = run(memory, full)
    assert (report.updated, report.refused) == (5, [])
    assert report.decisions["entries_restored"] == 10 and "entries_left_retired" not in report.decisions
    for n, row in enumerate(FULL):
        assert _active(memory, f"jsonl:h-{n}") == [f"jsonl:h-{n}-f1", f"jsonl:h-{n}-f2@2", f"jsonl:h-{n}-postmortem@2"]
        assert memory.get(f"jsonl:h-{n}-postmortem@2").body == row["postmortem"]
        assert memory.get(f"jsonl:h-{n}-f2@2").body.startswith(f"Remediation: {row['remediation']}")
    assert memory.get("jsonl:h-0-postmortem").status is Status.RETIRED  # its history stays as it was
    hits = memory.recall("the connection pool of shard3x ran dry under a retry storm", 3).hits
    assert hits[0].entry.id == "jsonl:h-3-postmortem@2"
    assert memory.incidents.get("jsonl:h-2").memory["f2"] == "jsonl:h-2-f2@2"  # a close's sync finds it
    memory.incidents.sync("jsonl:h-2")
    assert _active(memory, "jsonl:h-2") == ["jsonl:h-2-f1", "jsonl:h-2-f2@2", "jsonl:h-2-postmortem@2"]
    again = run(memory, full)
    assert (again.updated, again.unchanged) == (0, 5)  # the import records name the entries filed again
    run(memory, thin)
    assert run(memory, full).decisions["entries_restored"] == 10  # dropped and back once more: the next id
    assert _active(memory, "jsonl:h-0") == ["jsonl:h-0-f1", "jsonl:h-0-f2@3", "jsonl:h-0-postmortem@3"]


def test_a_part_a_person_retired_or_purged_stays_so_when_the_record_has_it_again(memory, tmp_path):
    full, thin = write_jsonl(tmp_path / "full.jsonl", FULL), write_jsonl(tmp_path / "thin.jsonl", THIN)
    run(memory, full)
    memory.retire("jsonl:h-0-postmortem", reason="written for another incident", actor="alice")
    run(memory, thin)
    memory.purge("jsonl:h-1-postmortem", reason="it held a password", actor="admin")  # retired by the import first
    report = run(memory, full)
    assert report.decisions["entries_left_retired"] == 2 and report.decisions["entries_restored"] == 8
    assert memory.find("jsonl:h-0-postmortem@2") is None and memory.find("jsonl:h-1-postmortem@2") is None
    assert memory.get("jsonl:h-0-postmortem").status is Status.RETIRED
    memory.retire("jsonl:h-2-postmortem@2", reason="duplicate of h-3", actor="alice")  # one filed again, retired
    run(memory, thin)
    again = run(memory, full)
    assert again.decisions["entries_left_retired"] == 3
    assert memory.find("jsonl:h-2-postmortem@3") is None and "jsonl:h-2-f2@3" in _active(memory, "jsonl:h-2")


def test_a_restore_killed_before_its_import_record_leaves_one_active_copy_when_run_again(memory, tmp_path, monkeypatch):
    full, thin = write_jsonl(tmp_path / "full.jsonl", FULL), write_jsonl(tmp_path / "thin.jsonl", THIN)
    run(memory, full)
    run(memory, thin)

    def dies(self, filings, actor):  # the process dies after the chunk's entries, before its import records
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(Imported, "file", dies)
        with pytest.raises(KeyboardInterrupt):
            run(memory, full)
    assert memory.get("jsonl:h-0-postmortem@2").status is Status.ACTIVE  # written before the kill
    report = run(memory, full)
    assert (report.updated, report.refused, report.decisions["entries_restored"]) == (5, [], 10)
    for n in range(5):
        assert _active(memory, f"jsonl:h-{n}") == [f"jsonl:h-{n}-f1", f"jsonl:h-{n}-f2@2", f"jsonl:h-{n}-postmortem@2"]
    assert memory.find("jsonl:h-0-postmortem@3") is None
    assert run(memory, full).unchanged == 5


def test_parts_filed_again_under_ids_cut_to_the_limit_keep_ids_of_their_own(memory, tmp_path):
    # `<source>:<id>-postmortem` is 128 characters here, all an id may have: `@2` does not fit, and the two records'
    # ids differ only past where they are cut.
    mapping = {"source": "=" + "s" * 52}
    rows = [{**row, "id": "x" * 63 + str(n)} for n, row in enumerate(FULL[:2])]
    full = write_jsonl(tmp_path / "full.jsonl", rows)
    thin = write_jsonl(tmp_path / "thin.jsonl", [{k: v for k, v in r.items() if k != "postmortem"} for r in rows])
    run(memory, full, mapping)
    run(memory, thin, mapping)
    assert run(memory, full, mapping).decisions["entries_restored"] == 2
    restored = {entry.body: entry.id for entry in memory.entries() if entry.id.endswith("@2")}
    assert set(restored) == {row["postmortem"] for row in rows}
    assert len(set(restored.values())) == 2 and all(len(entry_id) == 128 for entry_id in restored.values())
