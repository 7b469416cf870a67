"""`grandbo import-events` of an export whose outcome documents were edited by hand (or written by an older release)
into what the ledger cannot read: the file is refused, nothing written, each named by line, id and field, with the
remedy; with --skip-bad-outcomes the rest is filed and those left out are named. Before, they were filed: the whole
read of the ledger left them out while the store's counts took them (1/2 against 1/1, review 24b MEDIUM 4)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from grandbo.errors import ImportFormatError
from grandbo.service import Grandbo
from grandbo.tiers.effectiveness import summarize
from tests.plain_ledger import every_outcome

BROKEN: dict[str, dict[str, Any]] = {  # outcome id -> what the hand edit changed
    "o-at": {"at": "last tuesday"},
    "o-rating": {"rating": "up"},
    "o-service": {"service": 5},
    "o-ttm": {"time_to_mitigate_s": -30},
}


def _exported(grandbo: Grandbo, path: Path) -> None:
    """Org acme's export, with the outcomes of BROKEN edited as BROKEN says (its checksum written again)."""
    acme = grandbo.org("acme", create=True)
    acme.runbooks.add("RB-1", "Restart the pool", ["restart", "verify"])
    acme.ledger.record("RB-1", "succeeded", service="svc-a", time_to_mitigate_s=60, outcome_id="o-good")
    acme.ledger.record("RB-1", "failed", service="svc-a", outcome_id="o-failed")
    for outcome_id in BROKEN:
        kind = "rated" if outcome_id == "o-rating" else "succeeded"
        acme.ledger.record("RB-1", kind, service="svc-a", rating=1 if kind == "rated" else None, outcome_id=outcome_id)
    acme.export_log(path)
    lines = path.read_bytes().splitlines(keepends=True)[:-1]
    for number, line in enumerate(lines):
        record = json.loads(line)
        held = record.get("document")
        if held and held["collection"] == "outcome" and held["doc_id"] in BROKEN:
            held["data"] = {**held["data"], **BROKEN[held["doc_id"]]}
            lines[number] = (json.dumps(record) + "\n").encode()
    checksum = {"checksum": {"sha256": hashlib.sha256(b"".join(lines)).hexdigest(), "lines": len(lines)}}
    path.write_bytes(b"".join(lines) + (json.dumps(checksum) + "\n").encode())


def test_an_export_of_outcomes_the_ledger_cannot_read_is_refused_or_filed_without_them(grandbo, tmp_path):
    _exported(grandbo, tmp_path / "log.jsonl")
    copy = grandbo.org("copy", create=True)
    with pytest.raises(ImportFormatError) as refused:
        copy.import_log(tmp_path / "log.jsonl")
    message = refused.value.message
    assert message.startswith(f"4 outcome document(s) of {tmp_path / 'log.jsonl'} cannot be read as outcomes: line ")
    for outcome_id, field in [("o-at", "at"), ("o-rating", "rating"), ("o-service", "service"),
                              ("o-ttm", "time_to_mitigate_s")]:  # fmt: skip
        assert f"'{outcome_id}' ({field})" in message
    assert "Nothing was imported" in message and "--skip-bad-outcomes" in message
    assert [o["id"] for o in refused.value.detail["outcomes"]] == sorted(BROKEN)  # in the file's order
    assert copy._documents.version() == 0 and not copy.entries()  # nothing written: it can be imported again
    report = copy.import_log(tmp_path / "log.jsonl", skip_bad_outcomes=True)
    assert [o["id"] for o in report.outcomes_left_out] == sorted(BROKEN)
    assert report.outcomes_left_out[0]["line"] > 1 and report.outcomes_left_out[0]["fields"] == ["at"]
    assert any(note.startswith("4 outcome document(s) left out (--skip-bad-outcomes)") for note in report.notes)
    outcomes = every_outcome(copy)
    assert sorted(o.kind.value for o in outcomes) == ["failed", "succeeded"]  # o-good and o-failed only
    record = copy.ledger.tally().effectiveness("RB-1")
    assert record == summarize("RB-1", outcomes) == copy.ledger.effectiveness("RB-1")
    assert (record.successes, record.attempts) == (1, 2)


def test_import_events_names_the_outcomes_it_refuses_and_skips_them_when_asked(cli, tmp_path):
    with Grandbo.open() as grandbo:
        _exported(grandbo, tmp_path / "log.jsonl")
    cli("orgs", "create", "copy")
    out = cli("import-events", str(tmp_path / "log.jsonl"), "--org", "copy", code=2)
    said = out.stdout + out.stderr
    assert "Traceback" not in said and said.startswith("error: 4 outcome document(s) of ")
    assert "'o-rating' (rating)" in said and "--skip-bad-outcomes" in said
    out = cli("import-events", str(tmp_path / "log.jsonl"), "--org", "copy", "--skip-bad-outcomes", "--json")
    report = json.loads(out.stdout)
    assert [o["id"] for o in report["outcomes_left_out"]] == sorted(BROKEN)
    assert any("4 outcome document(s) left out" in note for note in report["notes"])
    stats = cli("runbook", "stats", "RB-1", "--org", "copy")
    assert stats.stdout.startswith("RB-1: 1 of 2 attempts succeeded"), stats.stdout
