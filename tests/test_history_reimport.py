"""A re-import whose records lack a part (a thinner export, a `--map` naming a key no line has): the parts an
import retired for being gone are filed again when a later import's records have them again, a person's
retirement and a purge stay, and a jsonl `--map` naming a key no line has is refused before anything is read
(probe 20b, finding I1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grandbo.errors import InvalidInputError
from grandbo.history.importer import import_history
from grandbo.history.registry import reader
from grandbo.history.sources.tabular import JSONL
from grandbo.model import Status
from grandbo.tiers.imported import Imported
from tests.serving import serving

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


def test_a_jsonl_map_naming_a_key_no_line_has_is_refused_before_anything_is_written(memory, tmp_path):
    # Failed before (probe 20b, I1): `--map title=titel,postmortem=pm_body` read every record without its title and
    # post-mortem, exit 0, and the re-import retired every post-mortem. csv refused it from its header.
    path = write_jsonl(tmp_path / "full.jsonl", FULL)
    run(memory, path)
    seq, _ = memory.changed_since(0)
    with pytest.raises(InvalidInputError) as refused:
        run(memory, path, mapping={"title": "titel", "postmortem": "pm_body"})
    assert refused.value.message.startswith(
        "--map names column(s) pm_body, titel that no line of full.jsonl has as a key"
    )
    assert refused.value.detail == {
        "missing": ["pm_body", "titel"], "keys": ["date", "id", "postmortem", "remediation", "root_cause", "title"],
    }  # fmt: skip
    assert memory.changed_since(seq) == (seq, [])  # not one entry event
    assert memory.get("jsonl:h-0-postmortem").status is Status.ACTIVE


def test_a_jsonl_map_key_first_seen_late_or_escaped_is_read_and_an_empty_file_is_not_refused(tmp_path):
    rows = [{"id": f"L{n}", "title": f"queue backlog on worker {n}"} for n in range(300)]
    rows[250]["sévérité"] = "P1"  # past the lines every key is read from; json.dumps writes it s\u00e9v\u00e9rit\u00e9
    rows[299]["fix"] = "drained the queue"
    path = write_jsonl(tmp_path / "late.jsonl", rows)
    records = list(JSONL.read(path, {"severity": "sévérité", "remediation": "fix"}))
    assert len(records) == 300 and records[250].severity == "P1"
    assert [finding.text for finding in records[299].findings] == ["drained the queue"]
    with pytest.raises(InvalidInputError, match=r"column\(s\) fixed that no line of late\.jsonl has as a key"):
        list(JSONL.read(path, {"remediation": "fixed"}))
    empty = tmp_path / "empty.jsonl"  # a day's export with no incident: nothing a mapping could misread
    empty.write_text("\n")
    assert list(JSONL.read(empty, {"title": "titel"})) == []


def test_the_cli_refuses_a_jsonl_map_naming_no_key_and_reports_the_parts_filed_again(cli, tmp_path):
    full, thin = write_jsonl(tmp_path / "full.jsonl", FULL), write_jsonl(tmp_path / "thin.jsonl", THIN)
    cli("orgs", "create", "acme")
    cli("import-from", "jsonl", str(full), "--org", "acme")
    refused = cli("import-from", "jsonl", str(full), "--map", "title=titel", "--org", "acme", code=2)
    assert refused.stderr.startswith("error: --map names column(s) titel that no line of full.jsonl has as a key")
    assert "Traceback" not in refused.stderr
    cli("import-from", "jsonl", str(thin), "--org", "acme")
    printed = cli("import-from", "jsonl", str(full), "--org", "acme").stdout
    assert "entries_restored 10" in printed and "entries_left_retired" not in printed


def test_the_rest_route_refuses_a_jsonl_map_naming_no_key_with_a_422(grandbo):
    memory = grandbo.org("acme", create=True)
    _, admin = memory.keys.create("admin")
    body = "".join(json.dumps(row) + "\n" for row in FULL).encode()
    with serving(grandbo) as served, served.client(admin) as client:
        refused = client.post("/v1/import-from/jsonl?map=title=titel", content=body)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert "titel that no line of" in error["message"] and error["detail"]["missing"] == ["titel"]
