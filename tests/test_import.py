import json

import pytest

from grandbo.errors import ImportFormatError
from grandbo.importer import entry_from_record, import_file


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_malformed_lines_are_reported_by_number_and_the_rest_imported(tmp_path, memory):
    path = write_lines(
        tmp_path / "in.jsonl",
        [
            json.dumps({"id": "ok-1", "title": "checkout-api 503s", "body": "pool exhausted", "kind": "finding"}),
            "{not json",
            json.dumps({"title": ""}),
            json.dumps({"id": "ok-2", "title": "redis eviction storm", "severity": "P2", "tags": ["INC-044"]}),
            json.dumps({"id": "ok-1", "title": "duplicate id in the same file"}),
            json.dumps({"title": "bad severity", "severity": "sev9"}),
            "",
            json.dumps(["not", "an", "object"]),
            json.dumps({"title": "unknown field", "colour": "blue"}),
        ],
    )
    report = import_file(memory, path)
    assert report.imported == 2
    lines = dict(report.problems)
    assert sorted(lines) == [2, 3, 5, 6, 8, 9]
    assert "not valid JSON" in lines[2]
    assert "title" in lines[3]
    assert "duplicate id 'ok-1' (first on line 1)" in lines[5]
    assert "sev1..sev5" in lines[6]
    assert "JSON object" in lines[8]
    assert "colour" in lines[9]
    assert memory.get("ok-2").severity.value == "sev2"


def test_reimporting_skips_existing_ids_without_failing(tmp_path, memory):
    path = write_lines(tmp_path / "in.jsonl", [json.dumps({"id": "a", "title": "first entry"})])
    assert import_file(memory, path).imported == 1
    again = import_file(memory, path)
    assert again.imported == 0 and "already exists" in again.problems[0][1]


def test_beir_lines_become_entries_with_their_metadata():
    entry = entry_from_record(
        {
            "_id": "D1",
            "title": "T",
            "text": "body text",
            "metadata": {"kind": "runbook", "services": ["Auth-Service"], "ignored": 1},
        }
    )
    assert (entry.id, entry.title, entry.body, entry.kind.value, entry.services) == (
        "D1",
        "T",
        "body text",
        "runbook",
        ["auth-service"],
    )
    assert entry.source.value == "import"


def test_non_object_is_a_format_error():
    with pytest.raises(ImportFormatError):
        entry_from_record("just a string")
